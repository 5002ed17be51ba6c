"""What a blind user met checking prime-rl's loss (a DPPO probability band and a drift penalty
towards the rollout policy, no reference KL): the masked-entry check runs on a loss that takes no
reference; a per-token additive difference is not called "off by a constant factor 1"; and a
stage declared `custom` settles the profile finding kept on it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from candidate_support import CLIPPED_LOSS_HEAD, check_results, json_report

from checker.checks.context import generic_cause

# A clipped token-mean loss with no KL term: it takes no reference log-probs.
LOSS = CLIPPED_LOSS_HEAD + "    return (token * MASKED).sum() / mask.sum().clamp(min=1)\n"


def _write(folder: Path, masked: str) -> Path:
    (folder / "candidate.py").write_text(textwrap.dedent(LOSS).replace("MASKED", masked))
    (folder / "candidate.yaml").write_text(
        "path: candidate.py\nconfig:\n  clipping: symmetric\n"
        "custom:\n  clipping: a band on probability differences (DPPO)\n"
        "findings:\n  - 'clipping: no PPO ratio band'\n  - 'ratio: something else'\n"
    )
    return folder / "candidate.yaml"


def test_masked_entries_are_checked_without_a_reference(tmp_path):
    good = check_results(_write(tmp_path, "mask"), ("loss_aggregation",))
    assert good["loss_aggregation.masked_entries_are_ignored"].status == "pass"
    leaking = check_results(_write(tmp_path, "1.0"), ("loss_aggregation",))
    result = leaking["loss_aggregation.masked_entries_are_ignored"]
    assert result.status == "fail" and "masked tokens leak" in result.message, result.message


def test_a_custom_stage_settles_its_finding_and_only_its_own(tmp_path):
    _write(tmp_path, "mask")
    results = json_report(tmp_path, "candidate.yaml")["results"]
    findings = {r["check"]: r for r in results if r["check"].endswith("profile_finding")}
    assert findings["clipping.profile_finding"]["status"] == "skip"
    assert "declared custom" in findings["clipping.profile_finding"]["message"]
    assert findings["ratio.profile_finding"]["status"] == "fail"


def test_a_per_element_difference_near_one_is_not_a_constant_factor():
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0])
    additive = expected + torch.tensor([1e-4, 3e-4, 2e-4, 4e-4])
    assert "constant factor" not in generic_cause(additive, expected)
    assert "constant factor 1.155" in generic_cause(expected * 1.1547, expected)
