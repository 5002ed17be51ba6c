"""A penalty towards the sampling policy, tau * (logp - old)^2 per token inside the policy term's
aggregation (prime-rl's default loss, `kl_tau` 1e-3, after Kimi K2.5): TRL has none, so its
gradient off policy looks like a wrong ratio. Declared as `drift_penalty: tau`, the ratio and
clipping checks take its share out and `ratio.drift_penalty_matches_declared` checks it; profile
measures tau; a PPO band with the penalty still reads its epsilon, and a trust region that is no
ratio band (DPPO's mask on probability differences) is named as such."""

from __future__ import annotations

from pathlib import Path

from candidate_support import CLIPPED_LOSS_HEAD, check_results, profiled

DRIFT = "ratio.drift_penalty_matches_declared"

# PPO's symmetric surrogate plus the drift penalty, over the batch's tokens (prime-rl's
# per_token_loss.sum() / rl_scale).
LOSS = (
    CLIPPED_LOSS_HEAD
    + """    drift = PENALTY
    return ((token + drift) * mask).sum() / mask.sum().clamp(min=1)
"""
)
SQUARED = "1e-3 * (per_token_logps - old) ** 2"


def _write(folder: Path, penalty: str, config: str = "") -> Path:
    (folder / "candidate.py").write_text(LOSS.replace("PENALTY", penalty))
    (folder / "candidate.yaml").write_text(
        "path: candidate.py\nconfig:\n  clipping: symmetric\n" + config
    )
    return folder / "candidate.yaml"


def _results(path: Path):
    return check_results(path, ("ratio", "clipping"))


def test_undeclared_the_penalty_fails_the_token_ratio_as_prime_rl_did(tmp_path):
    results = _results(_write(tmp_path, SQUARED))
    assert results["ratio.token_ratio_is_exp_log_ratio"].status == "fail"
    assert results[DRIFT].status == "skip", results[DRIFT].message


def test_declared_the_ratio_and_clipping_checks_pass(tmp_path):
    results = _results(_write(tmp_path, SQUARED, "  drift_penalty: 0.001\n"))
    ran = {name: r for name, r in results.items() if r.status != "skip"}
    assert DRIFT in ran and "clipping.zero_gradient_outside_band" in ran, sorted(ran)
    assert all(r.status == "pass" for r in ran.values()), {
        n: r.message for n, r in ran.items() if r.status != "pass"
    }


def test_a_penalty_of_half_the_declared_slope_fails_and_is_named(tmp_path):
    """k2's (logp - old)^2 / 2 under the same tau gives half the declared gradient."""
    half = "1e-3 * (per_token_logps - old) ** 2 / 2"
    result = _results(_write(tmp_path, half, "  drift_penalty: 0.001\n"))[DRIFT]
    assert result.status == "fail", result.message
    assert "half the declared gradient" in result.message


def test_a_declared_penalty_the_loss_lacks_fails(tmp_path):
    result = _results(_write(tmp_path, "0.0", "  drift_penalty: 0.001\n"))[DRIFT]
    assert result.status == "fail", result.message
    assert "no penalty towards old_per_token_logps" in result.message


def test_profile_measures_tau_and_still_reads_the_band(tmp_path):
    _write(tmp_path, SQUARED.replace("1e-3", "2.5e-3"))
    source = (tmp_path / "candidate.py").read_text()
    (tmp_path / "candidate.py").write_text(source.replace("epsilon_low=0.2", "epsilon_low=0.25"))
    config = profiled(tmp_path)["config"]
    assert config["drift_penalty"] == 0.0025, config
    assert config["epsilon_low"] == 0.25, config


def test_profile_declares_no_penalty_for_a_loss_without_one(tmp_path):
    _write(tmp_path, "0.0")
    assert "drift_penalty" not in profiled(tmp_path)["config"]


def test_profile_names_a_trust_region_that_is_no_ratio_band(tmp_path):
    """DPPO's mask drops a token by its probability difference, not its ratio: the tokens with
    zero gradient are no band of ratios, and profile says so rather than fitting an epsilon."""
    dppo = CLIPPED_LOSS_HEAD.split("    token = ")[0] + (
        "    diff = per_token_logps.exp() - old.exp()\n"
        "    keep = torch.where(a > 0, diff <= 0.2, diff >= -0.2)\n"
        "    return (-(keep * a * ratio) * mask).sum() / mask.sum().clamp(min=1)\n"
    )
    (tmp_path / "candidate.py").write_text(dppo)
    written = profiled(tmp_path)
    assert "epsilon_low" not in written.get("config", {}), written
    assert any("no PPO ratio band" in f for f in written.get("findings", [])), written
