"""The local runner's mechanics (timeouts, JSON lines, resume) and the report with its PNG chart."""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

import pytest

from task_harness.agent_env import agent_env
from task_harness.report import load_results, render_report, write_chart
from task_harness.runner import AgentView, TrialResult, append_result, finished_trials, run_agent
from task_harness.verifier import jail


def _view(tmp_path: Path) -> AgentView:
    for name in ("workspace", "home", "tmp", "view"):
        (tmp_path / name).mkdir()
    jail.prepare(tmp_path / "workspace", tmp_path / "home", tmp_path / "tmp")
    return AgentView(tmp_path, agent_env("no-skill"))


needs_jail = pytest.mark.skipif(not jail.available(), reason="needs root and unshare")


@needs_jail
def test_timeout_kills_everything_the_agent_started(tmp_path):
    """At the time limit the agent and its background children die, a `setsid` one included."""
    view = _view(tmp_path)
    started = time.perf_counter()
    status, _ = run_agent("setsid sleep 6017 & sleep 6017", view, 2)
    assert status == "timeout"
    assert time.perf_counter() - started < 30
    time.sleep(0.2)
    assert not any(b"sleep\x006017" in p.read_bytes() for p in _cmdlines()), "a child survived"


@needs_jail
def test_a_daemon_dies_when_the_agent_exits(tmp_path):
    view = _view(tmp_path)
    status, _ = run_agent("setsid sh -c 'sleep 6029' > /dev/null 2>&1 < /dev/null & true", view, 30)
    assert status == "ok"
    time.sleep(0.2)
    assert not any(b"sleep 6029" in p.read_bytes() for p in _cmdlines()), "the daemon survived"


def _cmdlines() -> list[Path]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (entry / "cmdline").exists():
            found.append(entry / "cmdline")
    return found


@needs_jail
def test_agent_runs_in_its_workspace_with_placeholders(tmp_path):
    view = _view(tmp_path)
    (tmp_path / "home" / "instruction.md").write_text("fix it")
    status, _ = run_agent("cat {instruction} > seen.txt && pwd > where.txt", view, 30)
    assert status == "ok"
    assert (view.workspace / "seen.txt").read_text() == "fix it"
    assert (view.workspace / "where.txt").read_text().strip() == "/app"


def test_results_are_appended_and_resume_skips_finished_trials(tmp_path):
    results = tmp_path / "results.jsonl"
    append_result(results, TrialResult("t1", "nop", "no-skill", 0, 0.0, {"bug": 0.0}))
    append_result(results, TrialResult("t1", "nop", "no-skill", 1, 0.0, {"bug": 0.0}))
    with results.open("a") as out:
        out.write('{"task": "t1", "agent"')  # a run interrupted mid-write
    assert finished_trials(results) == {("t1", "nop", "no-skill", 0), ("t1", "nop", "no-skill", 1)}
    assert len(load_results(results)) == 2


def _row(task, condition, reward, bugs):
    return {
        "task": task,
        "agent": "claude",
        "condition": condition,
        "trial": 0,
        "reward": reward,
        "bugs": bugs,
        "status": "ok",
    }


def test_report_gives_mean_reward_pass_rate_and_fix_rates(tmp_path):
    rows = [
        _row("trl-x", "no-skill", 0.25, {"a": 1.0, "b": 0.0, "anti_cheat": 1.0}),
        _row("trl-x", "no-skill", 1.0, {"a": 1.0, "b": 1.0, "anti_cheat": 1.0}),
        _row("trl-x", "skill", 1.0, {"a": 1.0, "b": 1.0, "anti_cheat": 1.0}),
    ]
    text = render_report(rows)
    line = next(row for row in text.splitlines() if "agent/no-skill" in row and "trl-x" in row)
    assert "0.625" in line and "50%" in line
    assert "b: 50%" in text and "anti_cheat" not in text


def test_chart_is_a_valid_png(tmp_path):
    rows = [_row("trl-x", "no-skill", 0.5, {}), _row("trl-x", "skill", 1.0, {})]
    data = write_chart(rows, tmp_path / "chart.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat_length = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41 : 41 + idat_length])
    assert len(raw) == height * (1 + 3 * width)
    assert raw.count(bytes((31, 119, 180))) > 10  # the skill bar is drawn
