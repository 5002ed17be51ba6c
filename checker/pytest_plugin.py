"""grpo-check inside a team's own test suite, in two lines.

    from checker.pytest_plugin import assert_grpo_check

    def test_my_grpo_trainer():
        assert_grpo_check("src/mytrainer/grpo.py")      # or a YAML file, or "trl"

With the pytest11 entry point registered (pyproject `[project.entry-points.pytest11]
grpo_check = "checker.pytest_plugin"`), the same function is also the `grpo_check` fixture:

    def test_my_grpo_trainer(grpo_check):
        grpo_check("src/mytrainer/grpo.py", stages=["advantages", "loss_aggregation"])

A failure raises AssertionError with the diagnosis and one line per failing check (expected,
seen, likely cause, location), so pytest's report reads like `grpo-check`'s own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from checker.candidate import resolve_target
from checker.check_cli import DEFAULT_SEED, DEFAULT_TIMEOUT, collect_results
from checker.checks import CheckResult
from checker.coverage import uncovered
from checker.diagnosis import diagnose


def assert_grpo_check(
    target: str,
    *,
    kind: str = "auto",
    stages: Sequence[str] = (),
    seed: int = DEFAULT_SEED,
    timeout: float = DEFAULT_TIMEOUT,
    isolated: bool = True,
    strict: bool = False,
    grpo_config: str | None = None,
) -> list[CheckResult]:
    """Run grpo-check on `target`; raise AssertionError listing the failures, else return results.

    `isolated=False` runs the checks in this process (faster, no watchdog): for candidates you
    trust not to hang or exit. `strict=True` also fails when a stage had no check that ran.
    `grpo_config` ("FILE.py:NAME") is the GRPOConfig a GRPOTrainer subclass target is built with.
    A YAML target's `findings:` (kept by `grpo-check profile --write`) fail as they do in the CLI.
    """
    spec = resolve_target(target, kind, grpo_config)
    results = collect_results(spec, tuple(stages), seed, timeout, isolated=isolated)
    bad = [r for r in results if r.status in ("fail", "error")]
    if bad:
        lines = [f"grpo-check {target}: {len(bad)} of {len(results)} checks failed"]
        lines.append("diagnosis: " + diagnose(results)["summary"].replace("`", ""))
        for r in bad:
            where = f"  [{r.location}]" if r.location else ""
            lines.append(f"{r.status.upper()} {r.check}: {r.message}{where}")
        raise AssertionError("\n".join(lines))
    missing = uncovered(results) if strict else {}
    if missing:
        lines = [f"grpo-check {target}: {len(missing)} stages not covered (strict)"]
        lines += [f"not covered: {stage}: {why}" for stage, why in missing.items()]
        raise AssertionError("\n".join(lines))
    return results


@pytest.fixture
def grpo_check():
    """The `assert_grpo_check` function, as a fixture."""
    return assert_grpo_check
