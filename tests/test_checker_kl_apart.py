"""A KL aggregated apart from the policy term (OpenRLHF's separate `kl_loss`, a token mean, run
on its GSPO path where the policy term is a per-sequence mean) is a convention: undeclared,
`kl.loss_kl_gradient` fails and names `kl_aggregation: token-mean`; declared, every kl check
passes; `profile --write` measures and writes it; and a KL aggregated apart some other way than
declared still fails.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from candidate_support import check_results, json_report, profiled

from checker import conventions
from checker.candidate import TargetError, resolve_target

# The policy term is a mean of row means (loss_type grpo); the KL, `KL_MEAN`, is added after.
LOSS = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 ref_per_token_logps=None, beta=0.0, epsilon_low=0.2, loss_type="grpo"):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    if loss_type == "dr_grpo":
        policy = (token * mask).sum() / (mask.size(0) * mask.size(1))
    else:
        policy = ((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    if beta == 0.0:
        return policy
    d = ref_per_token_logps - per_token_logps
    kl = torch.exp(d) - d - 1
    return policy + beta * KL_MEAN
"""
TOKEN_MEAN = "(kl * mask).sum() / mask.sum().clamp(min=1)"  # OpenRLHF's masked_mean(kl, mask)
ROW_MEAN = "((kl * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()"


def _write(folder: Path, kl_mean: str = TOKEN_MEAN, config: str = "") -> Path:
    (folder / "candidate.py").write_text(textwrap.dedent(LOSS).replace("KL_MEAN", kl_mean))
    yaml_text = "path: candidate.py\nconfig:\n  loss_type: grpo\n  clipping: symmetric\n"
    yaml_text += "  use_bias_correction_kl: false\n  beta: 0.04\n" + config
    (folder / "candidate.yaml").write_text(yaml_text)
    return folder / "candidate.yaml"


def _kl_results(path: Path) -> dict:
    return check_results(path, ("kl",))


def test_undeclared_the_gradient_check_names_the_declaration(tmp_path):
    result = _kl_results(_write(tmp_path))["kl.loss_kl_gradient"]
    assert result.status == "fail", result.message
    assert "aggregated apart from the policy term, as verl's token-mean" in result.message
    assert "declare kl_aggregation: token-mean" in result.message


def test_declared_every_kl_check_passes(tmp_path):
    results = _kl_results(_write(tmp_path, config="  kl_aggregation: token-mean\n"))
    assert {r.status for r in results.values()} <= {"pass", "skip"}, {
        k: r.message for k, r in results.items() if r.status != "pass"
    }
    passed = {k for k, r in results.items() if r.status == "pass"}
    assert {"kl.loss_kl_gradient", "kl.loss_adds_beta_times_k3"} <= passed


def test_declared_under_dr_grpo_the_kl_share_is_checked(tmp_path):
    """Under dr_grpo the policy weights sum to sum(len) / (B * T), not 1: the value check must
    divide the token-mean KL's total weight (1) by that, and a wrongly scaled KL fails it."""
    config = "  kl_aggregation: token-mean\n"
    good = _write(tmp_path, config=config)
    good.write_text(good.read_text().replace("loss_type: grpo", "loss_type: dr_grpo"))
    results = _kl_results(good)
    assert results["kl.loss_adds_beta_times_k3"].status == "pass", results[
        "kl.loss_adds_beta_times_k3"
    ].message
    bad = _write(tmp_path, kl_mean=f"2 * {TOKEN_MEAN}", config=config)
    bad.write_text(bad.read_text().replace("loss_type: grpo", "loss_type: dr_grpo"))
    assert _kl_results(bad)["kl.loss_adds_beta_times_k3"].status == "fail"


def test_a_kl_aggregated_otherwise_than_declared_fails(tmp_path):
    """Declared a token mean, aggregated as a mean of row means: with the policy term also a mean
    of row means this is TRL's layout, and the cause says the KL joins the policy term."""
    path = _write(tmp_path, kl_mean=ROW_MEAN, config="  kl_aggregation: token-mean\n")
    result = _kl_results(path)["kl.loss_kl_gradient"]
    assert result.status == "fail", result.message
    assert "joins the policy term's aggregation" in result.message


def test_profile_writes_the_kl_aggregation_and_the_written_yaml_passes(tmp_path):
    _write(tmp_path)
    (tmp_path / "candidate.yaml").unlink()
    document = profiled(tmp_path)
    assert document["config"]["kl_aggregation"] == "token-mean", document
    report = json_report(tmp_path, "cfg.yaml", "--stage", "kl")
    bad = [r for r in report["results"] if r["status"] in ("fail", "error")]
    assert not bad, bad
    assert report["summary"]["pass"] >= 3


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_aggregation_weights_are_the_rule_by_hand(mode):
    """token-mean weights every counted token 1 / N; seq-mean-token-sum-norm 1 / (B * T)."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    weights = conventions.aggregation_weights(mask, conventions.AGG_MODE_RULES[mode])
    each = 1 / 4 if mode == "token-mean" else 1 / 6
    assert weights.flatten().tolist() == pytest.approx([each] * 4 + [0.0, 0.0])


def test_a_value_outside_a_conventions_set_is_a_one_line_error(tmp_path):
    path = _write(tmp_path, config="  kl_aggregation: token-average\n")
    with pytest.raises(TargetError, match="kl_aggregation: 'token-average' is not one of null"):
        resolve_target(str(path))
