"""A KL averaged over the batch's tokens apart from the policy term (OpenRLHF's separate
`kl_loss`, run on its GSPO path, where the policy term is a per-sequence mean) fails
`kl.loss_kl_gradient` with a cause that names that design and how to declare it, and passes once
the kl stage is declared `custom`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from checker.candidate import resolve_target
from checker.checks import all_checks
from checker.sandbox import run_in_process

SEED = 1234

LOSS = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 ref_per_token_logps=None, beta=0.0, epsilon_low=0.2):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    policy = ((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()  # per-sequence mean
    if beta == 0.0:
        return policy
    d = ref_per_token_logps - per_token_logps
    kl = torch.exp(d) - d - 1
    return policy + beta * (kl * mask).sum() / mask.sum().clamp(min=1)  # a token mean of its own
"""


def _kl_results(tmp_path: Path, custom: str = "") -> dict:
    (tmp_path / "candidate.py").write_text(textwrap.dedent(LOSS))
    yaml = "path: candidate.py\nconfig:\n  loss_type: grpo\n  clipping: symmetric\n"
    yaml += "  use_bias_correction_kl: false\n  beta: 0.04\n" + custom
    (tmp_path / "candidate.yaml").write_text(yaml)
    target = resolve_target(str(tmp_path / "candidate.yaml"))
    return {r.check: r for r in run_in_process(target, all_checks(("kl",)), SEED)}


def test_a_kl_averaged_apart_is_named_with_its_declaration(tmp_path):
    result = _kl_results(tmp_path)["kl.loss_kl_gradient"]
    assert result.status == "fail", result.message
    assert "averaged over the batch's tokens apart from the policy term" in result.message
    assert "custom: {kl:" in result.message


def test_declared_custom_the_kl_checks_skip(tmp_path):
    results = _kl_results(tmp_path, "custom:\n  kl: OpenRLHF-style kl_loss, a token mean\n")
    assert {r.status for r in results.values()} == {"skip"}
