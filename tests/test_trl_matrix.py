"""The version matrix: grpo-check's `trl` kind on real TRL releases, each against its own semantics.

For every release of MATRIX (one or two per family, from the registry, cached by
tests/trl_releases.py) one child process checks, with the grpo-check engine as the CLI runs it:
- the stock release: no failing check;
- a copy with one single-spot mutant of `task_harness/corpus/trl.yaml` that applies to that
  release: detected, and localised to the mutant's stage (the criterion of test_trl_mutants.py);
- for 0.17.0 also a SkillsBench-style fork (a vendored checkout with a sign flip in the fp32
  branch of `selective_log_softmax`, `std + 1e4`, and a reasoning-strip decode that blanks plain
  answers): all three stages are found and named as roots.

The command line itself is covered on 0.17.0: stock exit 0, the fork exit 1 when run as
`grpo-check trl` in the folder that holds the fork at `./trl`, and releases outside the supported
range refused with one line. The releases are split over two xdist groups of about equal cost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skillsbench_fork import skillsbench_fork
from test_trl_mutants import check_trees
from trl_releases import import_environment, import_paths, trl_release_path

from task_harness.mutants import load_corpus

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
CHILD_TIMEOUT = 900  # three trees of TRL 0.17 on a busy two-core machine
MUTANTS = {m.id: m for m in load_corpus("trl")}

# release -> (the corpus mutant applied to it, the xdist group it runs in). One mutant per
# release, a different stage per family where the release's code has the mutated line.
MATRIX = {
    "0.17.0": ("trl_clip_epsilons_swapped", 0),
    "0.19.1": ("trl_kl_sign_flipped", 1),
    "0.21.0": ("trl_ratio_sign", 1),
    "0.23.1": ("trl_adv_epsilon_1e4", 1),
    "0.26.2": ("trl_truncation_mask_inverted", 0),
    "0.29.1": ("trl_sampling_temperature_dropped", 1),
    "1.0.0": ("trl_bnpo_normaliser_all_positions", 0),
    "1.8.0": ("trl_unscorable_row_not_nan", 1),
    "1.14.2": ("trl_old_logps_recomputed_each_iteration", 0),
    "1.16.0": ("trl_logprob_sign_flip", 0),
}
SKILLSBENCH_STAGES = ["advantages", "decode", "logprobs"]  # sorted


def release_copy(version: str, parent: Path) -> Path:
    """A copy of release `version`'s install folder (the `trl` package and its dist-info)."""
    shutil.copytree(trl_release_path(version), parent, ignore=shutil.ignore_patterns("__pycache__"))
    return parent


_reports: dict[str, dict[str, dict]] = {}


def release_reports(version: str, tmp_path_factory) -> dict[str, dict]:
    """The child's reports for one release ("stock", the mutant id, "skillsbench"), computed once."""
    if version not in _reports:
        mutant = MUTANTS[MATRIX[version][0]]
        base = tmp_path_factory.mktemp(f"trl-{version}")
        mutated = release_copy(version, base / mutant.id)
        mutant.apply(mutated)
        trees = {"stock": trl_release_path(version), mutant.id: mutated}
        if version == "0.17.0":
            trees["skillsbench"] = skillsbench_fork(base / "app")
        reports = check_trees(list(trees.values()), import_paths(version)[1:], CHILD_TIMEOUT)
        _reports[version] = dict(zip(trees, reports, strict=True))
    return _reports[version]


def group_mark(version: str):
    return pytest.mark.xdist_group(f"trl_matrix_{MATRIX[version][1]}")


@pytest.mark.parametrize(
    "version", [pytest.param(v, marks=group_mark(v)) for v in MATRIX], ids=list(MATRIX)
)
def test_stock_release_passes(version, tmp_path_factory):
    report = release_reports(version, tmp_path_factory)["stock"]
    assert report["trl"].startswith(str(trl_release_path(version))), report["trl"]
    assert report["failing"] == [], report["failing"]
    assert report["summary"]["pass"] > report["summary"]["skip"], report["summary"]


@pytest.mark.parametrize(
    "version", [pytest.param(v, marks=group_mark(v)) for v in MATRIX], ids=list(MATRIX)
)
def test_release_mutant_is_detected_and_localised(version, tmp_path_factory):
    mutant = MUTANTS[MATRIX[version][0]]
    report = release_reports(version, tmp_path_factory)[mutant.id]
    assert f"/{mutant.id}/" in report["trl"], report["trl"]  # the mutated copy was driven
    failing = report["failing"]
    assert failing, f"{mutant.id} ({mutant.description}) was not detected on TRL {version}"
    assert any(r["stage"] == mutant.stage for r in failing), failing
    outside = [r for r in failing if r["stage"] != mutant.stage]
    assert all(mutant.stage in r["depends_on"] for r in outside), outside
    assert report["diagnosis"]["root_stages"] == [mutant.stage], report["diagnosis"]


@group_mark("0.17.0")
def test_skillsbench_fork_is_localised_in_all_three_stages(tmp_path_factory):
    report = release_reports("0.17.0", tmp_path_factory)["skillsbench"]
    assert "/app/trl/trl/" in report["trl"], report["trl"]
    assert_skillsbench_localised(report["failing"], report["diagnosis"])


def assert_skillsbench_localised(failing: list[dict], diagnosis: dict) -> None:
    """Each planted bug fails in its own stage, and those three are the roots; any other failing
    check depends on one of them (a knock-on effect, e.g. the update step)."""
    assert sorted(diagnosis["root_stages"]) == SKILLSBENCH_STAGES, diagnosis
    own = {r["stage"] for r in failing if r["stage"] in SKILLSBENCH_STAGES}
    assert sorted(own) == SKILLSBENCH_STAGES, failing
    outside = [r for r in failing if r["stage"] not in SKILLSBENCH_STAGES]
    assert all(set(r["depends_on"]) & set(SKILLSBENCH_STAGES) for r in outside), outside
    checks = {r["check"] for r in failing}
    assert "decode.plain_answer_is_unchanged" in checks, checks  # the blanked plain answer


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GRPO_CHECK, *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd
    )


@group_mark("1.8.0")
def test_cli_on_stock_trl_0_17_exits_0(tmp_path):
    result = run_cli("trl", "--json", env=import_environment("0.17.0"), cwd=tmp_path)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    report = json.loads(result.stdout)
    assert report["kind"] == "trl" and report["summary"]["fail"] == 0
    assert report["summary"]["error"] == 0


@group_mark("1.8.0")
def test_cli_in_a_skillsbench_workspace_checks_its_trl_tree(tmp_path):
    """`grpo-check trl` in /app-like folder with the fork at ./trl checks the fork (and says so),
    not the TRL that Python would import: exit 1, the three stages, locations in the fork."""
    app = tmp_path / "app"
    skillsbench_fork(app)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, import_paths("0.17.0")[1:]))}
    result = run_cli("trl", "--json", env=env, cwd=app)
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-2000:])
    assert "checking the TRL tree ./trl" in result.stderr
    report = json.loads(result.stdout)
    failing = [r for r in report["results"] if r["status"] in ("fail", "error")]
    roots = [r for r in failing if r["stage"] in SKILLSBENCH_STAGES]
    assert sorted(report["diagnosis"]["root_stages"]) == SKILLSBENCH_STAGES, report["diagnosis"]
    assert all(str(app / "trl") in r.get("location", "") for r in roots), roots


@pytest.mark.parametrize("version", ["0.14.0", "0.15.2"])
def test_release_outside_the_range_is_refused_in_one_line(version, tmp_path):
    result = run_cli("trl", env=import_environment(version), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"TRL {version}" in lines[0] and "0.17" in lines[0], lines


def test_unsupported_tree_in_the_workspace_is_refused_not_replaced(tmp_path):
    """A ./trl tree of an unsupported release: one line naming it; the installed TRL is not
    checked in its place."""
    shutil.copytree(trl_release_path("0.15.2") / "trl", tmp_path / "trl" / "trl")
    result = run_cli("trl", "--json", env=dict(os.environ), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "0.15.2" in lines[0], lines
