"""Advantages normalised twice: the group step, then centred and divided by their std over the
whole batch (AReaL's GRPO default, REINFORCE++-baseline). `profile` measures it as
`advantage_whitening: batch`; declared, the advantage checks pass, those that assume independent
groups skip; a batch step that departs from the declared statistics still fails."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results, profiled

ADVANTAGES = """
import torch

def compute_advantages(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    group_std = grouped.std(dim=1, keepdim=True)
    advantages = (centred / (group_std + 1e-6)).flatten()
    return (advantages - advantages.mean()) / (advantages.std(unbiased=BATCH_UNBIASED) + 1e-6)
"""


def _write(folder: Path, unbiased: bool = True) -> Path:
    source = ADVANTAGES.replace("BATCH_UNBIASED", str(unbiased))
    (folder / "candidate.py").write_text(source)
    return folder / "candidate.py"


def test_undeclared_the_reference_advantages_fail(tmp_path):
    result = check_results(_write(tmp_path), ("advantages",))["advantages.matches_reference"]
    assert result.status == "fail", result.message


def test_profile_measures_it_and_the_declared_checks_pass(tmp_path):
    _write(tmp_path)
    config = profiled(tmp_path)["config"]
    assert config["advantage_whitening"] == "batch", config
    assert config["advantage_epsilon"] == 1e-6, config
    results = check_results(tmp_path / "cfg.yaml", ("advantages",))
    assert all(r.status in ("pass", "skip") for r in results.values()), {
        n: r.message for n, r in results.items() if r.status not in ("pass", "skip")
    }
    assert results["advantages.matches_reference"].status == "pass"
    skipped = results["advantages.other_groups_do_not_matter"]
    assert skipped.status == "skip" and "advantage_whitening" in skipped.message


def test_a_batch_step_with_another_std_estimator_fails(tmp_path):
    """Declared with the group step's Bessel std, a population std over the batch is a bug."""
    _write(tmp_path, unbiased=False)
    (tmp_path / "c.yaml").write_text(
        "path: candidate.py\nconfig:\n  advantage_epsilon: 1.0e-6\n  advantage_whitening: batch\n"
    )
    result = check_results(tmp_path / "c.yaml", ("advantages",))["advantages.matches_reference"]
    assert result.status == "fail", result.message
