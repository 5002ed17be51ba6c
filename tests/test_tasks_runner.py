"""The local runner's mechanics (timeouts, JSON lines, resume) and the report with its PNG chart."""

from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path

from task_harness.report import load_results, render_report, write_chart
from task_harness.runner import TrialResult, append_result, finished_trials, run_agent


def test_timeout_kills_the_agents_whole_process_group(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    started = time.perf_counter()
    status, _ = run_agent("sleep 60 & echo $! > child.pid; sleep 60", workspace, tmp_path / "i", 1)
    assert status == "timeout"
    assert time.perf_counter() - started < 30
    child = int((workspace / "child.pid").read_text())
    time.sleep(0.2)
    try:
        os.kill(child, 0)
        alive = Path(f"/proc/{child}/stat").read_text().split()[2] != "Z"  # a zombie is dead
    except ProcessLookupError:
        alive = False
    assert not alive, "the background child of the agent survived the time limit"


def test_agent_runs_in_its_workspace_with_placeholders(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    instruction = tmp_path / "instruction.md"
    instruction.write_text("fix it")
    status, _ = run_agent(
        "cat {instruction} > seen.txt && pwd > where.txt", workspace, instruction, 30
    )
    assert status == "ok"
    assert (workspace / "seen.txt").read_text() == "fix it"
    assert (workspace / "where.txt").read_text().strip() == str(workspace)


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
