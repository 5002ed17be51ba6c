"""cispo and sapo aggregated the way the trainer aggregates its PPO loss (slime, AReaL, verl's
actor: the loss form and the aggregation are separate settings), where TRL gives each loss type
its own aggregation (cispo dapo's token mean, sapo grpo's row means). Undeclared, the failure
names `form_aggregation: own`; declared, the checks pass; a bug inside the aggregation still
fails. And a token count summed from per-row counts clamped to >= 1 (slime's per-token loss) is
named."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results

OTHERS = "loss_aggregation.other_loss_types_match_formula"
SAPO = "loss_aggregation.sapo_gradient_matches_formula"

# One aggregation for every loss type: the row means of grpo (slime's default per-sample mean).
LOSS = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28,
                 sapo_temperature_pos=1.0, sapo_temperature_neg=1.05):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    if loss_type == "cispo":
        token = -torch.clamp(ratio.detach(), max=epsilon_high) * a * per_token_logps
    elif loss_type == "sapo":
        tau = torch.where(a > 0, sapo_temperature_pos, sapo_temperature_neg)
        token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * a
    elif loss_type == "grpo":
        clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
        token = -torch.min(ratio * a, clipped * a)
    else:
        raise ValueError(f"unknown loss_type {loss_type}")
    return AGGREGATE
"""
ROW_MEANS = "((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()"
# the row means without the mean over rows' clamp: a fully masked row divides 0 by 0
UNCLAMPED = "((token * mask).sum(1) / mask.sum(1)).mean()"


def _write(folder: Path, aggregate: str, config: str = "") -> Path:
    (folder / "candidate.py").write_text(LOSS.replace("AGGREGATE", aggregate))
    text = "path: candidate.py\nconfig:\n  loss_type: grpo\n  epsilon_high: 0.28\n" + config
    (folder / "candidate.yaml").write_text(text)
    return folder / "candidate.yaml"


def _results(path: Path):
    return check_results(path, ("loss_aggregation",))


def test_undeclared_cispo_and_sapo_under_the_own_aggregation_name_the_declaration(tmp_path):
    results = _results(_write(tmp_path, ROW_MEANS))
    assert results[OTHERS].status == "fail", results[OTHERS].message
    assert "declare form_aggregation: own" in results[OTHERS].message
    assert results[SAPO].status == "pass", results[SAPO].message  # grpo's rule is sapo's too


def test_declared_the_other_loss_types_pass(tmp_path):
    results = _results(_write(tmp_path, ROW_MEANS, "  form_aggregation: own\n"))
    assert results[OTHERS].status == "pass", results[OTHERS].message
    assert results[SAPO].status == "pass", results[SAPO].message


def test_sapo_under_a_token_mean_trainer_names_the_declaration_then_passes(tmp_path):
    """AReaL divides every loss, sapo's too, by the token count."""
    token_mean = "(token * mask).sum() / mask.sum().clamp(min=1)"
    config = "  loss_agg_mode: token-mean\n"
    results = _results(_write(tmp_path, token_mean, config))
    assert results[SAPO].status == "fail", results[SAPO].message
    assert "declare form_aggregation: own" in results[SAPO].message
    results = _results(_write(tmp_path, token_mean, config + "  form_aggregation: own\n"))
    assert results[SAPO].status == "pass", results[SAPO].message


def test_declared_a_bug_in_the_aggregation_still_fails(tmp_path):
    result = _results(_write(tmp_path, UNCLAMPED, "  form_aggregation: own\n"))[OTHERS]
    assert result.status == "fail", result.message


def test_a_token_count_of_clamped_row_counts_is_named(tmp_path):
    """slime's per-token loss sums max(row count, 1): each fully masked row adds a token."""
    phantom = "(token * mask).sum() / mask.sum(1).clamp(min=1).sum()"
    path = _write(tmp_path, phantom)
    source = (tmp_path / "candidate.py").read_text().replace('loss_type="grpo"', 'loss_type="bnpo"')
    (tmp_path / "candidate.py").write_text(source.replace('== "grpo"', 'in ("grpo", "bnpo")'))
    path.write_text(path.read_text().replace("loss_type: grpo", "loss_type: bnpo"))
    result = check_results(path, ("loss_aggregation",))[
        "loss_aggregation.own_loss_type_matches_formula"
    ]
    assert result.status == "fail", result.message
    assert "each fully masked row adds a token to the count" in result.message
