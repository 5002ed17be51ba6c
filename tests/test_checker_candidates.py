"""Correct candidates are never flagged; the diagnosis names the root stage; YAML conventions work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from checker.candidate import CandidateSpec, TargetError, resolve_target
from checker.checks import CheckResult, all_checks
from checker.diagnosis import diagnose
from checker.sandbox import run_in_process
from reference_impl.protocol import DEFAULTS

REPO = Path(__file__).resolve().parent.parent
ALT = REPO / "tests" / "alt_impls"
SEED = 1234


def _run(target: str | Path, stages: tuple[str, ...] = ()) -> list[CheckResult]:
    return run_in_process(resolve_target(str(target)), all_checks(stages), SEED)


@pytest.mark.parametrize(
    "target",
    [
        REPO / "reference_impl" / "__init__.py",
        ALT / "loop_grpo.py",
        ALT / "vectorised_grpo.yaml",
        ALT / "conventions_grpo.yaml",
    ],
    ids=["reference", "loop", "vectorised-renamed", "declared-conventions"],
)
def test_correct_implementation_has_zero_failures(target):
    results = _run(target)
    bad = [(r.check, r.message) for r in results if r.status in ("fail", "error")]
    assert not bad
    assert sum(r.status == "pass" for r in results) >= 19


def test_declared_conventions_are_compared_not_flagged():
    results = {r.check: r for r in _run(ALT / "conventions_grpo.yaml")}
    # its own conventions are checked against the reference configured the same way...
    assert results["advantages.matches_reference"].status == "pass"
    assert results["loss_aggregation.own_loss_type_matches_formula"].status == "pass"
    assert results["kl.loss_kl_gradient"].status == "pass"
    # ...and what needs a keyword it does not take is skipped with the reason
    skipped = results["clipping.delta_caps_unclipped_ratio"]
    assert skipped.status == "skip" and "does not take delta" in skipped.message


def test_the_same_conventions_undeclared_are_flagged():
    spec = resolve_target(str(ALT / "conventions_grpo.yaml"))
    spec.config = {}  # now it claims TRL's defaults (dapo, bias-corrected KL, group scaling)
    results = {r.check: r for r in run_in_process(spec, all_checks(), SEED)}
    assert results["advantages.matches_reference"].status == "fail"
    assert "not divided by the std" in results["advantages.matches_reference"].message
    aggregation = results["loss_aggregation.own_loss_type_matches_formula"]
    assert (
        aggregation.status == "fail"
        and "loss_type looks like grpo, not dapo" in aggregation.message
    )


def test_trl_alias_epsilon_and_unknown_keys(tmp_path):
    (tmp_path / "c.yaml").write_text("module: m\nconfig: {epsilon: 0.3, loss_type: bnpo}\n")
    spec = resolve_target(str(tmp_path / "c.yaml"))
    assert spec.config == {"epsilon_low": 0.3, "loss_type": "bnpo"}
    assert set(spec.config) <= set(DEFAULTS)
    with pytest.raises(TargetError, match="trl: not a TRL source tree|no such file"):
        resolve_target(str(tmp_path / "nothing.yaml"))


def _result(stage: str, status: str, depends_on: tuple[str, ...] = ()) -> CheckResult:
    return CheckResult(f"{stage}.x{id(depends_on)}", stage, status, depends_on=depends_on)


def test_diagnosis_blames_the_stage_with_independent_evidence():
    results = [
        _result("ratio", "fail"),
        _result("clipping", "fail", ("ratio",)),
        _result("update", "fail", ("ratio", "clipping")),
    ]
    assert diagnose(results)["root_stages"] == ["ratio"]
    assert diagnose(results)["explained_stages"] == ["clipping", "update"]


def test_diagnosis_clears_a_stage_whose_own_checks_pass():
    # clipping's checks all depend on ratio, but ratio's independent checks pass: clipping is root
    results = [
        _result("ratio", "pass"),
        _result("ratio", "fail", ("clipping",)),
        _result("clipping", "fail", ("ratio",)),
    ]
    assert diagnose(results)["root_stages"] == ["clipping"]
    assert diagnose([_result("kl", "pass")]) is None


def test_unknown_kind_and_folder_targets_are_rejected(tmp_path):
    with pytest.raises(TargetError, match="unknown --kind"):
        resolve_target("x.py", "jax")
    with pytest.raises(TargetError, match="a folder; .* or a YAML file that maps yours"):
        resolve_target(str(tmp_path))
    assert resolve_target("trl").kind == "trl"
    assert isinstance(resolve_target("checker.examples.buggy_grpo"), CandidateSpec)


def test_worker_groups_match_the_registry():
    from checker.sandbox import GROUP_STAGES

    checks = all_checks()
    assert {c.stage for c in checks if c.heavy} == GROUP_STAGES["heavy"]
    assert {c.stage for c in checks if not c.heavy} == GROUP_STAGES["light"]


def test_buggy_example_has_its_three_bugs_localised():
    results = _run(REPO / "checker" / "examples" / "buggy_grpo.py")
    diagnosis = diagnose(results)
    assert diagnosis["root_stages"] == ["advantages", "logprobs", "kl"]
    assert diagnosis["explained_stages"] == []
    messages = " ".join(r.message for r in results if r.status == "fail")
    assert "batch-wide mean" in messages
    assert "not divided by the temperature" in messages
    assert "the KL term is subtracted" in messages


def test_supported_values_limit_what_is_asked(tmp_path):
    (tmp_path / "loop.yaml").write_text(
        f"path: {ALT / 'loop_grpo.py'}\nsupported: {{loss_type: [dapo, bnpo]}}\n"
    )
    results = {r.check: r for r in _run(tmp_path / "loop.yaml", ("loss_aggregation", "clipping"))}
    assert results["loss_aggregation.other_loss_types_match_formula"].status == "pass"  # bnpo ran
    cispo = results["clipping.cispo_caps_weight_at_epsilon_high"]
    assert cispo.status == "skip" and "loss_type='cispo'" in cispo.message


def test_values_a_candidate_rejects_by_name_are_skipped_not_flagged(tmp_path):
    """A correct trainer that only implements dapo and rejects other loss types as TRL does
    (ValueError naming the value) passes with skips; an unrelated ValueError stays an error."""
    only_dapo = tmp_path / "only_dapo.py"
    only_dapo.write_text(
        f"import sys\nsys.path.insert(0, {str(ALT)!r})\n"
        "import loop_grpo\n"
        "from loop_grpo import *  # noqa: F403\n\n"
        "def compute_loss(*args, loss_type='dapo', **kwargs):\n"
        "    if loss_type != 'dapo':\n"
        "        raise ValueError(f'Unknown loss type: {loss_type}')\n"
        "    return loop_grpo.compute_loss(*args, loss_type=loss_type, **kwargs)\n"
    )
    results = _run(only_dapo, ("loss_aggregation", "clipping"))
    assert not [r.check for r in results if r.status in ("fail", "error")]
    cispo = next(r for r in results if r.check == "clipping.cispo_caps_weight_at_epsilon_high")
    assert cispo.status == "skip" and "loss_type='cispo'" in cispo.message

    broken = tmp_path / "broken.py"
    broken.write_text(
        "def compute_loss(*args, loss_type='dapo', **kwargs):\n"
        "    raise ValueError('shapes do not match')\n"
    )
    results = _run(broken, ("loss_aggregation",))
    # every check that calls it errs; the accumulation check needs a keyword it does not name
    statuses = {r.check: r.status for r in results}
    assert statuses.pop("loss_aggregation.accumulated_gradient_matches_one_batch") == "skip"
    assert set(statuses.values()) == {"error"}


def test_reference_impl_exposes_every_protocol_function():
    import reference_impl
    from reference_impl.protocol import ALL_FUNCTIONS

    assert [name for name in ALL_FUNCTIONS if not callable(getattr(reference_impl, name))] == []


def test_the_parent_reads_the_protocol_without_importing_torch():
    """grpo-check's parent never runs candidate code, so it must not pay for (or crash on) torch."""
    script = "import sys, checker.cli; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "False", done.stderr


def test_declared_function_dependencies_reach_the_diagnosis(tmp_path):
    """A candidate function's `grpo_check_depends_on` joins the dependencies of every check that
    uses it, in the results the engine returns (so the diagnosis can fold knock-on failures)."""
    (tmp_path / "kl_in_loss.py").write_text(
        "from reference_impl import compute_loss as _loss, per_token_kl as _kl\n"
        "def per_token_kl(logps, ref):\n"
        "    return -_kl(logps, ref)  # the bug\n"
        "def compute_loss(*args, **kwargs):\n"
        "    return _loss(*args, **kwargs)\n"
        "compute_loss.grpo_check_depends_on = ('kl',)\n"
    )
    results = _run(tmp_path / "kl_in_loss.py", ("kl", "loss_aggregation"))
    loss_checks = [r for r in results if r.stage == "loss_aggregation"]
    assert loss_checks and all("kl" in r.depends_on for r in loss_checks)
    kl_own = [r for r in results if r.check == "kl.per_token_kl_matches_reference"]
    assert kl_own and "kl" not in kl_own[0].depends_on
