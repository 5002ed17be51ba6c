"""Wall time to build every debug task and verify it with oracle, nop and the shortcut baselines.

Goal: the whole suite within 15 minutes on 2 cores (two tasks verified at a time), each baseline
(`upstream-restore` on the trl family, `reference-copy` on the reference family) at most 0.5.
Last line: `tasks_verify: tasks N, seconds S, baseline_max R`.
"""

from __future__ import annotations

import sys
import time

from task_harness.baselines import BASELINE_MAX, verify_tasks
from task_harness.shortcuts import SHORTCUTS
from task_harness.spec import load_tasks

GOAL_SECONDS = 900.0


def main() -> int:
    specs = load_tasks()
    started = time.perf_counter()
    rows = verify_tasks(specs, jobs=2)
    seconds = time.perf_counter() - started
    columns = "".join(f" {name:>16}" for name in SHORTCUTS)
    print(f"{'task':<34} {'oracle':>6} {'nop':>5}{columns} {'ok':>4} {'seconds':>8}")
    for row in rows:
        shortcuts = "".join(
            f" {row['baselines'][n]:>16.2f}" if n in row["baselines"] else f" {'-':>16}"
            for n in SHORTCUTS
        )
        print(
            f"{row['id']:<34} {row['oracle']:>6.2f} {row['nop']:>5.2f}{shortcuts} "
            f"{'yes' if row['ok'] else 'NO':>4} {row['seconds']:>8.1f}"
        )
    by_family: dict[str, list[float]] = {}
    for spec, row in zip(specs, rows, strict=True):
        by_family.setdefault(spec.family, []).append(row["seconds"])
    for family, times in sorted(by_family.items()):
        print(f"{family} family: {len(times)} tasks, {sum(times) / len(times):.1f} s per task")
    for name in SHORTCUTS:
        scores = [r["baselines"][name] for r in rows if name in r["baselines"]]
        if scores:
            print(
                f"{name}: mean {sum(scores) / len(scores):.2f}, max {max(scores):.2f} over "
                f"{len(scores)} tasks (at most {BASELINE_MAX} allowed)"
            )
    print(
        f"suite wall time {seconds:.1f} s vs goal {GOAL_SECONDS:.0f} s: ratio {seconds / GOAL_SECONDS:.2f}"
    )
    print(f"tasks ok: {sum(r['ok'] for r in rows)} / {len(rows)}")
    baseline_max = max((v for r in rows for v in r["baselines"].values()), default=0.0)
    print(
        f"tasks_verify: tasks {len(rows)}, seconds {seconds:.1f}, baseline_max {baseline_max:.2f}"
    )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
