"""Wall time to build every debug task and verify it with the oracle and nop agents.

Goal: the whole suite under 5 minutes on 2 cores (two tasks verified at a time).
Last line: `tasks_verify: tasks N, seconds S`.
"""

from __future__ import annotations

import sys
import time

from task_harness.baselines import verify_tasks
from task_harness.spec import load_tasks

GOAL_SECONDS = 300.0


def main() -> int:
    specs = load_tasks()
    started = time.perf_counter()
    rows = verify_tasks(specs, jobs=2)
    seconds = time.perf_counter() - started
    print(f"{'task':<34} {'oracle':>6} {'nop':>5} {'ok':>4} {'seconds':>8}")
    for row in rows:
        print(
            f"{row['id']:<34} {row['oracle']:>6.2f} {row['nop']:>5.2f} "
            f"{'yes' if row['ok'] else 'NO':>4} {row['seconds']:>8.1f}"
        )
    by_family = {}
    for spec, row in zip(specs, rows, strict=True):
        by_family.setdefault(spec.family, []).append(row["seconds"])
    for family, times in sorted(by_family.items()):
        print(
            f"{family} family: {len(times)} tasks, {sum(times) / len(times):.1f} s per task (oracle + nop)"
        )
    print(
        f"suite wall time {seconds:.1f} s vs goal {GOAL_SECONDS:.0f} s: ratio {seconds / GOAL_SECONDS:.2f}"
    )
    print(f"tasks ok: {sum(r['ok'] for r in rows)} / {len(rows)}")
    print(f"tasks_verify: tasks {len(rows)}, seconds {seconds:.1f}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
