"""A group trained on only when its rewards spread enough (simple_GRPO skips a prompt whose
rewards span less than 1e-4, 0.01 in its v1 variant) is a convention, `min_reward_span`: undeclared, the advantage
checks name it; declared, they pass; `profile` measures the threshold and writes it."""

from __future__ import annotations

from pathlib import Path

import torch
from candidate_support import check_results, json_report, profiled

from checker import conventions
from reference_impl.protocol import DEFAULTS

# TRL's formula (NaN-aware), with a group whose spread is under THRESHOLD given zero advantages.
ADVANTAGES = """
import torch

def compute_advantages(rewards, num_generations, scale_rewards="group"):
    if scale_rewards != "group":
        raise NotImplementedError(f"scale_rewards={scale_rewards}")
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, 1, keepdim=True)
    std = torch.sqrt(torch.nansum((grouped - mean) ** 2, 1, keepdim=True)
                     / ((~torch.isnan(grouped)).sum(1, keepdim=True) - 1))
    advantages = (grouped - mean) / (std + 1e-4)
    spread = grouped.nan_to_num(-1e30).amax(1, keepdim=True) - grouped.nan_to_num(1e30).amin(1, keepdim=True)
    advantages = advantages * (spread >= THRESHOLD)
    return torch.nan_to_num(advantages, nan=0.0).view(-1)
"""


def _write(folder: Path, threshold: str = "0.01", config: str = "") -> Path:
    (folder / "candidate.py").write_text(ADVANTAGES.replace("THRESHOLD", threshold))
    (folder / "c.yaml").write_text("path: candidate.py\nconfig:\n  scale_rewards: group\n" + config)
    return folder / "c.yaml"


def test_the_formula_zeroes_only_groups_under_the_spread():
    rewards = torch.tensor([0.0, 0.005, 0.002, 0.001, 0.0, 1.0, 0.5, 0.2])
    config = {**DEFAULTS, "min_reward_span": 0.01}
    seen = conventions.advantages(rewards, 4, config)
    assert seen[:4].tolist() == [0.0] * 4
    assert torch.equal(seen[4:], conventions.advantages(rewards, 4, DEFAULTS)[4:])


def test_undeclared_the_cause_names_the_declaration(tmp_path):
    results = check_results(_write(tmp_path), ("advantages",))
    result = results["advantages.two_completions_use_bessel_std"]
    assert result.status == "fail", result.message
    assert "declare min_reward_span" in result.message


def test_declared_the_advantage_checks_pass(tmp_path):
    results = check_results(_write(tmp_path, config="  min_reward_span: 0.01\n"), ("advantages",))
    bad = {k: r.message for k, r in results.items() if r.status in ("fail", "error")}
    assert not bad, bad


def test_profile_measures_the_threshold_and_the_written_yaml_runs_clean(tmp_path):
    _write(tmp_path)
    document = profiled(tmp_path)
    assert document["config"]["min_reward_span"] == 0.01, document
    report = json_report(tmp_path, "cfg.yaml", "--stage", "advantages")
    assert not [r for r in report["results"] if r["status"] in ("fail", "error")]


def test_profile_writes_no_threshold_for_a_trainer_that_drops_nothing(tmp_path):
    _write(tmp_path, threshold="0.0")
    assert "min_reward_span" not in profiled(tmp_path).get("config", {})
