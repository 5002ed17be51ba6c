"""What blind checks of public trainers (slime, AReaL, SkyRL, OpenRLHF, oat, GRPO-Zero) met in
`profile` and in the checks' messages: verl's low_var_kl read as k3 (they differ only past the
clamp at 10), a symmetric clip of 0.4 outside the clip probe's old range, a constant group's fp32
residue blamed on the baseline, an epsilon too small for fp32 accepted once declared, a swapped
k3 called a constant factor, and a scorer without a temperature never compared at all."""

from __future__ import annotations

from candidate_support import CLIPPED_LOSS_HEAD, check_results, profiled

LOW_VAR_KL = """
import torch

def per_token_kl(per_token_logps, ref_per_token_logps):
    d = torch.clamp(ref_per_token_logps - per_token_logps, -20, 20)
    return torch.clamp(torch.exp(d) - d - 1, -10, 10)
"""

# PPO's symmetric surrogate over the batch's tokens, clipped at 0.4 (AReaL's gsm8k setting).
WIDE_CLIP = (
    CLIPPED_LOSS_HEAD.replace("epsilon_low=0.2", "epsilon_low=0.4")
    + "    return (token * mask).sum() / mask.sum().clamp(min=1)\n"
)

SMALL_EPSILON = """
def compute_advantages(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + 1e-6)).flatten()
"""


def test_profile_tells_low_var_kl_from_k3(tmp_path):
    (tmp_path / "candidate.py").write_text(LOW_VAR_KL)
    assert profiled(tmp_path)["config"]["kl_estimator"] == "low_var_kl"


def test_profile_reads_a_clip_of_0_4(tmp_path):
    (tmp_path / "candidate.py").write_text(WIDE_CLIP)
    written = profiled(tmp_path)
    assert written["config"]["epsilon_low"] == 0.4, written
    assert not written.get("findings"), written


def test_a_constant_group_over_a_tiny_undeclared_epsilon_names_the_epsilon(tmp_path):
    (tmp_path / "candidate.py").write_text(SMALL_EPSILON)
    results = check_results(tmp_path / "candidate.py", ("advantages",))
    result = results["advantages.constant_group_is_zero"]
    assert result.status == "fail", result.message
    assert "fp32's residue of the group mean divided by an epsilon of 1e-05 or less" in (
        result.message
    )


def test_the_hard_groups_over_a_usual_undeclared_epsilon_name_it(tmp_path):
    """SkyRL's 1e-6: fp32 noise keeps the epsilon fit from reading it off these groups, so the
    check tries the usual ones."""
    (tmp_path / "candidate.py").write_text(SMALL_EPSILON)
    results = check_results(tmp_path / "candidate.py", ("advantages",))
    result = results["advantages.lone_member_and_unrepresentable_rewards"]
    assert result.status == "fail", result.message
    assert "declare advantage_epsilon: 1e-6" in result.message


SWAPPED_K3 = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 ref_per_token_logps=None, beta=0.0, epsilon_low=0.2, use_bias_correction_kl=False):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    if beta != 0.0:
        d = per_token_logps - ref_per_token_logps
        token = token + beta * (torch.exp(d) - d - 1)
    return (token * mask).sum() / mask.sum().clamp(min=1)
"""


def test_a_swapped_k3_in_the_loss_names_the_direction_in_the_gradient_check(tmp_path):
    """oat's blind check planted it: loss_kl_gradient had said "off by a constant factor 0.6703"."""
    (tmp_path / "candidate.py").write_text(SWAPPED_K3)
    (tmp_path / "c.yaml").write_text(
        "path: candidate.py\nconfig:\n  clipping: symmetric\n  use_bias_correction_kl: false\n"
    )
    result = check_results(tmp_path / "c.yaml", ("kl",))["kl.loss_kl_gradient"]
    assert result.status == "fail", result.message
    assert "the k3 estimator's direction is swapped" in result.message


def test_a_declared_epsilon_too_small_for_fp32_fails_the_constant_group(tmp_path):
    """OpenRLHF's (r - mean) / (std + 1e-9): declared, a constant group of 0.35 still gets |A| ~30
    from the mean's fp32 residue; verl's 1e-6 (|A| < 0.1) passes (test_checker_friction)."""
    (tmp_path / "candidate.py").write_text(SMALL_EPSILON.replace("1e-6", "1e-9"))
    (tmp_path / "c.yaml").write_text("path: candidate.py\nconfig:\n  advantage_epsilon: 1.0e-9\n")
    result = check_results(tmp_path / "c.yaml", ("advantages",))[
        "advantages.constant_group_is_zero"
    ]
    assert result.status == "fail", result.message
    assert "is too small for fp32" in result.message


NO_TEMPERATURE = """
import torch

def completion_logps(logits, input_ids, completion_mask):
    T = completion_mask.size(1)
    picked = logits[:, -T - 1 : -1]SHIFT
    logps = torch.log_softmax(picked.float(), -1).gather(-1, input_ids[:, -T:].unsqueeze(-1))
    return logps.squeeze(-1) * completion_mask
"""


def test_a_scorer_without_a_temperature_is_checked_at_its_own_t_of_1(tmp_path):
    """GRPO-Zero samples and scores at T = 1 and takes no temperature: its log-probs used to be
    checked at T = 0.7 only, so the check skipped and a logit shift planted in it passed."""
    (tmp_path / "candidate.py").write_text(NO_TEMPERATURE.replace("SHIFT", ""))
    name = "logprobs.completion_logps_matches_reference"
    assert check_results(tmp_path / "candidate.py", ("logprobs",))[name].status == "pass"
    shifted = NO_TEMPERATURE.replace("[:, -T - 1 : -1]SHIFT", "[:, -T:]")
    (tmp_path / "candidate.py").write_text(shifted)
    result = check_results(tmp_path / "candidate.py", ("logprobs",))[name]
    assert result.status == "fail" and "at T=1" in result.message, result.message
    assert "off by one" in result.message


OLD_VERL_DR_GRPO = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 loss_type="grpo", epsilon_low=0.2):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    rows = (token * mask).sum(1)
    if loss_type == "dr_grpo":  # verl before 0.7, ROLL: the rows' sums over T, no / B
        return rows.sum() / mask.size(1)
    if loss_type == "grpo":
        return (rows / mask.sum(1).clamp(min=1)).mean()
    raise ValueError(f"unknown loss_type {loss_type}")
"""


def test_dr_grpo_without_its_division_by_b_is_named(tmp_path):
    """ROLL's seq-mean-token-sum-norm (verl's before 0.7) is exactly B times TRL's dr_grpo."""
    (tmp_path / "candidate.py").write_text(OLD_VERL_DR_GRPO)
    (tmp_path / "c.yaml").write_text("path: candidate.py\nconfig:\n  clipping: symmetric\n")
    result = check_results(tmp_path / "c.yaml", ("loss_aggregation",))[
        "loss_aggregation.other_loss_types_match_formula"
    ]
    assert result.status == "fail", result.message
    assert "the sum over rows divided by T, not by B * T" in result.message


def test_profile_measures_a_dual_clip_on_by_default(tmp_path):
    """EasyR1 caps a negative advantage's ratio at 3 by default; left undeclared, the clipping
    checks ran without the cap and passed."""
    capped = WIDE_CLIP.replace("epsilon_low=0.4", "epsilon_low=0.2").replace(
        "    token = -torch.min(ratio * a,",
        "    ratio = torch.where(a < 0, ratio.clamp(max=3.0), ratio)\n    token = -torch.min(ratio * a,",
    )
    (tmp_path / "candidate.py").write_text(capped)
    assert profiled(tmp_path)["config"]["delta"] == 3.0
    (tmp_path / "candidate.py").write_text(WIDE_CLIP)
    (tmp_path / "cfg.yaml").unlink()
    assert "delta" not in profiled(tmp_path)["config"]
