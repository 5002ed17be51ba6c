"""What blind checks of public trainers (slime, AReaL, SkyRL) met in `profile` and a message:
verl's low_var_kl read as k3 (they differ only past the clamp at 10), a symmetric clip of 0.4
outside the clip probe's old range, and a constant group's fp32 residue over a tiny undeclared
epsilon blamed on the baseline."""

from __future__ import annotations

from candidate_support import check_results, profiled

LOW_VAR_KL = """
import torch

def per_token_kl(per_token_logps, ref_per_token_logps):
    d = torch.clamp(ref_per_token_logps - per_token_logps, -20, 20)
    return torch.clamp(torch.exp(d) - d - 1, -10, 10)
"""

WIDE_CLIP = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 epsilon_low=0.4):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    return (token * mask).sum() / mask.sum().clamp(min=1)
"""

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
