"""The report's pictures, drawn with matplotlib (the optional `report` extra of grpo-skill-tasks).

One figure: mean reward per task with its bootstrap interval, median time-to-finish per task with
its min-max range, and the per-bug fix rates as a heat map; one bar colour per agent and
condition (dark: skill, light: no skill). The figure is built without pyplot, so nothing global
(backend, open figures) is touched. The HTML page embeds the PNG and the text tables.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure

DPI = 100
BAR_GROUP_WIDTH = 0.8


def series_names(summary: dict) -> list[str]:
    """One bar series per agent and condition, skill first, in a stable order."""
    keys = sorted({(g["agent"], g["condition"] != "skill") for g in summary["groups"]})
    return [f"{agent} · {'no-skill' if not_skill else 'skill'}" for agent, not_skill in keys]


def draw_figure(summary: dict) -> Figure:
    """The three panels; each bar series is a BarContainer labelled "agent · condition"."""
    tasks = sorted({g["task"] for g in summary["groups"]})
    series = series_names(summary)
    rows = _heatmap_rows(summary)
    width = max(10.0, 3.0 + 0.45 * len(tasks) * len(series))
    height = 8.0 + 0.3 * len(rows)
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    # Two subfigures, each laid out on its own: the heat map's long row labels would otherwise
    # push the bar panels' left edge right as well.
    bar_part, heat_part = figure.subfigures(2, 1, height_ratios=[6, max(2.0, 0.35 * len(rows))])
    reward_axes, time_axes = bar_part.subplots(2, 1)
    _bars(reward_axes, summary, tasks, series, _reward_bar, "{:.2f}")
    reward_axes.set_ylim(0, 1.15)  # room for the labels above an interval reaching 1
    reward_axes.set_title("mean reward, 95% bootstrap interval", fontsize="medium")
    _bars(time_axes, summary, tasks, series, _time_bar, "{:.0f}")
    time_axes.set_ylim(0, time_axes.get_ylim()[1] * 1.08)
    time_axes.set_title("median time to finish (s), min-max range", fontsize="medium")
    handles, labels = reward_axes.get_legend_handles_labels()
    # Two rows, so that each column is one agent (skill above no skill).
    bar_part.legend(handles, labels, loc="outside upper center", ncols=math.ceil(len(series) / 2))
    _heatmap(heat_part.subplots(), summary, series, rows)
    return figure


def _bars(axes, summary, tasks, series, value, label) -> None:
    """One bar series per agent and condition, each bar's value written above its error bar
    (so that a bar of height 0 is seen to be there)."""
    by_key = {(g["task"], _series(g)): g for g in summary["groups"]}
    colours = _colours(series)
    step = BAR_GROUP_WIDTH / max(1, len(series))
    for i, name in enumerate(series):
        heights, errors = [], [[], []]
        for task in tasks:
            group = by_key.get((task, name))
            height, low, high = value(group) if group else (math.nan, 0.0, 0.0)
            heights.append(height)
            errors[0].append(low)
            errors[1].append(high)
        offsets = [t - BAR_GROUP_WIDTH / 2 + step * (i + 0.5) for t in range(len(tasks))]
        axes.bar(offsets, heights, step, yerr=errors, capsize=3, label=name, color=colours[name])
        for x, height, up in zip(offsets, heights, errors[1], strict=True):
            if not math.isnan(height):
                axes.annotate(
                    label.format(height),
                    (x, height + up),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    axes.set_xticks(range(len(tasks)), tasks, fontsize="small")


def _reward_bar(group: dict) -> tuple[float, float, float]:
    """Bar height and the distances down and up to the interval's ends."""
    if group["mean_reward"] is None:
        return math.nan, 0.0, 0.0
    mean, (low, high) = group["mean_reward"], group["reward_ci"]
    return mean, mean - low, high - mean


def _time_bar(group: dict) -> tuple[float, float, float]:
    seconds = group["seconds"]
    if seconds is None:
        return math.nan, 0.0, 0.0
    median = seconds["median"]
    return median, median - seconds["min"], seconds["max"] - median


def _heatmap_rows(summary: dict) -> list[tuple[str, str]]:
    return sorted({(g["task"], bug) for g in summary["groups"] for bug in g["fix_rates"]})


def _heatmap(axes, summary, series, rows) -> None:
    by_key = {(g["task"], _series(g)): g for g in summary["groups"]}
    matrix = [
        [by_key.get((task, name), {}).get("fix_rates", {}).get(bug, math.nan) for name in series]
        for task, bug in rows
    ]
    axes.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for r, values in enumerate(matrix):
        for c, rate in enumerate(values):
            if not math.isnan(rate):
                colour = "black" if rate > 0.6 else "white"
                axes.text(c, r, f"{rate:.0%}", ha="center", va="center", color=colour, fontsize=8)
    axes.set_xticks(range(len(series)), series, fontsize="small", rotation=20, ha="right")
    axes.set_yticks(range(len(rows)), [f"{task}: {bug}" for task, bug in rows], fontsize="small")
    axes.set_title("per-bug fix rate (blank: no trials of that group)", fontsize="medium")


def _series(group: dict) -> str:
    return f"{group['agent']} · {group['condition']}"


def _colours(series: list[str]) -> dict[str, tuple]:
    """Matplotlib's paired palette: one hue per agent, dark for skill and light for no skill."""
    agents = sorted({name.rsplit(" · ", 1)[0] for name in series})
    palette = colormaps["tab20"]
    colours = {}
    for name in series:
        agent, condition = name.rsplit(" · ", 1)
        shade = 0 if condition == "skill" else 1
        colours[name] = palette((2 * agents.index(agent) + shade) % 20)
    return colours


def write_chart(summary: dict, path: Path) -> Path:
    """Draw the figure and save it as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draw_figure(summary).savefig(path, dpi=DPI)
    return path


def write_html(png: Path, tables: str, path: Path) -> Path:
    """A self-contained page: the PNG embedded as data, then the text tables."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    path.write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>grpo tasks report</title>"
        "</head><body>\n<h1>grpo tasks report</h1>\n"
        f"<img alt='reward, time and fix rates per task and condition' "
        f"src='data:image/png;base64,{data}'>\n<pre>{html.escape(tables)}</pre>\n</body></html>\n"
    )
    return path
