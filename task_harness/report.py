"""`tasks report DIR`: mean reward, full-pass rate and per-bug fix rates from results.jsonl."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from task_harness.png import bar_chart

NON_BUG_KEYS = {"anti_cheat"}


def load_results(path: Path) -> list[dict]:
    """Every readable trial line of `path`; a half-written last line (an interrupted run) is skipped."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def _condition(row: dict) -> str:
    agent = row["agent"] if row["agent"] in ("oracle", "nop") else "agent"
    return f"{agent}/{row['condition']}"


def summarise(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(task, condition) -> trials, mean reward, full-pass rate, per-bug fix rates."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["task"], _condition(row))].append(row)
    summary = {}
    for key, trials in sorted(groups.items()):
        bugs: dict[str, list[float]] = defaultdict(list)
        for trial in trials:
            for bug, value in trial.get("bugs", {}).items():
                if bug not in NON_BUG_KEYS:
                    bugs[bug].append(value)
        summary[key] = {
            "trials": len(trials),
            "mean_reward": sum(t["reward"] for t in trials) / len(trials),
            "pass_rate": sum(t["reward"] >= 1.0 for t in trials) / len(trials),
            "failed_runs": sum(t["status"] != "ok" for t in trials),
            "fix_rates": {bug: sum(v) / len(v) for bug, v in sorted(bugs.items())},
        }
    return summary


def render_report(rows: list[dict]) -> str:
    summary = summarise(rows)
    lines = [
        f"{'task':<34} {'condition':<18} {'trials':>6} {'mean reward':>11} {'full pass':>9} {'crash/timeout':>13}",
    ]
    for (task, condition), s in summary.items():
        lines.append(
            f"{task:<34} {condition:<18} {s['trials']:>6} {s['mean_reward']:>11.3f} "
            f"{s['pass_rate']:>9.0%} {s['failed_runs']:>13}"
        )
    lines += ["", "per-bug fix rates", f"{'task':<34} {'condition':<18} bug: rate"]
    for (task, condition), s in summary.items():
        rates = "  ".join(f"{bug}: {rate:.0%}" for bug, rate in s["fix_rates"].items())
        lines.append(f"{task:<34} {condition:<18} {rates}")
    return "\n".join(lines)


def write_chart(rows: list[dict], path: Path) -> Path:
    """A PNG bar chart of the full-pass rate per task and condition."""
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    for (task, condition), s in summarise(rows).items():
        groups[task][condition] = s["pass_rate"]
    return bar_chart(dict(groups), "full-pass rate per task and condition", path)
