"""The local runner: one trial = a fresh workspace, the agent, then the hidden verifier.

No Docker here, so a trial is a temporary folder holding only what the agent may see (the task's
`environment/workspace`, plus the grpo skill for the `--skill` condition). The agent runs there in
its own session with a timeout; at the limit its whole process group is killed. `tests/` and
`solution/` are copied in only after the agent has finished, next to (not inside) the workspace.
Each result is appended to `results.jsonl` as soon as the trial ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from task_harness.installed import guarded_trees
from task_harness.verifier.digest import tree_digest

BUILTIN_AGENTS = ("oracle", "nop")
VERIFIER_TIMEOUT = 900


@dataclass
class TrialResult:
    task: str
    agent: str
    condition: str  # "skill" or "no-skill"
    trial: int
    reward: float
    bugs: dict[str, float] = field(default_factory=dict)
    status: str = "ok"  # ok, timeout, agent-error, verifier-error, tampered
    seconds: float = 0.0
    detail: str = ""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.task, self.agent, self.condition, self.trial)


def guarded_digests(trees: dict[str, Path]) -> dict[str, str]:
    """A digest of each of the project's code trees that a trial must not change."""
    return {name: tree_digest(folder, "*") for name, folder in trees.items() if folder.exists()}


def run_agent(command: str, workspace: Path, instruction: Path, timeout: float) -> tuple[str, str]:
    """Run a shell command template in `workspace`; ("ok" | "timeout" | "agent-error", detail).

    The command gets its own session, so that at the time limit the whole process tree (the agent
    and anything it started) is killed with one signal to the group.
    """
    rendered = command.format(
        instruction=shlex.quote(str(instruction)), workspace=shlex.quote(str(workspace))
    )
    log = workspace.parent / "agent.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            rendered,
            shell=True,
            cwd=workspace,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return "timeout", f"killed after {timeout:.0f} s"
    _kill_group(process)  # anything the agent left running in the background
    return ("ok", "") if code == 0 else ("agent-error", f"agent exited with status {code}")


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def install_skill_into(workspace: Path) -> None:
    """The --skill condition: the grpo skill in the workspace's agent skill folders."""
    from skill_installer import install_skill

    install_skill(workspace)


def run_trial(
    built: Path,
    agent: str,
    *,
    skill: bool = False,
    trial: int = 0,
    timeout: float = 1800,
    keep: Path | None = None,
    guarded: dict[str, Path] | None = None,
) -> TrialResult:
    """One trial of the built task folder `built` (Harbor layout) with `agent`.

    `guarded` maps names to the project code trees the agent must leave alone (default: the
    checker, reference_impl, the skill installer, the harness and the skill as installed here;
    tests point it elsewhere)."""
    task_id = built.name
    condition = "skill" if skill else "no-skill"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"grpo-trial-{task_id}-") as scratch:
        root = Path(scratch)
        workspace = root / "workspace"
        shutil.copytree(built / "environment" / "workspace", workspace)
        instruction = root / "instruction.md"
        shutil.copy(built / "instruction.md", instruction)
        if skill:
            install_skill_into(workspace)
        # Only an outside agent is watched: oracle and nop are ours, and guarding them would turn
        # a colleague's edit of checker/ during a long verify into a false "tampered".
        watched = agent not in BUILTIN_AGENTS
        guarded = guarded_trees() if guarded is None else guarded
        before = guarded_digests(guarded) if watched else {}
        env_vars = {"GRPO_TASK_WORKSPACE": str(workspace), "GRPO_TASK_PYTHON": sys.executable}

        status, detail = "ok", ""
        if agent == "oracle":
            shutil.copytree(built / "solution", root / "solution")
            done = subprocess.run(
                ["bash", str(root / "solution" / "solve.sh")],
                env=os.environ | env_vars,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                status, detail = "agent-error", done.stderr.strip()[-300:]
        elif agent != "nop":
            status, detail = run_agent(agent, workspace, instruction, timeout)

        if watched and guarded_digests(guarded) != before:
            return _finish(
                TrialResult(task_id, agent, condition, trial, 0.0, status="tampered"),
                started,
                "the agent changed the project's own code (checker, reference_impl, skill, harness)",
            )
        # Only now does the verifier appear, outside the workspace.
        shutil.copytree(built / "tests", root / "tests")
        logs = root / "logs"
        done = subprocess.run(
            ["bash", str(root / "tests" / "test.sh")],
            env=os.environ | env_vars | {"GRPO_TASK_LOGS": str(logs)},
            capture_output=True,
            text=True,
            timeout=VERIFIER_TIMEOUT,
        )
        result = _read_reward(logs, task_id, agent, condition, trial, status, detail, done)
        if keep is not None:
            target = keep / f"{task_id}--{agent_slug(agent)}--{condition}--{trial}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(root, target, symlinks=True)
        return _finish(result, started)


def _read_reward(logs, task_id, agent, condition, trial, status, detail, done) -> TrialResult:
    try:
        scores = json.loads((logs / "reward.json").read_text())
        reward = float(scores.pop("reward"))
    except (OSError, ValueError, KeyError):
        tail = (done.stderr or done.stdout).strip()[-300:]
        return TrialResult(
            task_id, agent, condition, trial, 0.0, status="verifier-error", detail=tail
        )
    if status != "ok":  # a crash or time-out is recorded as such, with reward 0
        return TrialResult(task_id, agent, condition, trial, 0.0, scores, status, detail=detail)
    return TrialResult(task_id, agent, condition, trial, reward, scores, detail=done.stdout[-2000:])


def _finish(result: TrialResult, started: float, detail: str = "") -> TrialResult:
    result.seconds = round(time.perf_counter() - started, 1)
    if detail:
        result.detail = detail
    return result


def agent_slug(agent: str) -> str:
    return agent if agent in BUILTIN_AGENTS else "cmd-" + agent.split()[0].rsplit("/", 1)[-1]


def finished_trials(results: Path) -> set[tuple]:
    """Keys of the trials already in `results` (for --resume); unreadable lines are skipped."""
    done = set()
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                row = json.loads(line)
                done.add((row["task"], row["agent"], row["condition"], row["trial"]))
            except (ValueError, KeyError):
                continue
    return done


def append_result(results: Path, result: TrialResult) -> None:
    """One JSON line per trial, flushed at once: an interruption loses nothing already written."""
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("a") as out:
        out.write(json.dumps(asdict(result)) + "\n")
        out.flush()
        os.fsync(out.fileno())
