"""Coverage is stated, not implied: a stage whose every check was skipped is named with the reason,
the verdict never reads "all checks that ran passed" while one is, and `--strict` fails on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from checker.checks import CheckResult
from checker.coverage import reason, uncovered, verdict

REPO = Path(__file__).resolve().parent.parent


def result(stage: str, status: str, message: str = "") -> CheckResult:
    return CheckResult(f"{stage}.x_{status}", stage, status, message)


def test_a_stage_is_uncovered_only_when_every_check_skipped():
    results = [
        result("advantages", "pass"),
        result("advantages", "skip", "the candidate does not provide combine_rewards"),
        result("clipping", "skip", "compute_loss does not take epsilon_high=0.28"),
        result("clipping", "skip", "compute_loss does not take delta=2.0"),
        result("kl", "fail"),
        result("kl", "skip", "compute_loss does not take beta=0.04"),
    ]
    assert uncovered(results) == {"clipping": "compute_loss does not take epsilon_high, delta"}


def test_reason_names_missing_functions_and_keywords_once():
    messages = [
        "the candidate does not provide per_token_kl",
        "the candidate does not provide per_token_kl, compute_loss",
        "compute_loss does not take ref_per_token_logps=tensor[4, 3]",
        "loss_type: grpo (the check needs a clipped loss)",
    ]
    assert reason(messages) == (
        "the candidate does not provide per_token_kl, compute_loss; "
        "compute_loss does not take ref_per_token_logps; "
        "loss_type: grpo (the check needs a clipped loss)"
    )


def test_verdict_never_says_passed_alone_over_an_uncovered_stage():
    assert verdict(False, {}, strict=False) == "all checks that ran passed"
    assert verdict(True, {"decode": "..."}, strict=False) == "FAILED"
    lenient = verdict(False, {"decode": "...", "kl": "..."}, strict=False)
    assert "all checks that ran passed" not in lenient and "2 stages not covered" in lenient
    assert verdict(False, {"decode": "..."}, strict=True).startswith("FAILED")


ADVANTAGES_ONLY = "from reference_impl import compute_advantages  # noqa: F401\n"


def grpo_check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", "from checker.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_names_the_uncovered_stage_and_strict_fails_on_it(tmp_path):
    (tmp_path / "advantages_only.py").write_text(ADVANTAGES_ONLY)
    stages = ("--stage", "advantages", "--stage", "decode")
    lenient = grpo_check("advantages_only.py", *stages, cwd=tmp_path)
    assert lenient.returncode == 0, lenient.stderr[-2000:]
    assert "not covered: decode: the candidate does not provide strip_reasoning" in lenient.stdout
    assert "all checks that ran passed" not in lenient.stdout
    assert "1 stage not covered" in lenient.stdout

    strict = grpo_check("advantages_only.py", *stages, "--strict", "--json", cwd=tmp_path)
    assert strict.returncode == 1, strict.stderr[-2000:]
    report = json.loads(strict.stdout)
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] > 0
    assert report["uncovered"] == [
        {"stage": "decode", "reason": "the candidate does not provide strip_reasoning"}
    ]

    covered = grpo_check("advantages_only.py", "--stage", "advantages", "--strict", cwd=tmp_path)
    assert covered.returncode == 0, covered.stdout[-2000:]
    assert "all checks that ran passed" in covered.stdout
