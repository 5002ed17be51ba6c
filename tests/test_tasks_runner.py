"""The local runner's mechanics: timeouts, JSON lines, resume (the report: test_tasks_report*.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from task_harness.agent_env import agent_env
from task_harness.report_data import load_local
from task_harness.runner import (
    AGENT_FILES,
    AgentView,
    TrialResult,
    append_result,
    finished_trials,
    readable_copy,
    run_agent,
)
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


@needs_jail
def test_the_agents_own_files_are_shown_read_only(tmp_path):
    """`agent_files` (`tasks run --agent-files`) appears at /opt/agent, and the agent cannot
    change it."""
    payload = tmp_path / "payload"
    payload.mkdir(mode=0o700)  # private to root, as pytest's temporary folders are
    (payload / "fix.txt").write_text("the fix")
    view = _view(tmp_path)
    view = AgentView(view.root, view.python_env, readable_copy(payload, tmp_path / "copy"))
    command = f"cp {AGENT_FILES}/fix.txt . && (echo x > {AGENT_FILES}/fix.txt || echo refused > no)"
    status, _ = run_agent(command, view, 30)
    assert status == "ok"
    assert (view.workspace / "fix.txt").read_text() == "the fix"
    assert (view.workspace / "no").read_text().strip() == "refused"
    assert (payload / "fix.txt").read_text() == "the fix"


def test_results_are_appended_and_resume_skips_finished_trials(tmp_path):
    results = tmp_path / "results.jsonl"
    append_result(results, TrialResult("t1", "nop", "no-skill", 0, 0.0, {"bug": 0.0}))
    append_result(results, TrialResult("t1", "nop", "no-skill", 1, 0.0, {"bug": 0.0}))
    with results.open("a") as out:
        out.write('{"task": "t1", "agent"')  # a run interrupted mid-write
    assert finished_trials(results) == {("t1", "nop", "no-skill", 0), ("t1", "nop", "no-skill", 1)}
    assert len(load_local(results)) == 2  # the report skips the half-written line too
