"""The local runner's mechanics: timeouts, JSON lines, resume (the report: test_tasks_report*.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from task_harness.report_data import load_local
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
    assert len(load_local(results)) == 2  # the report skips the half-written line too
