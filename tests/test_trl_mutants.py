"""grpo-check's `trl` kind catches single-spot bugs in TRL itself and names the stage they are in.

Each mutant of `task_harness/corpus/trl.yaml` is applied to a fresh copy of the installed TRL package in a
temporary folder and the copy is checked by the grpo-check engine (every check, then the
diagnosis), exactly as `grpo-check COPY --kind trl` does. A mutant is LOCALISED when every failing
check is in the mutated stage, or when the only other failing checks declare a dependency on it and
the diagnosis names it as the single root (the criterion of tests/test_checker_mutants.py).

Speed: a child process per batch imports torch and transformers once, then for each copy drops TRL
and the adapter from `sys.modules` and re-imports them from the copy (about 1 s per mutant instead
of 7 s for a fresh process). The batches are two xdist groups, one per worker. One end-to-end run
of the `grpo-check` command on the stock copy covers the command line itself (in batch 1's group,
which has one tree fewer).

Run as a script (`python tests/test_trl_mutants.py TREE...`) it is that child: it prints one JSON
list with, per tree, the failing checks and the diagnosis.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 300
SEED = 1234


# ---------------------------------------------------------------------------------------------
# Child side


def _forget_trl(tree: str) -> None:
    """Drop TRL and every adapter module imported from an earlier copy (torch and transformers
    stay: they are the slow part). `from checker.adapters import x` reads the package attributes
    first, so those go too: a stale `trl_shims` would keep the earlier copy's GRPOTrainer."""
    import checker.adapters

    for name in [
        n for n in sys.modules if n == "trl" or n.startswith(("trl.", "checker.adapters."))
    ]:
        del sys.modules[name]
    for attribute, value in list(vars(checker.adapters).items()):
        if isinstance(value, types.ModuleType):
            delattr(checker.adapters, attribute)
    while tree in sys.path:
        sys.path.remove(tree)


def check_tree(tree: str) -> dict:
    """Every check of the engine on the TRL under `tree`, and the diagnosis."""
    from checker.candidate import CandidateSpec
    from checker.checks import all_checks
    from checker.diagnosis import diagnose
    from checker.sandbox import run_in_process

    _forget_trl(tree)
    spec = CandidateSpec(target=tree, kind="trl", trl_source=tree)
    checks = all_checks()
    results = run_in_process(spec, checks, SEED)  # the engine as the CLI runs it
    driven = sys.modules["checker.adapters.trl_adapter"].harness.GRPO_TRAINER_FILE
    _forget_trl(tree)
    failing = [
        {
            "check": r.check,
            "stage": r.stage,
            "status": r.status,
            "depends_on": list(r.depends_on),
            "message": r.message[:200],
        }
        for r in results
        if r.status in ("fail", "error")
    ]
    summary = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "error", "skip")}
    return {"failing": failing, "diagnosis": diagnose(results), "trl": driven, "summary": summary}


# ---------------------------------------------------------------------------------------------
# Parent side


def installed_trl() -> Path:
    """The `trl` package on sys.path (PathFinder ignores an already imported, maybe mutated, trl)."""
    return Path(importlib.machinery.PathFinder.find_spec("trl").submodule_search_locations[0])


def mutated_copy(mutant, parent: Path) -> Path:
    """A copy of the installed `trl` package under `parent`, with `mutant` applied (None: stock)."""
    shutil.copytree(installed_trl(), parent / "trl", ignore=shutil.ignore_patterns("__pycache__"))
    if mutant is not None:
        mutant.apply(parent)
    return parent


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}


def check_trees(
    trees: list[Path], extra_paths: list[Path] = (), timeout: float = CHILD_TIMEOUT
) -> list[dict]:
    """This file as the child on `trees`; `extra_paths` follow the repository on PYTHONPATH
    (transformers 4 for TRL 0.17-0.26, see tests/trl_releases.py)."""
    env = _child_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *map(str, extra_paths)])
    result = subprocess.run(
        [sys.executable, __file__, *map(str, trees)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    import torch

    torch.set_num_threads(1)
    print(json.dumps([check_tree(tree) for tree in sys.argv[1:]]))
    sys.exit(0)


import pytest  # noqa: E402 - the child above needs neither pytest nor the corpus

from reference_impl.protocol import STAGES  # noqa: E402
from task_harness.mutants import load_corpus  # noqa: E402

MUTANTS = load_corpus("trl")
NUM_BATCHES = 2
STOCK = None  # the unmutated copy, checked in batch 0


def batch_of(index: int) -> int:
    return index % NUM_BATCHES


_reports: dict[int, dict] = {}


def batch_reports(batch: int, tmp_path_factory) -> dict:
    """Reports of one batch by mutant id ("stock" for the unmutated copy), computed once."""
    if batch not in _reports:
        members = [m for i, m in enumerate(MUTANTS) if batch_of(i) == batch]
        if batch == 0:
            members.insert(0, STOCK)
        names = [m.id if m else "stock" for m in members]
        trees = [
            mutated_copy(m, tmp_path_factory.mktemp(n)) for m, n in zip(members, names, strict=True)
        ]
        _reports[batch] = dict(zip(names, check_trees(trees), strict=True))
    return _reports[batch]


def test_corpus_has_15_mutants_over_the_stages_trl_has():
    stages = {mutant.stage for mutant in MUTANTS}
    assert len(MUTANTS) >= 15
    # TRL has no reasoning-strip function, so `decode` has nothing to mutate
    assert stages == set(STAGES) - {"decode"}, set(STAGES) - stages
    assert {"trl_adv_epsilon_1e4", "trl_logprob_sign_flip"} <= {m.id for m in MUTANTS}


def test_every_mutant_applies_to_the_installed_trl():
    root = installed_trl().parent
    for mutant in MUTANTS:
        mutant.apply_to_text((root / mutant.file).read_text())  # raises unless `find` occurs once


@pytest.mark.xdist_group("trl_mutants_0")
def test_stock_trl_passes_every_check(tmp_path_factory):
    report = batch_reports(0, tmp_path_factory)["stock"]
    assert report["failing"] == [], report
    assert "/stock" in report["trl"]  # the copy on sys.path was the TRL driven


@pytest.mark.parametrize(
    "mutant",
    [
        pytest.param(m, id=m.id, marks=pytest.mark.xdist_group(f"trl_mutants_{batch_of(i)}"))
        for i, m in enumerate(MUTANTS)
    ],
)
def test_mutant_is_detected_and_localised(mutant, tmp_path_factory):
    report = batch_reports(batch_of(MUTANTS.index(mutant)), tmp_path_factory)[mutant.id]
    assert f"/{mutant.id}" in report["trl"], report["trl"]  # the mutated copy was the TRL driven
    failing = report["failing"]
    assert failing, f"{mutant.id} ({mutant.description}) was not detected"
    assert any(r["stage"] == mutant.stage for r in failing), failing
    outside = [r for r in failing if r["stage"] != mutant.stage]
    assert all(mutant.stage in r["depends_on"] for r in outside), outside
    assert report["diagnosis"]["root_stages"] == [mutant.stage], report["diagnosis"]


@pytest.mark.xdist_group("trl_mutants_1")  # batch 1 has one tree fewer than batch 0
def test_grpo_check_command_on_a_trl_tree(tmp_path):
    """`grpo-check PATH --kind trl --json` on a stock copy: exit 0, valid JSON, locations in the copy."""
    tree = mutated_copy(STOCK, tmp_path)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "grpo-check"), str(tree), "--kind", "trl", "--json"],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        env=_child_env(),
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    report = json.loads(result.stdout)
    assert report["kind"] == "trl" and report["summary"]["fail"] == 0
    locations = [r["location"] for r in report["results"] if r.get("location")]
    assert locations and all(loc.startswith(str(tree.resolve())) for loc in locations), locations
