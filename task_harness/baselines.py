"""`tasks verify`: every task must give oracle 1.0 and nop 0 on every bug."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from task_harness.build import build_task
from task_harness.mutants import MutantError
from task_harness.runner import run_trial
from task_harness.spec import TaskSpec


def verify_task(spec: TaskSpec, scratch: Path) -> dict:
    """Build `spec`, run oracle and nop, and say whether the task is sound."""
    try:
        built = build_task(spec, scratch)
    except MutantError as error:  # the source moved under a patch: the task must be updated
        return {
            "id": spec.id,
            "oracle": 0.0,
            "nop": 0.0,
            "ok": False,
            "nop_bugs": {},
            "seconds": 0.0,
            "detail": f"cannot build: {error}",
        }
    oracle = run_trial(built, "oracle")
    nop = run_trial(built, "nop")
    bug_ids = [b.id for b in spec.bugs]
    nop_bugs = {b: nop.bugs.get(b, 0.0) for b in bug_ids}
    ok = (
        oracle.status == "ok"
        and nop.status == "ok"
        and oracle.reward == 1.0
        and all(v == 0.0 for v in nop_bugs.values())
    )
    return {
        "id": spec.id,
        "oracle": oracle.reward,
        "nop": nop.reward,
        "ok": ok,
        "nop_bugs": nop_bugs,
        "seconds": round(oracle.seconds + nop.seconds, 1),
        "detail": "" if ok else (oracle.detail if oracle.reward != 1.0 else nop.detail)[-1500:],
    }


def verify_tasks(
    specs: list[TaskSpec], jobs: int = 2, progress: Callable[[str], None] | None = None
) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="grpo-verify-") as scratch:

        def one(spec: TaskSpec) -> dict:
            row = verify_task(spec, Path(scratch))
            if progress:
                verdict = "ok" if row["ok"] else "FAIL"
                progress(
                    f"{row['id']:<34} oracle {row['oracle']:.2f}  nop {row['nop']:.2f}  "
                    f"{verdict}  ({row['seconds']:.0f} s)"
                )
                if not row["ok"]:
                    progress(row["detail"])
            return row

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, specs))
