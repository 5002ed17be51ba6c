"""`tasks report DIR...`: what the skill changes, from local runs and Harbor jobs.

Reads the trials (report_data), computes the figures with their intervals (report_stats), prints
them as tables or JSON, and draws the chart and its HTML page (report_chart) when matplotlib is
installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

CHART_HINT = (
    "charts: not drawn, matplotlib is missing; pip install 'grpo-skill-tasks[report]' to get them"
)


def render_tables(summary: dict) -> str:
    """The groups, the per-bug fix rates and the uplift, as fixed-width text tables."""
    groups = summary["groups"]
    # Column widths fit the longest task and agent names (Harbor's agent/model names are long).
    tw = max([len("task"), len("overall (99 tasks)")] + [len(g["task"]) for g in groups])
    aw = max([len("agent")] + [len(g["agent"]) for g in groups])
    return "\n\n".join(
        (
            _groups_table(groups, tw, aw),
            _fix_rates_table(groups, tw, aw),
            _uplift_table(summary, tw, aw),
        )
    )


def _groups_table(groups: list[dict], tw: int, aw: int) -> str:
    usage = any(g["input_tokens"] is not None or g["cost_usd"] is not None for g in groups)
    header = (
        f"{'task':<{tw}} {'agent':<{aw}} {'condition':<9} {'trials':>6} "
        f"{'mean reward [95% CI]':<22} {'full pass':>9} {'median s [min-max]':<20} "
        f"{'crash':>5} {'timeout':>7}"
    )
    if usage:
        header += f" {'tokens in/out':>15} {'cost $':>7}"
    lines = ["reward and time per task, agent and condition", header]
    for g in groups:
        line = (
            f"{g['task']:<{tw}} {g['agent']:<{aw}} {g['condition']:<9} {g['trials']:>6} "
            f"{_reward(g):<22} {_rate(g['full_pass_rate']):>9} {_time(g['seconds']):<20} "
            f"{g['crashes']:>5} {g['timeouts']:>7}"
        )
        if usage:
            line += f" {_tokens(g):>15} {_money(g['cost_usd']):>7}"
        lines.append(line)
    return "\n".join(line.rstrip() for line in lines)


def _fix_rates_table(groups: list[dict], tw: int, aw: int) -> str:
    lines = ["per-bug fix rates", f"{'task':<{tw}} {'agent':<{aw}} {'condition':<9} bug: rate"]
    for g in groups:
        rates = "  ".join(f"{bug}: {rate:.0%}" for bug, rate in g["fix_rates"].items())
        lines.append(f"{g['task']:<{tw}} {g['agent']:<{aw}} {g['condition']:<9} {rates}")
    return "\n".join(line.rstrip() for line in lines)


def _uplift_table(summary: dict, tw: int, aw: int) -> str:
    lines = [
        "skill uplift: skill minus no skill (overall: mean over tasks, paired by task)",
        f"{'agent':<{aw}} {'task':<{tw}} {'reward':>7} {'[95% CI]':<17} {'median s':>8} {'[95% CI]':<17}",
    ]
    if not summary["uplift"]:
        lines.append("(no agent ran a task in both conditions)")
    for row in summary["uplift"]:
        lines.append(
            f"{row['agent']:<{aw}} {row['task']:<{tw}} {_delta(row['reward'], row['seconds'])}"
        )
    for row in summary["overall"]:
        tasks = row["reward"]["tasks"] if row["reward"] else 0
        label = f"overall ({tasks} task{'s' if tasks != 1 else ''})"
        lines.append(f"{row['agent']:<{aw}} {label:<{tw}} {_delta(row['reward'], row['seconds'])}")
        if row.get("left_out"):
            why = ", ".join(f"{task} ({reason})" for task, reason in row["left_out"].items())
            lines.append(f"{'':<{aw}} (left out: {why})")
    return "\n".join(line.rstrip() for line in lines)


def _reward(g: dict) -> str:
    if g["mean_reward"] is None:
        return "no reward"
    low, high = g["reward_ci"]
    return f"{g['mean_reward']:.3f} [{low:.3f}, {high:.3f}]"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def _time(seconds: dict | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds['median']:.0f} [{seconds['min']:.0f}-{seconds['max']:.0f}]"


def _tokens(g: dict) -> str:
    if g["input_tokens"] is None and g["output_tokens"] is None:
        return "-"
    return f"{_count(g['input_tokens'])}/{_count(g['output_tokens'])}"


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _delta(reward: dict | None, seconds: dict | None) -> str:
    def cell(figure: dict | None, fmt: str) -> str:
        if figure is None:
            return f"{'-':>{8 if fmt == '.0f' else 7}} {'':<17}"
        low, high = figure["ci"]
        width = 8 if fmt == ".0f" else 7
        # "z": a difference that rounds to zero prints as +0, never -0.
        return f"{figure['delta']:>+z{width}{fmt}} {f'[{low:+z{fmt}}, {high:+z{fmt}}]':<17}"

    return f"{cell(reward, '.3f')} {cell(seconds, '.0f')}".rstrip()


def draw(summary: dict, tables: str, out: Path) -> tuple[Path, Path] | None:
    """Write out/report.png and out/report.html; None when matplotlib is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    from task_harness.report_chart import write_chart, write_html

    png = write_chart(summary, out / "report.png")
    return png, write_html(png, tables, out / "report.html")
