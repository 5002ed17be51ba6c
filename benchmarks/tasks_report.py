"""Wall time of `tasks report`'s figures and chart, on a SkillsBench-sized evaluation.

The evaluation: 12 tasks x 2 agents x 2 conditions x 5 trials (240 trials), synthetic rewards
and times drawn from a seeded generator. Goal: figures (10,000 bootstrap resamples per
interval) under 2 s, and the chart under 5 s, of CPU time (wall time is printed beside it).
Last line: `tasks_report: trials N, figures S s, chart S s` (CPU seconds).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from task_harness.report import draw, render_tables
from task_harness.report_data import Trial
from task_harness.report_stats import summarise

GOAL_FIGURES = 2.0
GOAL_CHART = 5.0


def evaluation(seed: int = 0) -> list[Trial]:
    rng = random.Random(seed)
    return [
        Trial(
            "local",
            f"task-{task:02d}",
            f"agent-{agent}",
            condition,
            rng.choice((0.0, 0.5, 1.0)),
            {"bug_a": rng.choice((0.0, 1.0)), "bug_b": rng.choice((0.0, 1.0))},
            seconds=rng.uniform(300, 1800),
        )
        for task in range(12)
        for agent in range(2)
        for condition in ("no-skill", "skill")
        for _ in range(5)
    ]


def main() -> int:
    trials = evaluation()
    started, cpu = time.perf_counter(), time.process_time()
    summary = summarise(trials)
    figures, figures_cpu = time.perf_counter() - started, time.process_time() - cpu
    with tempfile.TemporaryDirectory() as out:
        started, cpu = time.perf_counter(), time.process_time()
        charts = draw(summary, render_tables(summary), Path(out))
        chart, chart_cpu = time.perf_counter() - started, time.process_time() - cpu
    # The goals are on CPU time: on a shared machine the wall time also counts waiting.
    print(f"{'part':<8} {'wall s':>7} {'cpu s':>7} {'goal s':>7} {'ratio':>6}")
    print(
        f"{'figures':<8} {figures:>7.2f} {figures_cpu:>7.2f} {GOAL_FIGURES:>7.1f} "
        f"{figures_cpu / GOAL_FIGURES:>6.2f}"
    )
    if charts is None:
        print("chart: matplotlib is not installed, not timed")
    else:
        print(
            f"{'chart':<8} {chart:>7.2f} {chart_cpu:>7.2f} {GOAL_CHART:>7.1f} "
            f"{chart_cpu / GOAL_CHART:>6.2f}"
        )
    print(
        f"tasks_report: trials {len(trials)}, figures {figures_cpu:.2f} s, "
        f"chart {chart_cpu:.2f} s" + ("" if charts else " (not drawn)")
    )
    return 0 if figures_cpu <= GOAL_FIGURES and (charts is None or chart_cpu <= GOAL_CHART) else 1


if __name__ == "__main__":
    sys.exit(main())
