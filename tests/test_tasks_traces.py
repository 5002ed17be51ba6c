"""Bug patches leave no trace a reader could find them by (task_harness/traces.py): nothing left
unused that the fixed trainer uses (ruff's F rules, helpers, parameters), and one modification
time for every workspace file; on every shipped task and on generated ones."""

import random
from pathlib import Path

import pytest

from task_harness import conventions, traces
from task_harness.build import build_task
from task_harness.generate import MAX_REDRAWS, draw, load_corpus, train_config, write_task
from task_harness.mutants import MutantError
from task_harness.spec import load_task, load_tasks

TASKS = load_tasks()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


HELPER = "def helper(x):\n    return x\n"


def test_a_bug_that_leaves_an_import_a_helper_or_a_parameter_unused_is_found(tmp_path):
    fixed = _tree(
        tmp_path / "fixed",
        {
            "pkg/a.py": HELPER,
            "pkg/b.py": (
                "import copy\n\nfrom pkg.a import helper\n\n\n"
                "def f(x, t):\n    return copy.deepcopy(helper(x)) / t\n"
            ),
        },
    )
    buggy = _tree(
        tmp_path / "buggy",
        {
            "pkg/a.py": HELPER,
            "pkg/b.py": "import copy\n\nfrom pkg.a import helper\n\n\ndef f(x, t):\n    return x\n",
        },
    )
    found = "\n".join(traces.unused_by_bugs(buggy, fixed))
    assert "F401 `copy` imported but unused" in found
    assert "F401 `pkg.a.helper` imported but unused" in found
    assert "`helper` is defined and no longer read" in found
    assert "parameter `t` of f is never read" in found


def test_what_the_fixed_trainer_leaves_unused_too_is_not_the_bugs_trace(tmp_path):
    text = "import os\n\n\ndef f(x, t):\n    return x\n"
    fixed = _tree(tmp_path / "fixed", {"m.py": text})
    buggy = _tree(tmp_path / "buggy", {"m.py": text.replace("return x", "return -x")})
    assert traces.unused_by_bugs(buggy, fixed) == []


@pytest.mark.parametrize("spec", TASKS, ids=[spec.id for spec in TASKS])
def test_no_bug_of_a_shipped_task_leaves_a_name_unused(spec):
    assert traces.spec_traces(spec) == [], (
        f"{spec.id}: its bugs leave names unused that the fixed trainer uses; rewrite the patch "
        "as an author who believed the bug would have written it (a hunk in patches.yaml)"
    )


def test_no_generated_task_leaves_a_name_unused(tmp_path):
    corpus = load_corpus()
    for seed in range(12):
        rng = random.Random(seed)
        bugs = draw(corpus.bugs, rng, 2 + seed % 3, set())
        decoy = rng.choice(corpus.decoys)
        drawn = conventions.draw(rng, decoy.id)
        bugs, found = _traces_of_applicable(tmp_path / f"gen-s{seed}", bugs, decoy, drawn, rng)
        assert found == [], f"bugs {[d.bug.id for d in bugs]} leave {found}"


def _traces_of_applicable(folder: Path, bugs, decoy, drawn, rng):
    """`bugs`, with any that the drawn conventions refuse (a bug written for the other
    convention, whose `find` a convention's patch rewrites) redrawn as `tasks generate` does
    (`generate.leaves_traces`), and the traces of the task they make."""
    corpus, rejected = load_corpus(), set()
    for _ in range(MAX_REDRAWS):
        folder = write_task(folder, bugs, decoy, train_config(bugs), [], drawn)
        try:
            return bugs, traces.spec_traces(load_task(folder))
        except MutantError as error:
            refused = {d.bug.id for d in bugs if d.bug.id in str(error)}
            assert refused, error
            rejected |= refused
            kept = [d for d in bugs if d.bug.id not in refused]
            bugs = draw(corpus.bugs, rng, len(bugs), rejected, kept)
    raise AssertionError(f"no applicable bugs after {MAX_REDRAWS} draws")


def _one_time(built: Path) -> None:
    times = traces.mtimes(built / "environment" / "workspace")
    newest = max(times, key=times.get)
    assert len(set(times.values())) == 1, f"{newest} is newer than the rest of the workspace"


@pytest.mark.parametrize(
    "task_id", ["rz-format-stop", "trl-skillsbench-trio", "trl017-second-pass"]
)
def test_every_workspace_file_has_one_modification_time(task_id, tmp_path):
    """One task per way a workspace is built: rlzero, a fork of the installed TRL, of a release."""
    _one_time(build_task(load_tasks(ids=[task_id])[0], tmp_path))


def test_a_generated_task_has_one_modification_time(tmp_path):
    corpus = load_corpus()
    rng = random.Random(1)
    bugs = draw(corpus.bugs, rng, 3, set())
    decoy = rng.choice(corpus.decoys)
    drawn = conventions.draw(rng, decoy.id)
    bugs, _ = _traces_of_applicable(tmp_path / "gen-s1-k3", bugs, decoy, drawn, rng)
    folder = write_task(tmp_path / "gen-s1-k3", bugs, decoy, train_config(bugs), [], drawn)
    _one_time(build_task(load_task(folder), tmp_path / "built"))
