"""`ratio.sequence_ratio_of_long_rows_is_finite`: GSPO's ratio on rows of thousands of tokens.

(pi / pi_old) ** (1 / |y|) written literally, exp(sum of log-ratios) ** (1 / n), is exp(mean) in
exact arithmetic but leaves float32's range once the sum passes about 88 (inf) or -104 (0). The
check must fail that form with the float32 cause and pass the log-space form, whose other checks
(the short rows of `sequence_ratio_is_geometric_mean`) cannot tell the two apart.
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
                 epsilon_low=0.2, epsilon_high=None, importance_sampling_level="token"):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    log_ratio = per_token_logps - old
    if importance_sampling_level == "sequence":
        counted = mask.sum(1).clamp(min=1)
        {sequence_ratio}
    else:
        ratio = torch.exp(log_ratio)
    high = epsilon_low if epsilon_high is None else epsilon_high
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + high) * a)
    return ((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
"""
LOG_SPACE = "ratio = torch.exp((log_ratio * mask).sum(1) / counted).unsqueeze(1)"
LITERAL = "ratio = (torch.exp((log_ratio * mask).sum(1)) ** (1 / counted)).unsqueeze(1)"


def _ratio_results(tmp_path: Path, sequence_ratio: str) -> dict:
    (tmp_path / "candidate.py").write_text(
        textwrap.dedent(LOSS).replace("{sequence_ratio}", sequence_ratio)
    )
    target = resolve_target(str(tmp_path / "candidate.py"))
    return {r.check: r for r in run_in_process(target, all_checks(("ratio",)), SEED)}


def test_the_log_space_ratio_passes_on_long_rows(tmp_path):
    results = _ratio_results(tmp_path, LOG_SPACE)
    assert results["ratio.sequence_ratio_of_long_rows_is_finite"].status == "pass"
    assert results["ratio.sequence_ratio_is_geometric_mean"].status == "pass"


def test_the_literal_product_fails_on_long_rows_only(tmp_path):
    results = _ratio_results(tmp_path, LITERAL)
    long_rows = results["ratio.sequence_ratio_of_long_rows_is_finite"]
    assert long_rows.status == "fail"
    assert "overflows (inf) or underflows (0) in float32" in long_rows.message
    # On the short rows of the other sequence check the literal product is exp(mean) to rounding.
    assert results["ratio.sequence_ratio_is_geometric_mean"].status == "pass"
