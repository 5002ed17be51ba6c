"""`tasks report` on the local runner's results: the bootstrap intervals against values derived
by hand, the paired uplift, the text and JSON outputs, the matplotlib chart, and the README's
example (a real recorded run under tests/data/report-example/)."""

from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from task_harness import report as report_module
from task_harness.cli import tasks
from task_harness.report import CHART_HINT, render_tables
from task_harness.report_data import ReportInputError, Trial, load_local, load_trials
from task_harness.report_stats import (
    bootstrap_interval,
    paired_uplift_interval,
    row_mean,
    summarise,
    uplift_interval,
)

EXAMPLE = Path(__file__).parent / "data" / "report-example"
README = Path(__file__).resolve().parent.parent / "README.md"


def trial(task, condition, reward, seconds=10.0, agent="cmd-a", **bugs) -> Trial:
    return Trial("local", task, agent, condition, reward, bugs, seconds=seconds)


def test_interval_of_one_success_in_four_is_the_binomial_percentiles():
    """Resampling [0, 0, 0, 1] gives k/4 with k ~ Binomial(4, 1/4): P(k=0) = 0.316, so the 2.5th
    percentile is 0; P(k<=2) = 0.949 < 0.975 <= P(k<=3) = 0.996, so the 97.5th is 3/4."""
    assert bootstrap_interval([0.0, 0.0, 0.0, 1.0], row_mean, "x") == [0.0, 0.75]


def test_interval_is_seeded_and_degenerate_for_constant_values():
    values = [0.2, 0.9, 0.4, 1.0, 0.0]
    assert bootstrap_interval(values, row_mean, "g") == bootstrap_interval(values, row_mean, "g")
    assert bootstrap_interval([0.5, 0.5, 0.5], row_mean, "g") == [0.5, 0.5]


def test_uplift_interval_resamples_each_condition():
    assert uplift_interval([1.0] * 3, [0.0] * 3, row_mean, "u") == [1.0, 1.0]
    low, high = uplift_interval([1.0, 0.0], [0.0, 0.0], row_mean, "u")
    assert (low, high) == (0.0, 1.0)  # the skill mean alone varies over 0, 0.5, 1


def test_overall_interval_resamples_tasks_too():
    """Two tasks, uplift 1 on one and 0 on the other with no trial noise: resampling trials only
    would give [0.5, 0.5]; drawing the two tasks gives mean uplifts 0, 0.5, 1 with probabilities
    1/4, 1/2, 1/4, so the interval is [0, 1]."""
    pairs = [([1.0, 1.0], [0.0, 0.0]), ([0.5, 0.5], [0.5, 0.5])]
    assert paired_uplift_interval(pairs, row_mean, "o") == [0.0, 1.0]


def test_summary_pairs_by_task_and_uses_the_median_time():
    trials = [
        trial("t1", "no-skill", 0.0, seconds=100),
        trial("t1", "no-skill", 0.5, seconds=100),
        trial("t1", "no-skill", 1.0, seconds=100),
        trial("t1", "skill", 1.0, seconds=10),
        trial("t1", "skill", 1.0, seconds=10),
        trial("t1", "skill", 1.0, seconds=1000),  # one slow trial moves the mean, not the median
        trial("t2", "no-skill", 1.0),
        trial("t2", "skill", 1.0),
        trial("t3", "skill", 1.0),  # no no-skill run: not paired, not in the overall
    ]
    summary = summarise(trials)
    t1 = next(row for row in summary["uplift"] if row["task"] == "t1")
    assert t1["reward"]["delta"] == pytest.approx(0.5)
    assert t1["seconds"]["delta"] == -90  # median 10 - 100 (the mean difference would be +240)
    (overall,) = summary["overall"]
    assert overall["tasks"] == ["t1", "t2"]
    assert overall["reward"]["delta"] == pytest.approx((0.5 + 0.0) / 2)
    low, high = overall["reward"]["ci"]
    assert low <= overall["reward"]["delta"] <= high


def test_a_diff_solvable_task_keeps_its_row_but_leaves_the_overall_uplift():
    """A fork task that a hunk-level restore half solves (task_harness/difficulty.py) says little
    about the skill: its own uplift row stays, the overall mean is over the other tasks."""
    trials = [
        trial("fork", "no-skill", 0.0),
        trial("fork", "skill", 1.0),
        trial("own", "no-skill", 0.5),
        trial("own", "skill", 0.75),
    ]
    summary = summarise(trials, left_out={"fork": "diff-solvable"})
    assert {row["task"] for row in summary["uplift"]} == {"fork", "own"}
    (overall,) = summary["overall"]
    assert overall["tasks"] == ["own"] and overall["left_out"] == {"fork": "diff-solvable"}
    assert overall["reward"]["delta"] == pytest.approx(0.25)
    assert "left out: fork (diff-solvable)" in render_tables(summary)
    assert summarise(trials)["overall"][0]["reward"]["delta"] == pytest.approx((1.0 + 0.25) / 2)


def test_a_difference_that_rounds_to_zero_prints_as_plus_zero():
    trials = [trial("t", "no-skill", 0.5, seconds=10.4), trial("t", "skill", 0.5, seconds=10.0)]
    uplift = render_tables(summarise(trials)).split("skill uplift")[1]
    assert "+0.000 [+0.000, +0.000]" in uplift and "+0 [+0, +0]" in uplift
    assert "-0" not in uplift


def test_full_pass_fix_rates_and_failures():
    total = 0.35 + 0.35 + 0.30  # a weighted sum as the verifier computes it
    trials = [
        trial("t", "skill", total, a=1.0, b=1.0),
        trial("t", "skill", 0.35, a=1.0, b=0.0),
        Trial("local", "t", "cmd-a", "skill", 0.0, {"a": 0.0, "b": 0.0}, status="timeout"),
        Trial("local", "t", "cmd-a", "skill", 0.0, {}, status="tampered"),
    ]
    (group,) = summarise(trials)["groups"]
    assert group["full_pass_rate"] == 0.25
    assert group["fix_rates"] == {"a": pytest.approx(2 / 3), "b": pytest.approx(1 / 3)}
    assert (group["crashes"], group["timeouts"]) == (1, 1)


def test_local_results_keep_their_condition_and_name_command_agents(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [
        {"task": "t", "agent": "oracle", "condition": "no-skill", "trial": 0, "reward": 1.0,
         "bugs": {"a": 1.0, "anti_cheat": 1.0, "learning": 1.0}, "status": "ok", "seconds": 3.0},
        {"task": "t", "agent": "/opt/bin/claude -p x", "condition": "skill", "trial": 0,
         "reward": 0.0, "bugs": {}, "status": "timeout", "seconds": 60.0},
    ]  # fmt: skip
    results.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"task": "t", "ag')
    oracle, claude = load_local(results)
    assert (oracle.agent, oracle.bugs, oracle.condition) == ("oracle", {"a": 1.0}, "no-skill")
    assert (claude.agent, claude.status, claude.seconds) == ("cmd-claude", "timeout", 60.0)
    results.write_text(json.dumps({**rows[0], "condition": "maybe"}) + "\n")
    with pytest.raises(ReportInputError, match="condition 'maybe'"):
        load_local(results)
    results.write_text(json.dumps({"task": "t"}) + "\n")
    with pytest.raises(ReportInputError, match="not a trial record"):
        load_local(results)


def test_the_recorded_example_is_a_real_local_run():
    """The README's example data: results.jsonl exactly as `grpo-check tasks run` wrote it."""
    rows = [json.loads(line) for line in (EXAMPLE / "results.jsonl").read_text().splitlines()]
    assert {row["condition"] for row in rows} == {"skill", "no-skill"}
    assert {row["agent"].split()[0].rsplit("/", 1)[-1] for row in rows} == {
        "oracle",
        "nop",
        "partial-fixer",
    }
    for row in rows:  # every field of task_harness.runner.TrialResult, nothing else
        assert set(row) == {"task", "agent", "condition", "trial", "reward", "bugs", "status",
                            "seconds", "detail"}  # fmt: skip


def test_cli_json_gives_the_figures_the_tables_print(tmp_path):
    runner = CliRunner()
    text = runner.invoke(tasks, ["report", str(EXAMPLE), "--out", str(tmp_path)])
    assert text.exit_code == 0, text.output
    data = runner.invoke(tasks, ["report", str(EXAMPLE), "--json", "--out", str(tmp_path)])
    assert data.exit_code == 0, data.output
    summary = json.loads(data.output)
    assert render_tables(summary) in text.output
    for group in summary["groups"]:
        low, high = group["reward_ci"]
        row = f"{group['mean_reward']:.3f} [{low:.3f}, {high:.3f}]"
        assert re.search(rf"{group['task']}\s+{re.escape(group['agent'])}\s+{group['condition']}\s+"
                         rf"{group['trials']}\s+{re.escape(row)}", text.output)  # fmt: skip
    for row in summary["overall"]:
        delta, (low, high) = row["reward"]["delta"], row["reward"]["ci"]
        assert f"{delta:+.3f} [{low:+.3f}, {high:+.3f}]" in text.output
    assert summary["charts"] is None or all(Path(p).exists() for p in summary["charts"])


def test_the_readme_shows_what_the_report_prints_on_the_recorded_run(tmp_path):
    block = re.search(r"\$ grpo-check tasks report tests/data/report-example\n(.*?)```",
                      README.read_text(), flags=re.S)  # fmt: skip
    assert block, "the README's report example is missing"
    done = CliRunner().invoke(tasks, ["report", str(EXAMPLE), "--out", str(tmp_path)])
    assert (
        block.group(1).strip() == render_tables(summarise(load_trials([EXAMPLE]))).strip()
        and block.group(1).strip() in done.output
    )


def test_the_readmes_recipe_uses_the_recorded_agent_and_real_options():
    """The recipe that recorded the example (run verbatim from a clone): the scripted agent it
    copies exists, and every option it gives `tasks run` and `tasks export` is one they have."""
    (recipe,) = [block for block in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
                 if "partial-fixer" in block]  # fmt: skip
    root = README.parent
    for path in re.findall(r"tests/data/report-example/[\w-]+", recipe):
        assert (root / path).is_file(), path
    for name in ("run", "export", "report"):
        options = {o for p in tasks.commands[name].params for o in p.opts + p.secondary_opts}
        for line in re.findall(rf"grpo-check tasks {name} ((?:.*\\\n)*.*)", recipe):
            used = set(re.findall(r"(?<!\S)--[\w-]+", line))
            assert used <= options, (name, used - options)


def test_without_matplotlib_the_tables_print_and_one_line_says_how_to_get_charts(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(report_module.importlib.util, "find_spec", lambda name: None)
    done = CliRunner().invoke(tasks, ["report", str(EXAMPLE), "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert "skill uplift" in done.output and done.output.rstrip().endswith(CHART_HINT)
    assert not (tmp_path / "report.png").exists()


def test_chart_has_a_bar_per_condition_with_the_reward_and_its_interval(tmp_path):
    pytest.importorskip("matplotlib")
    from task_harness.report_chart import DPI, draw_figure, write_chart, write_html

    summary = summarise(load_trials([EXAMPLE]))
    figure = draw_figure(summary)
    reward_axes, time_axes, heat_axes = figure.axes[:3]
    bars = {container.get_label(): container for container in reward_axes.containers
            if hasattr(container, "patches")}  # fmt: skip
    tasks_shown = [label.get_text() for label in reward_axes.get_xticklabels()]
    for group in summary["groups"]:
        name = f"{group['agent']} · {group['condition']}"
        patch = bars[name].patches[tasks_shown.index(group["task"])]
        assert patch.get_height() == pytest.approx(group["mean_reward"])
    assert {"skill", "no-skill"} == {name.rsplit(" · ", 1)[1] for name in bars}
    times = {c.get_label() for c in time_axes.containers if hasattr(c, "patches")}
    assert times == set(bars)
    assert heat_axes.images, "the per-bug heat map is drawn"
    figure.draw_without_rendering()  # run the constrained layout
    # The heat map's long row labels take its own left margin, not the bar panels' as well.
    assert reward_axes.get_position().x0 < 0.1 < heat_axes.get_position().x0

    png = write_chart(summary, tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    expected = figure.get_size_inches() * DPI
    assert (width, height) == (round(expected[0]), round(expected[1]))
    assert width >= 800 and height >= 700
    page = write_html(png, "tables", tmp_path / "report.html").read_text()
    embedded = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page).group(1)
    assert base64.b64decode(embedded) == data and "<pre>tables</pre>" in page
