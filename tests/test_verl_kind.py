"""`grpo-check verl` on the real verl 0.9.1 release, installed from the registry into the cache,
and on the older lines users still run (0.6.1, 0.5.0, 0.4.1), whose APIs and conventions differ.

verl is imported only in grpo-check's child processes, with `verl_environment()`'s PYTHONPATH
(verl without its dependencies, plus the few packages `core_algos` imports), so the project's venv
never needs verl. Stock verl must pass every check that runs (the contract: verl's `core_algos` as
released is a correct implementation of the conventions it declares); a single-spot mutant of
a copy of verl's `core_algos.py` must fail in the mutated stage and be named as the root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trl_releases import VERL_RELEASES, verl_environment

pytestmark = pytest.mark.xdist_group("verl")

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
CORE_ALGOS = Path("verl") / "trainer" / "ppo" / "core_algos.py"
TIMEOUT = 300

# (id, stage, text of core_algos.py found exactly once, replacement)
MUTANTS = (
    (
        "adv_epsilon_1e4",
        "advantages",
        "(scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)",
        "(scores[i] - id2mean[index[i]]) / (id2std[index[i]] + 1e4)",
    ),
    (
        "low_var_kl_sign",
        "kl",
        "        ratio = torch.exp(kl)\n",
        "        ratio = torch.exp(-kl)\n",
    ),
    (
        "clip_high_is_low",
        "clipping",
        "    cliprange_high = clip_ratio_high\n\n    assert clip_ratio_c > 1.0",
        "    cliprange_high = clip_ratio_low\n\n    assert clip_ratio_c > 1.0",
    ),
)


def run_grpo_check(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GRPO_CHECK, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=cwd,
    )


def failing(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["status"] in ("fail", "error")]


@pytest.fixture(scope="module")
def environment() -> dict[str, str]:
    return verl_environment()


@pytest.fixture(scope="module")
def verl_root(environment) -> Path:
    """The folder holding the stock `verl` package (first on verl_environment's PYTHONPATH)."""
    return Path(environment["PYTHONPATH"].split(os.pathsep)[0])


@pytest.fixture(scope="module")
def stock_report(environment, tmp_path_factory) -> dict:
    result = run_grpo_check(environment, tmp_path_factory.mktemp("verl"), "verl", "--json")
    assert result.returncode in (0, 1), result.stderr[-2000:]
    return json.loads(result.stdout)


def test_stock_verl_passes_every_check_that_runs(stock_report):
    """verl's conventions are declared, not flagged; among them its epsilon of 1e-6, which divides
    the fp32 residue of a constant non-dyadic group's mean by ~1e-6 (|A| ~0.06): the check allows
    that residue over the declared divisor, as the formula computed in fp32 gives it."""
    assert stock_report["kind"] == "verl"
    assert failing(stock_report) == []
    constant = next(
        r for r in stock_report["results"] if r["check"] == "advantages.constant_group_is_zero"
    )
    assert constant["status"] == "pass", constant
    ran = {r["stage"] for r in stock_report["results"] if r["status"] == "pass"}
    assert {"advantages", "ratio", "clipping", "kl", "loss_aggregation"} <= ran


def test_stock_verl_declares_its_unclamped_normaliser(stock_report):
    """verl's token-mean divides by the bare token count: an empty batch is 0 / 0, declared."""
    result = next(
        r for r in stock_report["results"] if r["check"].endswith("fully_masked_batch_is_zero")
    )
    assert result["status"] == "skip" and "unclamped" in result["message"], result


def test_every_verl_kl_estimator_is_checked(stock_report):
    result = next(
        r for r in stock_report["results"] if r["check"] == "kl.other_estimators_match_formulas"
    )
    assert result["status"] == "pass", result


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_verl_mutant_is_detected_and_localised(mutant, environment, verl_root, tmp_path):
    name, stage, find, replace = mutant
    shutil.copytree(verl_root / "verl", tmp_path / "verl")
    core_algos = tmp_path / CORE_ALGOS
    text = core_algos.read_text()
    assert text.count(find) == 1, f"{name}: the patched text is not found once in verl 0.9.1"
    core_algos.write_text(text.replace(find, replace))
    paths = [str(tmp_path), *environment["PYTHONPATH"].split(os.pathsep)[1:]]
    env = {**environment, "PYTHONPATH": os.pathsep.join(paths)}
    result = run_grpo_check(env, tmp_path, "verl", "--json")
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-2000:])
    report = json.loads(result.stdout)
    new = failing(report)
    assert new, f"{name} was not detected"
    assert all(r["stage"] == stage for r in new), new
    assert stage in report["diagnosis"]["root_stages"], report["diagnosis"]
    assert all(r["location"].startswith(str(CORE_ALGOS)) for r in new), new


def test_verl_not_importable_is_one_line(tmp_path):
    """Without verl on the path: exit 2 and one line naming the import error, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = run_grpo_check(env, tmp_path, "verl")
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "verl" in lines[0] and "Traceback" not in result.stderr, lines


def test_verl_kind_takes_only_the_name_verl(tmp_path):
    result = run_grpo_check(dict(os.environ), tmp_path, str(tmp_path), "--kind", "verl")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


OLDER = [version for version in VERL_RELEASES if version != "0.9.1"]


@pytest.fixture(scope="module", params=OLDER)
def older(request, tmp_path_factory) -> tuple[str, dict[str, str], dict]:
    """(version, environment, the stock report) of an older verl release."""
    environment = verl_environment(request.param)
    result = run_grpo_check(environment, tmp_path_factory.mktemp("verl"), "verl", "--json")
    assert result.returncode in (0, 1), result.stderr[-2000:]
    return request.param, environment, json.loads(result.stdout)


def test_older_stock_verl_passes_every_check_that_runs(older):
    """Each release is compared with what its own core_algos does: 0.4/0.5's policy loss without
    ActorConfig, their unclamped row means (empty_rows: never), 0.6's dr_grpo mode that divides by T
    alone (no verl mode stands for dr_grpo there, so it is skipped, not failed)."""
    version, _, report = older
    assert failing(report) == [], (version, failing(report))
    ran = {r["stage"] for r in report["results"] if r["status"] == "pass"}
    assert {"advantages", "ratio", "clipping", "kl", "loss_aggregation"} <= ran, (version, ran)
    if version < "0.6":
        empty = next(
            r for r in report["results"] if r["check"].endswith("fully_masked_batch_is_zero")
        )
        assert empty["status"] == "skip" and "empty_rows: never" in empty["message"], empty


def test_older_verl_mutant_is_detected(older, tmp_path):
    """The low_var_kl sign flipped in a copy of the release's core_algos fails the kl stage."""
    version, environment, _ = older
    root = Path(environment["PYTHONPATH"].split(os.pathsep)[0])
    shutil.copytree(root / "verl", tmp_path / "verl")
    core_algos = tmp_path / CORE_ALGOS
    text = core_algos.read_text()
    find = "        ratio = torch.exp(kl)\n"
    assert text.count(find) == 1, version
    core_algos.write_text(text.replace(find, "        ratio = torch.exp(-kl)\n"))
    paths = [str(tmp_path), *environment["PYTHONPATH"].split(os.pathsep)[1:]]
    env = {**environment, "PYTHONPATH": os.pathsep.join(paths)}
    result = run_grpo_check(env, tmp_path, "verl", "--json")
    report = json.loads(result.stdout)
    new = failing(report)
    assert new and all(r["stage"] == "kl" for r in new), (version, new)
