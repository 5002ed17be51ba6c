"""The local runner: one trial = a fresh workspace, the agent in a view of its own, then the verifier.

No Docker here, so the agent runs in the view of `verifier/jail.py` (util-linux namespaces, as the
unprivileged user nobody): it sees the task's workspace at /app, its own home and /tmp, the
system's /usr and /etc, and a read-only Python environment built for its condition
(`agent_env.py`: torch, transformers, TRL, datasets; grpo-skill and `grpo-check` only with
--skill). It sees no build folder, no repository, no task spec, no other trial, and none of the
runner's environment variables, and no network but a loopback of its own (network namespace), so
trials run at once cannot reach each other; `host_network` (`tasks run --network host`) gives it
the host's network instead, for an agent that calls its model's API from inside the view. When it
exits or reaches its time limit, its PID namespace ends and every process it started dies with
it. The verifier's files (`tests/`) are copied in only
after that, beside the workspace, and it runs in the runner's own Python environment, which the
agent never saw; both environments are digested before and after the agent.
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
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from task_harness.agent_env import agent_env, cache_dir
from task_harness.installed import guarded_trees
from task_harness.shortcuts import SHORTCUTS, ShortcutUnavailable, take
from task_harness.verifier import jail
from task_harness.verifier.digest import environment_digest, tree_digest

# Ours, run on the runner's side: the oracle fix, doing nothing, and the shortcut baselines.
BUILTIN_AGENTS = ("oracle", "nop", *SHORTCUTS)
VERIFIER_TIMEOUT = 900
# Where the instruction file, and the files an agent brings along, appear in the agent's view.
INSTRUCTION = f"{jail.HOME}/instruction.md"
AGENT_FILES = "/opt/agent"


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


class IsolationUnavailable(RuntimeError):
    """The machine cannot build the agent's view (not root, or namespaces not allowed)."""


def guarded_digests(trees: dict[str, Path]) -> dict[str, str]:
    """A digest of each of the project's code trees that a trial must not change."""
    return {name: tree_digest(folder, "*") for name, folder in trees.items() if folder.exists()}


def python_environments(agent_python: Path) -> list[Path]:
    """The Python environments a trial depends on: the agent's, the verifier's (this one) and
    the standard library both link to."""
    return [agent_python, Path(sys.prefix), Path(sysconfig.get_paths()["stdlib"])]


@dataclass(frozen=True)
class AgentView:
    """The agent's side of a trial: the folders its view is made of."""

    root: Path  # the trial's agent folder: workspace, home, tmp, view
    python_env: Path
    agent_files: Path | None = None  # the agent's own files, read-only at /opt/agent
    host_network: bool = False  # the host's network instead of a private loopback

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def command(self, rendered: str, pass_env: tuple[str, ...] = ()) -> list[str]:
        env = dict(jail.BASE_ENV)
        env |= {name: os.environ[name] for name in pass_env if name in os.environ}
        extra = () if self.agent_files is None else (jail.Mount(self.agent_files, AGENT_FILES),)
        mounts = jail.view(
            self.workspace, self.root / "home", self.root / "tmp", self.python_env, extra
        )
        return jail.command(
            ["sh", "-c", rendered], self.root / "view", mounts, env, network=self.host_network
        )


def run_agent(
    command: str, view: AgentView, timeout: float, pass_env: tuple[str, ...] = ()
) -> tuple[str, str]:
    """Run a shell command template in the agent's view; ("ok" | "timeout" | "agent-error", detail).

    `{workspace}` and `{instruction}` are the paths the agent sees. At the end (normal exit or time
    limit) the view's PID namespace ends, which kills everything the agent started."""
    # Only the two placeholders are replaced: other braces (`${VAR}`, JSON) are the command's own.
    rendered = command.replace("{instruction}", shlex.quote(INSTRUCTION)).replace(
        "{workspace}", shlex.quote(jail.WORKSPACE)
    )
    log = view.root / "agent.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            view.command(rendered, pass_env),
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
    _kill_group(process)
    return ("ok", "") if code == 0 else ("agent-error", f"agent exited with status {code}")


def _kill_group(process: subprocess.Popen) -> None:
    """Kill `unshare` and the namespace's first process; the kernel then kills the rest."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def install_skill_into(workspace: Path) -> None:
    """The --skill condition: the grpo skill in the workspace's agent skill folders."""
    from skill_installer import install_skill

    install_skill(workspace)


def prepare_view(
    root: Path,
    built: Path,
    skill: bool,
    python_env: Path,
    agent_files: Path | None,
    host_network: bool = False,
) -> AgentView:
    """The agent's folders: the workspace (with the skill for --skill), home with the
    instruction, tmp, and a copy of its own files."""
    if agent_files is not None:
        agent_files = readable_copy(agent_files, root / "agent-files")
    view = AgentView(root, python_env, agent_files, host_network)
    shutil.copytree(built / "environment" / "workspace", view.workspace)
    if skill:
        install_skill_into(view.workspace)
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    (root / "view").mkdir()
    shutil.copy(built / "instruction.md", root / "home" / "instruction.md")
    return view


def readable_copy(source: Path, target: Path) -> Path:
    """A copy of the agent's own files that the view's user can read (and run, where the owner
    could): the caller's folder may be private to root, as pytest's temporary folders are."""
    shutil.copytree(source, target, symlinks=True)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))
    return target


def run_trial(
    built: Path,
    agent: str,
    *,
    skill: bool = False,
    trial: int = 0,
    timeout: float = 1800,
    keep: Path | None = None,
    guarded: dict[str, Path] | None = None,
    pass_env: tuple[str, ...] = (),
    agent_files: Path | None = None,
    host_network: bool = False,
) -> TrialResult:
    """One trial of the built task folder `built` (Harbor layout) with `agent`.

    `guarded` maps names to the project code trees the agent must leave alone (default: the
    checker, reference_impl, the skill installer, the harness and the skill as installed here;
    tests point it elsewhere). `pass_env` names environment variables the agent gets (an API
    key); it gets no other of the runner's. `agent_files`, a folder of the agent's own (tools, a
    scripted agent's payload), is shown read-only at /opt/agent. `host_network` gives the agent
    the host's network in place of a loopback of its own (weaker: see `tasks run --network`)."""
    task_id = built.name
    condition = "skill" if skill else "no-skill"
    started = time.perf_counter()
    watched = agent not in BUILTIN_AGENTS
    if watched and not jail.available():
        raise IsolationUnavailable(
            "running an agent needs root and util-linux namespaces (unshare, setpriv) to isolate it"
        )
    task = json.loads((built / "tests" / "task.json").read_text())
    python_env = agent_env(condition, task["family"], task.get("fork_version"))
    # No task id in the folder's name: the view's mount table shows its host paths, and an id
    # such as "rz-accum-kl" names the bugs.
    with tempfile.TemporaryDirectory(prefix="grpo-trial-") as scratch:
        root = Path(scratch)
        view = prepare_view(root / "agent", built, skill, python_env, agent_files, host_network)
        workspace = view.workspace
        # Only an outside agent is watched: oracle and nop are ours, and guarding them would turn
        # a colleague's edit of checker/ during a long verify into a false "tampered".
        guarded = guarded_trees() if guarded is None else guarded
        environments = python_environments(python_env)
        before = (guarded_digests(guarded), environment_digest(environments)) if watched else None

        status, detail = "ok", ""
        if agent == "oracle":
            shutil.copytree(built / "solution", root / "solution")
            done = subprocess.run(
                ["bash", str(root / "solution" / "solve.sh")],
                env=os.environ | {"GRPO_TASK_WORKSPACE": str(workspace)},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                status, detail = "agent-error", done.stderr.strip()[-300:]
        elif agent in SHORTCUTS:
            try:
                take(agent, workspace, task)
            except ShortcutUnavailable as error:
                status, detail = "agent-error", str(error)
        elif agent != "nop":
            jail.prepare(workspace, root / "agent" / "home", root / "agent" / "tmp")
            status, detail = run_agent(agent, view, timeout, pass_env)

        if watched and (guarded_digests(guarded), environment_digest(environments)) != before:
            return _finish(
                TrialResult(task_id, agent, condition, trial, 0.0, status="tampered"),
                started,
                "the agent changed the project's code or a Python environment "
                "(checker, reference_impl, skill, harness, site-packages)",
            )
        # Only now does the verifier appear, outside the workspace.
        shutil.copytree(built / "tests", root / "tests")
        logs = root / "logs"
        env_vars = {
            "GRPO_TASK_WORKSPACE": str(workspace),
            "GRPO_TASK_PYTHON": sys.executable,
            "GRPO_TASK_LOGS": str(logs),
            "GRPO_TASK_AGENT_ENV": str(python_env),
            # Out of every view: the verifier keeps what it computes from its own files there.
            "GRPO_TASK_CACHE": str(cache_dir() / "verifier"),
        }
        done = subprocess.run(
            ["bash", str(root / "tests" / "test.sh")],
            env=os.environ | env_vars,
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
