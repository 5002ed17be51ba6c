"""Conventions real trainers use, declared and profiled: the leave-one-out (RLOO) baseline and
std, an on-policy-only loss, a KL weighted by exp(logp - sg(logp)), `use_bias_correction_kl`,
`empty_rows` through the loss types the checks test; and profile findings kept in the YAML.

The RLOO trainer (tests/alt_impls/rloo_trainer.py, behind rloo_shim.py) is written apart from the
checker: `profile --write` then `grpo-check` must report no failure, and the NeMo-RL residue bug
(the leave-one-out std as sqrt(E[r^2] - E[r]^2) in float32) planted in a copy must fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from checker import conventions
from reference_impl.protocol import DEFAULTS

pytestmark = pytest.mark.xdist_group("profile")

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
ALT = Path(__file__).resolve().parent / "alt_impls"
LOO = {**DEFAULTS, "baseline": "leave_one_out", "std_estimator": "leave_one_out"}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([GRPO_CHECK, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def failing(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["status"] in ("fail", "error")]


def rloo_copy(folder: Path, old: str = "", new: str = "") -> None:
    """rloo_shim.py and rloo_trainer.py in `folder`, with `old` replaced by `new` in the trainer."""
    shutil.copy(ALT / "rloo_shim.py", folder)
    text = (ALT / "rloo_trainer.py").read_text()
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (folder / "rloo_trainer.py").write_text(text)


# -- the leave-one-out formula, by hand ---------------------------------------------------------


def test_leave_one_out_advantages_by_hand():
    """[0.3] * 7 + [1.0]: the lone 1.0's others are equal (std 0), so it is left undivided at
    1.0 - 0.3; each 0.3 has baseline (6 * 0.3 + 1) / 7 = 0.4 and the others' Bessel std
    sqrt((6 * 0.1^2 + 0.6^2) / 6) = sqrt(0.07)."""
    rewards = torch.tensor([0.3] * 7 + [1.0])
    seen = conventions.advantages(rewards, 8, LOO).double()
    assert seen[7] == pytest.approx(1.0 - 0.3, abs=1e-6)
    assert seen[:7] == pytest.approx([-0.1 / (0.07**0.5 + 1e-4)] * 7, rel=1e-5)


def test_leave_one_out_pairs_and_mean_only():
    """G = 2: one other member has no std, so A = r_i - r_j; the leave-one-out mean alone is
    G / (G - 1) times the centred reward."""
    pair = conventions.advantages(torch.tensor([0.0, 1.0]), 2, LOO)
    assert pair.tolist() == [-1.0, 1.0]
    rewards = torch.tensor([0.0, 1.0, 0.5, 2.0])
    config = {**DEFAULTS, "baseline": "leave_one_out"}
    centred = rewards - rewards.mean()
    seen = conventions.advantages(rewards, 4, config, "none")
    assert torch.allclose(seen, centred * 4 / 3, atol=1e-6)


# -- the RLOO trainer written apart -------------------------------------------------------------


@pytest.fixture(scope="module")
def rloo_profiled(tmp_path_factory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("rloo")
    rloo_copy(folder)
    result = run("profile", "rloo_shim.py", "--json", "--write", "cfg.yaml", cwd=folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(result.stdout), folder


def test_profile_measures_the_rloo_conventions(rloo_profiled):
    document, _ = rloo_profiled
    assert document["findings"] == []
    measured = document["conventions"]
    assert measured["baseline"] == "leave_one_out"
    assert measured["std_estimator"] == "leave_one_out"
    assert measured["advantage_epsilon"] == pytest.approx(1e-6)
    assert measured["use_bias_correction_kl"] is True
    assert measured["kl_weight"] == "on_policy"
    assert measured["clipping"] == "symmetric"


def test_rloo_trainer_passes_after_profile(rloo_profiled):
    """profile --write cfg.yaml, then grpo-check cfg.yaml: no failure, and the fixtures fp32 does
    not flatter (a lone differing member among them) ran and passed."""
    _, folder = rloo_profiled
    result = run("cfg.yaml", "--json", cwd=folder)
    report = json.loads(result.stdout)
    assert result.returncode == 0 and failing(report) == [], failing(report)
    passed = {r["check"] for r in report["results"] if r["status"] == "pass"}
    assert {
        "advantages.lone_member_and_unrepresentable_rewards",
        "advantages.matches_reference",
        "kl.bias_correction_uses_unclipped_ratio",
        "kl.loss_kl_gradient",
        "ratio.token_ratio_is_exp_log_ratio",
    } <= passed, passed


def test_planted_leave_one_out_residue_bug_fails(rloo_profiled, tmp_path):
    """NeMo-RL's std as sqrt(E[r^2] - E[r]^2) in float32: the lone 1.0 among 0.3s is divided by
    rounding residue (A = 7428 instead of 0.7); the failure says so, with the residue it saw."""
    _, folder = rloo_profiled
    rloo_copy(
        tmp_path,
        "    std = (spread.pow(2).sum(-1) / max(g - 2, 1)).sqrt()",
        "    mean_sq = torch.where(others, others_r**2, 0.0).sum(-1) / (g - 1)\n"
        "    std = ((mean_sq - baseline**2) * (g - 1) / max(g - 2, 1)).clamp(min=0).sqrt()",
    )
    text = (tmp_path / "rloo_trainer.py").read_text()
    (tmp_path / "rloo_trainer.py").write_text(
        text.replace("r = rewards_by_prompt.double()", "r = rewards_by_prompt.float()")
    )
    shutil.copy(folder / "cfg.yaml", tmp_path)
    result = run("cfg.yaml", "--json", "--stage", "advantages", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert result.returncode == 1
    (bad,) = failing(report)
    assert bad["check"] == "advantages.lone_member_and_unrepresentable_rewards", bad
    assert "expected A[7] = 0.7" in bad["message"] and "float32 rounding residue" in bad["message"]
    assert report["diagnosis"]["root_stages"] == ["advantages"]


def test_undeclared_leave_one_out_is_named_not_called_batch_wide(tmp_path):
    """Without the YAML, the advantage failures name the conventions that fit (leave-one-out
    baseline and std, epsilon 1e-6) and say how to declare them."""
    rloo_copy(tmp_path)
    result = run("rloo_shim.py", "--json", "--stage", "advantages", cwd=tmp_path)
    bad = {r["check"]: r["message"] for r in failing(json.loads(result.stdout))}
    for check in ("matches_reference", "groups_are_centred"):
        message = bad[f"advantages.{check}"]
        assert "declare baseline: leave_one_out, std_estimator: leave_one_out" in message, message
        assert "batch-wide" not in message


ONE_PASS_VARIANCE = """
def compute_advantages(rewards, num_generations, scale_rewards="group"):
    g = rewards.view(-1, num_generations)
    mean = g.mean(1, keepdim=True)
    var = ((g**2).mean(1, keepdim=True) - mean**2) * num_generations / (num_generations - 1)
    return ((g - mean) / (var.clamp(min=0).sqrt() + 1e-4)).reshape(-1)
"""


def test_one_pass_variance_fails_on_a_near_constant_group(tmp_path):
    """TRL's formula with var = E[r^2] - E[r]^2 in float32: exact on the dyadic fixtures, but on
    rewards near 10 the variance is rounding residue; the failure names it."""
    (tmp_path / "one_pass.py").write_text(ONE_PASS_VARIANCE)
    result = run("one_pass.py", "--json", "--stage", "advantages", cwd=tmp_path)
    bad = {r["check"]: r["message"] for r in failing(json.loads(result.stdout))}
    message = bad["advantages.lone_member_and_unrepresentable_rewards"]
    assert "(group [10, 10, 10" in message and "float32 rounding residue" in message, message
    assert "advantages.matches_reference" not in bad  # the random fixture alone misses it


# -- an on-policy-only loss with an unweighted KL (torchtune's GRPOSimpleLoss shape) -------------

ON_POLICY_ONLY = """
import torch


def per_token_kl(per_token_logps, ref_per_token_logps):
    d = ref_per_token_logps - per_token_logps
    return d.exp() - d - 1


def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 ref_per_token_logps=None, beta=0.0, epsilon_low=0.2):
    ratio = (per_token_logps - per_token_logps.detach()).exp()  # old log-probs unused
    loss = -ratio * advantages.unsqueeze(1)
    if beta:
        loss = loss + beta * per_token_kl(per_token_logps, ref_per_token_logps)
    mask = completion_mask.float()
    return ((loss * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
"""


def test_on_policy_only_loss_is_profiled_and_its_finding_is_kept(tmp_path):
    """profile declares policy_loss: on_policy and use_bias_correction_kl: false, and writes the
    latent limitation as a finding; grpo-check of the written file reports it (exit 1) until it
    is removed from the file, and then passes."""
    (tmp_path / "simple_loss.py").write_text(ON_POLICY_ONLY)
    result = run("profile", "simple_loss.py", "--json", "--write", "cfg.yaml", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert result.returncode == 1
    assert document["conventions"]["policy_loss"] == "on_policy"
    assert document["conventions"]["use_bias_correction_kl"] is False
    (finding,) = document["findings"]
    assert finding.startswith("ratio:") and "old_per_token_logps" in finding
    written = yaml.safe_load((tmp_path / "cfg.yaml").read_text())
    assert written["findings"] == [finding]
    checked = run("cfg.yaml", "--json", "--stage", "ratio", "--stage", "kl", cwd=tmp_path)
    report = json.loads(checked.stdout)
    assert checked.returncode == 1
    assert [r["check"] for r in failing(report)] == ["ratio.profile_finding"], failing(report)
    assert finding in failing(report)[0]["message"]
    del written["findings"]
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(written))
    cleared = run("cfg.yaml", "--json", "--stage", "ratio", "--stage", "kl", cwd=tmp_path)
    assert cleared.returncode == 0, failing(json.loads(cleared.stdout))


# -- empty_rows measured through a loss type that is not the trainer's own -----------------------

TOKEN_MEAN_OWN = """
import torch


def compute_loss(per_token_logps, advantages, completion_mask, *, loss_type="bnpo"):
    loss = -(per_token_logps - per_token_logps.detach()).exp() * advantages.unsqueeze(1)
    mask = completion_mask.float()
    if loss_type == "bnpo":
        return (loss * mask).sum() / mask.sum().clamp(min=1)
    if loss_type == "grpo":  # rows without tokens are left out of the row count
        rows = mask.sum(1) > 0
        return ((loss * mask).sum(1)[rows] / mask.sum(1)[rows]).sum() / rows.sum().clamp(min=1)
    raise ValueError(f"unknown loss_type {loss_type}")
"""


def test_empty_rows_is_measured_through_the_grpo_loss_type(tmp_path):
    """The trainer's own aggregation is a token mean (no row count); the checks also test its
    grpo loss type, which leaves fully masked rows out: profile measures that and declares it."""
    (tmp_path / "token_mean.py").write_text(TOKEN_MEAN_OWN)
    result = run("profile", "token_mean.py", "--json", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert result.returncode == 0, document
    assert document["conventions"]["loss_type"] == "dapo"
    assert document["conventions"]["empty_rows"] == "excluded"


# -- a loss that takes TRL's options and implements one of each ----------------------------------

ONE_AGGREGATION = """
import torch


def combine_rewards(rewards_per_func, reward_weights):
    # a reward function that returned None scores 0
    return (torch.nan_to_num(rewards_per_func) * torch.tensor(reward_weights)).sum(1)


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    # Dr. GRPO: centred, never divided, whatever scale_rewards says
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(1, keepdim=True)).flatten()


def compute_loss(
    per_token_logps, advantages, completion_mask, *, old_per_token_logps=None, loss_type="dapo",
    num_items_in_batch=None, importance_sampling_level="token", delta=None, epsilon_low=0.2,
    epsilon_high=0.28,
):
    # The team's loss: the clipped surrogate, token-mean over the micro-batch, whatever loss_type,
    # importance_sampling_level or delta say (they are accepted for TRL's call signature only).
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(ratio * a, clipped * a)
    mask = completion_mask.float()
    return (loss * mask).sum() / mask.sum().clamp(min=1)
"""


def test_options_the_loss_ignores_are_profiled_as_unsupported(tmp_path):
    """A loss that accepts loss_type, importance_sampling_level and delta and ignores them (one
    aggregation, per-token ratios, no cap: a trainer's own loss), and advantages that take
    scale_rewards and never divide, are profiled as such: `supported:` pins each option to the
    value implemented, `loss_agg_mode` names the aggregation and `nan_rewards: zero` the rewards'
    None; the written file checks with no failure, the checks of the other options skipped. Set in `config:`, a
    loss_type the loss ignores is a finding instead: the user chose it and it does nothing."""
    (tmp_path / "one_agg.py").write_text(ONE_AGGREGATION)
    result = run("profile", "one_agg.py", "--json", "--write", "cfg.yaml", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert result.returncode == 0, document
    assert document["supported"] == {
        "scale_rewards": ["none"],
        "loss_type": ["dapo"],
        "importance_sampling_level": ["token"],
        "delta": [None],
    }
    assert document["conventions"]["loss_agg_mode"] == "token-mean"
    assert document["conventions"]["nan_rewards"] == "zero"
    written = yaml.safe_load((tmp_path / "cfg.yaml").read_text())
    assert written["supported"] == document["supported"]
    checked = run("cfg.yaml", "--json", cwd=tmp_path)
    report = json.loads(checked.stdout)
    assert checked.returncode == 0, failing(report)
    skipped = {r["check"]: r["message"] for r in report["results"] if r["status"] == "skip"}
    assert (
        "importance_sampling_level='sequence'" in skipped["ratio.sequence_ratio_is_geometric_mean"]
    )
    assert "delta=" in skipped["clipping.delta_caps_unclipped_ratio"]
    assert "loss_type='sapo'" in skipped["loss_aggregation.sapo_gradient_matches_formula"]
    undeclared = run("one_agg.py", "--json", cwd=tmp_path)
    assert undeclared.returncode == 1  # without the file: dapo's num_items_in_batch, GSPO, delta

    (tmp_path / "chosen.yaml").write_text("path: one_agg.py\nconfig: {loss_type: dr_grpo}\n")
    chosen = json.loads(run("profile", "chosen.yaml", "--json", cwd=tmp_path).stdout)
    assert "loss_agg_mode" not in chosen["conventions"]
    assert any("loss_type='dr_grpo' is set but changes nothing" in f for f in chosen["findings"])


def test_a_loss_that_honours_the_options_is_not_restricted(tmp_path):
    """The reference written against the protocol (every loss type, GSPO, delta) gets no
    `supported:` from profile: only an option that changes nothing is pinned."""
    shim = "from reference_impl import compute_loss  # noqa: F401\n"
    (tmp_path / "honours.py").write_text(shim)
    document = json.loads(run("profile", "honours.py", "--json", cwd=tmp_path).stdout)
    assert document["supported"] == {}, document


GSPO_ALWAYS = """
import torch


def compute_loss(
    per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
    importance_sampling_level="token", epsilon_low=0.2, epsilon_high=0.28,
):
    # GSPO whatever importance_sampling_level says: one ratio per row, the geometric mean of
    # its tokens' ratios, clipped as one; rows averaged (seq-mean-token-mean)
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    log_ratio = ((per_token_logps - old) * mask).sum(1) / mask.sum(1).clamp(min=1)
    ratio = torch.exp(log_ratio).unsqueeze(1).expand_as(per_token_logps)
    a = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(ratio * a, clipped * a)
    return ((loss * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
"""


def test_a_loss_of_one_ratio_level_is_pinned_to_the_level_it_implements(tmp_path):
    """A GSPO loss that ignores importance_sampling_level is measured as sequence level (from
    its off- to on-policy gradient ratios, each token's its row's geometric mean) and pinned
    there, not at the config's token; its written file checks with no failure in the ratio
    stage, and the token-level ratio check is skipped, not failed."""
    (tmp_path / "gspo.py").write_text(GSPO_ALWAYS)
    result = run("profile", "gspo.py", "--json", "--write", "cfg.yaml", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert document["conventions"]["importance_sampling_level"] == "sequence", document
    assert document["supported"]["importance_sampling_level"] == ["sequence"], document
    checked = run("cfg.yaml", "--json", "--stage", "ratio", cwd=tmp_path)
    report = json.loads(checked.stdout)
    assert checked.returncode == 0, failing(report)
    passed = {r["check"] for r in report["results"] if r["status"] == "pass"}
    assert "ratio.sequence_ratio_is_geometric_mean" in passed, report["results"]


def test_a_loss_that_passes_keywords_on_is_not_a_finding(tmp_path):
    """compute_loss(**kwargs) handing every keyword to a helper that takes none of TRL's options:
    profile's option probes get a TypeError there, which says the option is not taken (as a
    signature without it would), not that the loss is broken: no finding, nothing pinned."""
    shutil.copy(ALT / "kwargs_forwarding_loss.py", tmp_path)
    result = run("profile", "kwargs_forwarding_loss.py", "--json", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert result.returncode == 0, document
    assert document["findings"] == [] and document["supported"] == {}, document
