"""`tasks verify`: every task must give oracle 1.0, nop 0 on every bug, and no shortcut a score.

The shortcut baselines (`task_harness/shortcuts.py`) copy known-good code over the workspace
without debugging anything. A task is sound only if each one that applies to its family scores
at most `BASELINE_MAX` and fixes fewer than all of its bugs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from task_harness.build import build_task
from task_harness.mutants import MutantError
from task_harness.runner import TrialResult, run_trial
from task_harness.shortcuts import SHORTCUTS, applies
from task_harness.spec import TaskSpec

BASELINE_MAX = 0.5


def full_pass(trial: TrialResult, bug_ids: list[str]) -> bool:
    """Every bug of the task fixed (decoys aside)."""
    return trial.status == "ok" and all(trial.bugs.get(b, 0.0) == 1.0 for b in bug_ids)


def baseline_problem(name: str, trial: TrialResult, bug_ids: list[str]) -> str:
    """Why the baseline `name` shows the task can be solved without debugging; "" if it cannot."""
    if trial.status != "ok":
        return f"{name} could not run ({trial.status}): {trial.detail[-300:]}"
    if trial.reward > BASELINE_MAX:
        return f"{name} scores {trial.reward:.2f} (at most {BASELINE_MAX} allowed)"
    if full_pass(trial, bug_ids):
        return f"{name} fixes every bug"
    return ""


def verify_task(spec: TaskSpec, scratch: Path) -> dict:
    """Build `spec`, run oracle, nop and the shortcut baselines, and say whether it is sound."""
    try:
        built = build_task(spec, scratch)
    except MutantError as error:  # the source moved under a patch: the task must be updated
        return {
            "id": spec.id,
            "oracle": 0.0,
            "nop": 0.0,
            "baselines": {},
            "ok": False,
            "nop_bugs": {},
            "seconds": 0.0,
            "detail": f"cannot build: {error}",
        }
    trials = {"oracle": run_trial(built, "oracle"), "nop": run_trial(built, "nop")}
    for name in SHORTCUTS:
        if applies(name, spec.family):
            trials[name] = run_trial(built, name)
    oracle, nop = trials["oracle"], trials["nop"]
    bug_ids = [b.id for b in spec.bugs if b.kind == "bug"]
    nop_bugs = {b: nop.bugs.get(b, 0.0) for b in bug_ids}
    problems = []
    if oracle.status != "ok" or oracle.reward != 1.0:
        problems.append(f"oracle scores {oracle.reward:.2f}: {oracle.detail[-1200:]}")
    if nop.status != "ok" or any(nop_bugs.values()):
        fixed = [b for b, v in nop_bugs.items() if v]
        problems.append(f"nop scores on {', '.join(fixed) or 'nothing'} ({nop.status})")
    baselines = {name: t for name, t in trials.items() if name in SHORTCUTS}
    problems += [p for name, t in baselines.items() if (p := baseline_problem(name, t, bug_ids))]
    return {
        "id": spec.id,
        "oracle": oracle.reward,
        "nop": nop.reward,
        "baselines": {name: t.reward for name, t in baselines.items()},
        "ok": not problems,
        "nop_bugs": nop_bugs,
        "seconds": round(sum(t.seconds for t in trials.values()), 1),
        "detail": "\n".join(problems),
    }


def verify_tasks(
    specs: list[TaskSpec], jobs: int = 2, progress: Callable[[str], None] | None = None
) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="grpo-verify-") as scratch:

        def one(spec: TaskSpec) -> dict:
            row = verify_task(spec, Path(scratch))
            if progress:
                verdict = "ok" if row["ok"] else "FAIL"
                shortcuts = "  ".join(f"{n} {r:.2f}" for n, r in row["baselines"].items())
                progress(
                    f"{row['id']:<34} oracle {row['oracle']:.2f}  nop {row['nop']:.2f}  "
                    f"{shortcuts}  {verdict}  ({row['seconds']:.0f} s)"
                )
                if not row["ok"]:
                    progress(row["detail"])
            return row

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, specs))
