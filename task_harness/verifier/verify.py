"""The hidden verifier of a grpo-skill debug task: anti-cheat gate, one weighted check per bug, and
a short training run that must learn.

Runs after the agent, from the task's `tests/` folder, with no network:

    python verify.py WORKSPACE LOGS_DIR

Writes LOGS_DIR/reward.json (1.0 or 0.0 per bug and per decoy, "anti_cheat", "learning", and
"reward", the weighted total) and LOGS_DIR/reward.txt (the total, 4 decimals). Everything it needs
sits next to it: task.json (bugs, weights, protected files), the probes, `reference_impl`
(upstream semantics) and, for the reference family, `expected/` (the intended package).

The agent's code never runs in this process. It runs in children that see a fresh copy of the
workspace at /app and nothing of this folder: in the view of `jail.py` (as nobody, in their own
PID namespace, with the agent's own Python environment when the local runner names it in
$GRPO_TASK_AGENT_ENV), or, where namespaces are not allowed (a Harbor container), as nobody with
every process of that user killed afterwards. A child is started the way the training script is
(`sys.argv` is the script's name, the same environment, the workspace as working folder); nothing
in its arguments, environment, working folder or file names says it is being checked: it runs
`python <the training script's name>`, whose file in the child's fresh copy is a script made for
the job. That script puts the workspace after the standard library on `sys.path`, so no file of
the workspace stands in for a module it imports (anti-cheat also refuses one named like one). The
child only observes: it holds no rule, no expected value and no reference implementation (only
what builds the tiny model), and every input a judgement depends on is made in this process and
checked against what the child reports it used. It hands its observations back as plain JSON
(`plain.py`), checked before use.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

import jail  # noqa: E402  (shipped beside this file)
import plain  # noqa: E402
from digest import sha256, tree_digest  # noqa: E402

CHILD_TIMEOUT = 600
# Python start-up hooks: a workspace holding one is refused whatever it does.
STARTUP_HOOKS = ("sitecustomize.py", "usercustomize.py")
# The script the agent runs to train, per family (its name is what the children's sys.argv shows).
# A short training run is required where task.json has "learning" (see build.py): rlzero's
# toy-task runs, and each trl task's first logged dicts (symptom_problems).
TRAIN_SCRIPT = {"reference": "train.py", "trl": "train_grpo.py", "user": "train_grpo.py"}
LEARNING_TIMEOUT = 300
# The script a child runs in place of the training script: the support folder and the workspace
# (and the trl fork's source folder) go after the standard library and before site-packages, so
# that a workspace file named like a module of the standard library never replaces it; then the
# job (what to observe, its inputs) is run and its observations written to $TMPDIR/<out>.
JOB_SCRIPT = """\
import os, sys
_workspace = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if p not in ("", _workspace)]
_at = next((i for i, p in enumerate(sys.path) if p.endswith("-packages")), len(sys.path))
sys.path[_at:_at] = [{lib!r}] + [os.path.join(_workspace, p) for p in {folders!r}]
import json
import session
job = json.loads({job!r})
job["out"] = os.path.join(os.environ["TMPDIR"], job["out"])
session.main(job)
"""
# The folders of the workspace a child imports from, per family.
IMPORT_FOLDERS = {"reference": ["."], "trl": [".", "trl"], "user": ["."]}


def installed_package_dir(name: str) -> Path | None:
    """Where `import name` resolves without the workspace or tests/ on the path."""
    code = (
        "import importlib.util, sys; spec = importlib.util.find_spec(sys.argv[1]); "
        "print(spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else '')"
    )
    found = subprocess.run(
        [sys.executable, "-c", code, name], capture_output=True, text=True, cwd="/", timeout=120
    ).stdout.strip()
    return Path(found) if found else None


def anti_cheat(task: dict, workspace: Path) -> list[str]:
    """Protected files byte-identical, no Python start-up hook in the workspace, installed
    packages (TRL) untouched."""
    problems = []
    for relative, digest in task["protected"].items():
        path = workspace / relative
        if not path.is_file():
            problems.append(f"protected file {relative} was deleted")
        elif sha256(path) != digest:
            problems.append(f"protected file {relative} was modified")
    for path in sorted(workspace.rglob("*")):
        if path.name in STARTUP_HOOKS or path.suffix == ".pth":
            problems.append(f"{path.relative_to(workspace)} is a Python start-up hook")
    problems += shadowing_modules(task, workspace)
    for name, digest in task.get("installed", {}).items():
        location = installed_package_dir(name)
        if location is None:
            problems.append(f"installed package {name} is gone")
        elif tree_digest(location) != digest:
            problems.append(f"installed package {name} ({location}) was modified")
    return problems


def _module_name(path: Path) -> str | None:
    """The name `import` finds `path` under, in a folder on sys.path (None: not a module)."""
    if path.is_dir():
        return path.name if (path / "__init__.py").exists() else None
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def installed_modules() -> set[str]:
    """The top-level modules of the agent's Python environment (this one's where it is not named):
    the standard library's and its site-packages'."""
    names = set(sys.stdlib_module_names)
    agent_env = os.environ.get("GRPO_TASK_AGENT_ENV")
    roots = sorted(Path(agent_env).glob("lib/python*/site-packages")) if agent_env else []
    for root in roots or [Path(sysconfig.get_paths()["purelib"])]:
        for entry in root.iterdir() if root.is_dir() else ():
            if not entry.name.endswith((".dist-info", ".egg-info", ".pth")):
                names.add(_module_name(entry) or "")
    return names - {""}


def shadowing_modules(task: dict, workspace: Path) -> list[str]:
    """A module at the top of a workspace folder the code imports from, named like a module of
    the standard library or of the Python environment, is refused: it would stand in for it in
    the training script and could forge what the verifier reads. The task's own package (its
    trainer, or the trl fork) is the one such name allowed."""
    own = {task.get("package") or "", "trl" if task["family"] == "trl" else ""} - {""}
    taken = installed_modules() - own
    problems = []
    for folder in IMPORT_FOLDERS[task["family"]]:
        root = workspace / folder
        for entry in sorted(root.iterdir()) if root.is_dir() else ():
            name = _module_name(entry)
            if name in taken:
                problems.append(
                    f"{entry.relative_to(workspace)} would replace the installed module {name!r}"
                )
    return problems


class Children:
    """Runs the agent's code in children that cannot reach this process, its files or its logs.

    Each child gets a fresh copy of the workspace as it was when the agent finished."""

    def __init__(self, workspace: Path, scratch: Path, family: str):
        self.scratch = scratch
        self.family = family
        self.pristine = scratch / "pristine"
        shutil.copytree(workspace, self.pristine, symlinks=True)
        self.harbor_app = workspace  # without a view, children run in the workspace itself
        self.lib = scratch / "lib"
        self._stage_support()
        # The agent's environment when the runner names it, else this one if it is a venv (a
        # system Python, as in the Harbor image, is part of the view's /usr).
        agent_env = os.environ.get("GRPO_TASK_AGENT_ENV")
        own_venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
        self.python_env = Path(agent_env) if agent_env else own_venv
        self.jailed = jail.available()
        self.as_nobody = not self.jailed and os.geteuid() == 0 and bool(shutil.which("setpriv"))
        if self.as_nobody:  # nobody may enter the scratch folder, never read tests/ (the oracle)
            scratch.chmod(0o755)
            TESTS_DIR.chmod(0o700)

    def _stage_support(self) -> None:
        """The observing code and what it imports, under neutral names, in a folder of its own:
        no judge and no expected value. The trl probes get the tiny model's builder and the TRL
        driver (`reference_impl/trl_driver.py`, what grpo-check's trl kind drives GRPOTrainer
        with)."""
        self.lib.mkdir()
        if self.family == "user":
            return self._stage_user_support()
        probes = "rlzero_probes.py" if self.family == "reference" else "trl_probes.py"
        shutil.copy(TESTS_DIR / probes, self.lib / "session.py")
        shutil.copy(TESTS_DIR / "plain.py", self.lib / "plain.py")
        if probes == "trl_probes.py":
            (self.lib / "reference_impl").mkdir()
            (self.lib / "reference_impl" / "__init__.py").write_text(
                '"""The tiny model and the TRL driver."""\n'
            )
            for module in ("tiny.py", "trl_driver.py"):
                shutil.copy(TESTS_DIR / "reference_impl" / module, self.lib / "reference_impl")

    def _stage_user_support(self) -> None:
        """The user family's children: the observing code, grpo-check's subclass driver, the
        tiny model's builder and the TRL release the task pins, which they import in place of
        any TRL of the workspace's environment (the support folder comes first on sys.path)."""
        shutil.copy(TESTS_DIR / "user_probes.py", self.lib / "session.py")
        shutil.copy(TESTS_DIR / "plain.py", self.lib / "plain.py")
        shutil.copytree(TESTS_DIR / "driver" / "checker", self.lib / "checker")
        (self.lib / "reference_impl").mkdir()
        (self.lib / "reference_impl" / "__init__.py").write_text(
            '"""The tiny model, the TRL driver and its release table."""\n'
        )
        for module in ("tiny.py", "protocol.py", "trl_driver.py", "trl_semantics.py"):
            shutil.copy(TESTS_DIR / "reference_impl" / module, self.lib / "reference_impl")
        for entry in (TESTS_DIR / "release").iterdir():
            shutil.copytree(entry, self.lib / entry.name)

    def observe_intended(self, job: dict, intended: Path) -> tuple[dict | None, str]:
        """Run `job` on the task's intended code (`intended`, ours, not the agent's), in a
        process of the verifier's own environment with the same support folder."""
        base = self.scratch / "intended"
        shutil.copytree(intended, base / "app")
        (base / "tmp").mkdir()
        name = "intended.json"
        script = JOB_SCRIPT.format(
            lib=str(self.lib),
            folders=IMPORT_FOLDERS[self.family],
            job=json.dumps(dict(job, out=name)),
        )
        (base / "app" / TRAIN_SCRIPT[self.family]).write_text(script)
        env = dict(jail.BASE_ENV, HOME=str(base / "tmp"), TMPDIR=str(base / "tmp"))
        env["PATH"] = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        done = subprocess.run(
            [sys.executable, TRAIN_SCRIPT[self.family]],
            cwd=base / "app",
            env=env,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
        if done.returncode != 0:
            return None, f"the intended code did not run: {done.stderr.strip()[-300:]}"
        return plain.load(base / "tmp" / name), ""

    def _fresh(self) -> tuple[Path, Path, Path]:
        """A new run folder (the workspace as the agent left it), home and temporary folder.

        Every child gets them at the same paths (the previous child's are removed first): the
        sources of a view's bind mounts show in its /proc/self/mountinfo, and a numbered folder
        would tell the probes (the first child) from the training run."""
        base = self.scratch / "run"
        shutil.rmtree(base, ignore_errors=True)
        home, tmp = base / "home", base / "tmp"
        run = base / "app" if self.jailed else self.harbor_app
        if not self.jailed:
            shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(self.pristine, run, symlinks=True)
        home.mkdir(parents=True)
        tmp.mkdir()
        if self.jailed or self.as_nobody:
            jail.prepare(run, home, tmp)
        return run, home, tmp

    def start(
        self, argv: list[str], script: str | None = None, **popen
    ) -> tuple[subprocess.Popen, Path]:
        """Start `argv` (its first word "python") as the agent would, with the training script's
        file replaced by `script` when given; (process, its tmp folder on this side)."""
        run, home, tmp = self._fresh()
        if script is not None:
            target = run / TRAIN_SCRIPT[self.family]
            target.unlink(missing_ok=True)
            target.write_text(script)
        if self.jailed:
            # The support folder only where the probes run: the training run's view is the
            # agent's own, so code that keys fixed behaviour on that mount trains with its bugs.
            support = (jail.Mount(self.lib, "/opt/lib"),) if script is not None else ()
            view = jail.view(run, home, tmp, self.python_env, support)
            env = dict(jail.BASE_ENV)
            python = "python" if self.python_env else sys.executable
            root = self.scratch / "view"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            command = jail.command([python, *argv[1:]], root, view, env)
            return subprocess.Popen(command, start_new_session=True, **popen), tmp
        env = dict(jail.BASE_ENV, HOME=str(home), TMPDIR=str(tmp))
        env["PATH"] = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        command = [sys.executable, *argv[1:]]
        if self.as_nobody:
            command = ["setpriv", f"--reuid={jail.UID}", f"--regid={jail.GID}", "--clear-groups"]
            command += ["--no-new-privs", sys.executable, *argv[1:]]
        process = subprocess.Popen(command, cwd=run, env=env, start_new_session=True, **popen)
        return process, tmp

    def lib_path(self) -> str:
        return "/opt/lib" if self.jailed else str(self.lib)

    def stop(self, process: subprocess.Popen) -> None:
        """Kill the child and everything it started."""
        _kill_group(process)
        process.wait()
        if self.as_nobody:  # a dedicated container: every process of nobody is the agent's
            for _ in range(3):
                for pid in _pids_of(jail.UID):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def observe(self, job: dict) -> tuple[dict | None, str]:
        """Run the probes of `job` on the agent's code; (observations, "") or (None, the cause)."""
        name = secrets.token_hex(8) + ".json"
        script = JOB_SCRIPT.format(
            lib=self.lib_path(),
            folders=IMPORT_FOLDERS[self.family],
            job=json.dumps(dict(job, out=name)),
        )
        process, tmp = self.start(
            ["python", TRAIN_SCRIPT[self.family]],
            script,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, stderr = process.communicate(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, f"the probes did not finish within {CHILD_TIMEOUT} s"
        finally:
            self.stop(process)
        out = tmp / name
        if process.returncode != 0 or not out.is_file() or out.is_symlink():
            tail = stderr.strip().splitlines()[-1:] or ["no output"]
            return None, f"the probes crashed (exit {process.returncode}): {tail[0][:300]}"
        try:
            return plain.load(out), ""
        except (OSError, plain.MalformedObservations) as error:
            return None, f"the trainer's observations are malformed: {error}"

    def train(self, rule: dict) -> tuple[list[dict[str, float]], str, bool]:
        """The per-step figures (reward, loss, KL) of the first steps of the training script, as
        it prints them; its last line; and whether it ended by itself, with status 0, before
        those steps (it reached its target sooner)."""
        process, _ = self.start(
            ["python", TRAIN_SCRIPT[self.family]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        steps: list[dict[str, float]] = []
        tail = ""
        # A script that hangs without printing is killed at the limit, which ends its output.
        watchdog = threading.Timer(LEARNING_TIMEOUT, _kill_group, [process])
        watchdog.start()
        try:
            for line in process.stdout:
                tail = line.strip() or tail
                steps += _step_figures(line)
                if len(steps) >= rule["steps"]:
                    break
            ended_early = len(steps) < rule["steps"] and process.wait(timeout=60) == 0
        except subprocess.TimeoutExpired:
            ended_early = False
        finally:
            watchdog.cancel()
            self.stop(process)
        return steps[: rule["steps"]], tail[:300], ended_early


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _pids_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


# A line of train.py's log: "step   3  reward 0.055  loss +0.0123  length 2.00  kl 0.0011".
STEP_LINE = re.compile(r"^step\s+\d+\s+reward\s+\S+")
# grad_norm too: a task may bound it (`[grpo.learning] max`), where a bug scales the gradient.
FIGURE = re.compile(r"\b(reward|loss|kl|grad_norm)\s+(\S+)")


def _step_figures(line: str) -> list[dict[str, float]]:
    """[{"reward": ..., "loss": ..., "kl": ...}] for a step line of the log (the figures it
    prints), [] for any other line."""
    # The training script's stderr is merged into its stdout: tqdm's progress bar, which ends in
    # no newline, comes first on the line of each logged dict.
    logged = line[line.find("{") :].strip() if "{" in line else ""
    if TRL_LOG_LINE.match(logged):
        return _trl_figures(logged)
    if not STEP_LINE.match(line.strip()):
        return []
    try:
        return [{name: float(value) for name, value in FIGURE.findall(line)}]
    except ValueError:
        return []


# A line of train_grpo.py's log: transformers' Trainer prints each logged dict (every 10 steps).
TRL_LOG_LINE = re.compile(r"^\{.*'loss'.*\}$")
# TRL's logged keys, under the names the gate uses (TRL 0.17 logs `clip_ratio`, later releases
# `clip_ratio/region_mean`).
TRL_FIGURES = {
    "reward": "reward",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "kl": "kl",
    "clip_ratio": "clip_ratio",
    "clip_ratio/region_mean": "clip_ratio",
}


# Each reward function's logged mean: `rewards/<name>/mean` (TRL 0.17 on), `rewards/<name>` (up
# to 0.16); the gate reads it as `rewards/<name>`.
TRL_REWARD_MEAN = re.compile(r"^rewards/([^/]+)(?:/mean)?$")


def _trl_figures(line: str) -> list[dict[str, float]]:
    """The gate's figures of one logged dict of TRL's Trainer; [] for the final summary
    (`train_runtime`) and for anything that is not a plain dict of numbers."""
    if len(line) > 20_000:  # the trainer's output is untrusted: no huge literal is parsed
        return []
    try:
        logged = ast.literal_eval(line)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return []
    if not isinstance(logged, dict) or "train_runtime" in logged:
        return []
    # Every number under TRL's own key (transformers 5 prints them as strings of 4 significant
    # digits), then under the gate's names.
    figures = {key: _number(value) for key, value in logged.items() if isinstance(key, str)}
    figures = {key: value for key, value in figures.items() if value is not None}
    figures |= {ours: figures[key] for key, ours in TRL_FIGURES.items() if key in figures}
    for key, value in list(figures.items()):
        match = TRL_REWARD_MEAN.match(key)
        if match:
            figures[f"rewards/{match[1]}"] = value
    return [figures]


def _number(value) -> float | None:
    """A logged figure as a float (None: not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def symptom_problems(steps: list[dict[str, float]], rule: dict) -> list[str]:
    """The instruction's symptoms still in the watched log lines (task.json "learning", each
    measured on the fixed and the buggy trainer and recorded in the task's spec): a figure of
    `nonzero` exactly 0 on every line (a run that learns nothing: blank rewards, no gradient, a
    second pass that clips nothing), a logged reward above `max_reward` (the sum of the
    reward weights, which no weighted reward in [0, 1] per function can exceed), or a logged
    reward other than the `weighted_reward` sum (weight x logged mean of each function)."""
    problems = []
    for figure in rule.get("nonzero", ()):
        # `nonzero_from`: the lines before it are not watched for this rule (a figure that is
        # 0 only once the symptom has set in, e.g. a KL after the first reference sync)
        values = [step.get(figure) for step in steps[rule.get("nonzero_from", 0) :]]
        if None in values:
            problems.append(f"{figure} not logged on every line watched: {values}")
        elif all(v == 0.0 for v in values):
            problems.append(f"{figure} is exactly 0 on every line watched: the symptom remains")
    if "max_reward" in rule:
        rewards = [step.get("reward", float("nan")) for step in steps]
        if not all(r <= rule["max_reward"] + 1e-6 for r in rewards):
            problems.append(
                f"logged reward {max(rewards, key=lambda r: r if r == r else float('inf')):.3f} "
                f"above {rule['max_reward']}, the sum of the reward weights: {rewards}"
            )
    if "weighted_reward" in rule:
        problems += _weighting_problems(steps, rule["weighted_reward"])
    return problems


# How far a logged reward may be from its weighted sum, relative to the figures: TRL logs means of
# float32 `.item()`s (rounding below 1e-6), and transformers 5 prints each logged float to 4
# significant digits (`f"{v:.4g}"`, trainer_callback.py), off by at most 5e-4 of its value.
WEIGHTED_REWARD_TOLERANCE = 1e-3


def _weighting_problems(steps: list[dict[str, float]], weights: dict[str, float]) -> list[str]:
    """Where TRL logs the mean of the rewards the advantages are computed from (`reward`) and
    each function's mean reward (`rewards/<name>`), the first is the sum of the second weighted
    by the configured reward weights, on every line (`weights`: {function name: weight}; exact
    where no reward function returns None). A reward combined with other weights, or none,
    breaks it."""
    for number, step in enumerate(steps, 1):
        means = [step.get(f"rewards/{name}") for name in weights]
        if "reward" not in step or None in means:
            return [f"log line {number} lacks `reward` or a function's mean reward ({weights})"]
        terms = [w * m for w, m in zip(weights.values(), means, strict=True)]
        combined = sum(terms)
        scale = abs(step["reward"]) + sum(abs(t) for t in terms)
        if not abs(step["reward"] - combined) <= WEIGHTED_REWARD_TOLERANCE * scale + 1e-6:
            return [
                f"log line {number}: reward {step['reward']:.4f}, but the reward weights {weights} "
                f"give {combined:.4f} from the functions' mean rewards "
                f"{dict(zip(weights, means, strict=True))}: the reward that trains is not "
                "weighted as configured"
            ]
    return []


# (figure, rule key, the window's mean must be: "at least" or "at most", what a miss means)
BOUNDS = (
    ("reward", "threshold", "at least", "it does not learn"),
    ("loss", "min_loss", "at least", "the loss sinks as no correct objective's does"),
    ("kl", "max_kl", "at most", "the policy drifts from the reference as no penalty allows"),
    ("kl", "min_kl", "at least", "the reference moves with the policy"),
)


def learning_problems(
    steps: list[dict[str, float]], rule: dict, tail: str, ended_early: bool = False
) -> list[str]:
    """Empty when the short training run behaves as the fixed trainer does: over its last
    `window` steps the mean reward reaches `threshold`, and, where the task sets them, the mean
    loss stays at least `min_loss`, the mean KL between `min_kl` and `max_kl`, and the mean of
    any logged figure within its `min` and `max` (task.json "learning", set from runs of the
    buggy and the fixed trainer). A run that reached its target and ended
    before `steps` is judged on the last `window` steps it printed."""
    if len(steps) < rule["steps"] and not (ended_early and len(steps) >= rule["window"]):
        return [
            f"the training script printed {len(steps)} step lines of the {rule['steps']} "
            f"watched (last line: {tail!r})"
        ]
    last = steps[-rule["window"] :]
    where = f"steps {len(steps) - rule['window'] + 1}-{len(steps)} of the training script"
    problems = symptom_problems(steps, rule)
    # (figure, bound, side, what a miss means): the named rules, then the `min` and `max` tables
    # ({logged figure: bound on its window mean}, e.g. a TRL key such as completions/mean_length)
    bounds = [(fig, rule[key], side, meaning) for fig, key, side, meaning in BOUNDS if key in rule]
    for table, side in (("min", "at least"), ("max", "at most")):
        bounds += [(fig, b, side, "the symptom remains") for fig, b in rule.get(table, {}).items()]
    for figure, bound, side, meaning in bounds:
        values = [step.get(figure, float("nan")) for step in last]
        if not all(v == v and abs(v) != float("inf") for v in values):
            problems.append(f"{figure} missing or not finite over {where}: {values}")
            continue
        mean = sum(values) / len(values)
        if (mean < bound) if side == "at least" else (mean > bound):
            problems.append(f"mean {figure} {mean:.3f} over {where}, not {side} {bound}: {meaning}")
    return problems


def _as_plain(observations: dict) -> dict:
    """Observations as they would arrive from a child (tuples as lists, half floats widened)."""
    return {name: plain.decode(plain.encode(value)) for name, value in observations.items()}


def _decoy_problems(task: dict, seen: dict, intended: dict) -> dict[str, list[str]]:
    """Each decoy's probes must give the intended result exactly (no upstream alternative)."""
    from judge import describe, same

    return {
        decoy["id"]: [
            f"{name}: intended {describe(intended[name])}, got {describe(seen.get(name))}"
            for name in decoy["probes"]
            if not same(seen.get(name), intended[name])
        ]
        for decoy in task["decoys"]
    }


def _import_intended_rlzero() -> None:
    """`import rlzero` in this process gives the intended rlzero (`expected/`), run on one
    thread as the child runs the agent's (rlzero_probes.main): the loop probes' AdamW steps
    amplify a matmul's summation order, so a thread count of its own moves their parameters by
    more than the judge's tolerance (on a machine of two cores, every oracle failed
    `kl.accumulated`)."""
    import torch

    torch.set_num_threads(1)
    expected = str(TESTS_DIR / "expected")
    if expected not in sys.path:
        sys.path.insert(0, expected)


def intended_inputs() -> dict:
    """The inputs the probes take, made here by the intended rlzero (`expected/`): the loop
    probes' rollout as the stages before the update make it (rlzero_probes.loop_inputs). Both
    sides get them, so a bug left in an earlier stage of the agent's rollout does not reach the
    probes of a later stage it fixed; the child only uses them, it judges nothing."""
    import rlzero_probes

    _import_intended_rlzero()
    return _as_plain({"loop": rlzero_probes.loop_inputs()})


def intended_observations(checks: list[str], named: list[str], inputs: dict | None = None) -> dict:
    """The probes of `checks` and `named` on the intended rlzero (`expected/`), run here, with
    `inputs` (intended_inputs).

    The local runner names a cache folder of its own ($GRPO_TASK_CACHE, outside every view, so
    no agent code can write there) where the result is kept under a digest of everything it
    depends on: `expected/`, the probes, the job and the torch and transformers releases. A
    `tasks verify` then computes it once for its oracle, nop and baseline trials, not five times.
    Without the variable (Harbor) it is computed every time."""
    import rlzero_probes

    _import_intended_rlzero()
    cache = os.environ.get("GRPO_TASK_CACHE")
    if not cache:
        return _as_plain(rlzero_probes.observe(checks, named, inputs))
    import torch
    import transformers

    key = hashlib.sha256(
        json.dumps(
            [
                tree_digest(TESTS_DIR / "expected", "*"),
                sha256(TESTS_DIR / "rlzero_probes.py"),
                sha256(TESTS_DIR / "plain.py"),
                torch.__version__,
                transformers.__version__,
                torch.get_num_threads(),  # 1 (_import_intended_rlzero); earlier caches had more
                checks,
                named,
            ]
        ).encode()
    ).hexdigest()[:32]
    path = Path(cache) / f"rlzero-intended-{key}.json"
    if path.is_file():
        return plain.load(path)
    intended = _as_plain(rlzero_probes.observe(checks, named, inputs))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    plain.dump(intended, partial)
    os.replace(partial, path)  # concurrent verifiers of one task each write it whole
    return intended


def check_independent(task: dict, children: Children) -> dict[str, list[str]]:
    """Every probe of a bug's stage, and every probe a decoy names, must give what the task's
    own trainer without its bugs (`expected/`) gives: its conventions are the intended ones, so
    neither TRL's nor reference_impl's behaviour stands in for them."""
    import rlzero_probes
    from judge import difference, same

    checks = sorted({bug["stage"] for bug in task["bugs"]})
    named = sorted({name for decoy in task["decoys"] for name in decoy["probes"]})
    inputs = intended_inputs()
    job = {"stages": checks, "probes": named, "inputs": plain.encode(inputs)}
    seen, cause = children.observe(job)
    if seen is None:
        return {stage: [cause] for stage in checks} | {d["id"]: [cause] for d in task["decoys"]}
    intended = intended_observations(checks, named, inputs)
    problems: dict[str, list[str]] = {stage: [] for stage in checks}
    for name, expected in intended.items():
        stage = rlzero_probes.PROBES[name][0]
        got = seen.get(name, {"error": "not observed"})
        if stage in problems and not same(got, expected):
            problems[stage].append(f"{name}: {difference(expected, got)}")
    return problems | _decoy_problems(task, seen, intended)


def check_trl(task: dict, children: Children) -> dict[str, list[str]]:
    """Each stage's observations of the workspace's GRPOTrainer, judged against reference_impl
    from the inputs this process gave it."""
    import trl_judge

    checks = sorted({bug["stage"] for bug in task["bugs"]})
    # The fork's release and intended customisations (build.py); absent: TRL 1.16's.
    conventions = task.get("conventions") or {}
    # A bug with `probes` is judged by those rules (the fork's intended semantics of its stage)
    # instead of its stage's check; the child observes what every rule reads.
    judged_by = {bug["stage"]: bug.get("probes") or [bug["stage"]] for bug in task["bugs"]}
    rules = sorted({rule for b in task["bugs"] + task["decoys"] for rule in b["probes"]})
    seen, cause = children.observe(trl_judge.make_job(checks, rules, conventions))
    if seen is None:
        return {stage: [cause] for stage in checks} | {d["id"]: [cause] for d in task["decoys"]}
    problems = {
        stage: [p for rule in judged_by[stage] for p in trl_judge.judge(seen, rule, conventions)]
        for stage in checks
    }
    for decoy in task["decoys"]:
        problems[decoy["id"]] = [
            p for rule in decoy["probes"] for p in trl_judge.judge(seen, rule, conventions)
        ]
    return problems


def check_user(task: dict, children: Children) -> dict[str, list[str]]:
    """Each bug's stage, driven through grpo-check's subclass driver on the workspace's trainer
    and on the task's intended one (`expected/`) with the same inputs, drawn here: the user's
    conventions are the intended ones, so neither TRL's defaults nor stock GRPOTrainer pass."""
    import user_judge

    checks = sorted({bug["stage"] for bug in task["bugs"]})
    job = user_judge.make_job(checks, task["user"], secrets.randbits(31))
    seen, cause = children.observe(job)
    if seen is None:
        return {stage: [cause] for stage in checks}
    intended, cause = children.observe_intended(job, TESTS_DIR / "expected")
    if intended is None:
        raise RuntimeError(cause)
    return user_judge.judge(job, seen, intended)


def _weigh(task: dict, problems: dict[str, list[str]], cheating: bool, log: list[str]):
    """{bug or decoy id: 1.0 or 0.0} and the weighted total."""
    result: dict[str, float] = {}
    total = 0.0
    for bug in task["bugs"]:
        found = problems.get(bug["stage"], ["not checked: anti-cheat failed"] if cheating else [])
        passed = not found and not cheating
        result[bug["id"]] = 1.0 if passed else 0.0
        total += bug["weight"] if passed else 0.0
        log.append(f"=== Bug {bug['id']} (stage {bug['stage']}, weight {bug['weight']}) ===")
        log += [f"FAIL: {p}" for p in found] or ["PASS"]
    for decoy in task["decoys"]:
        guarded = result.get(decoy["guards"], 0.0) == 1.0
        found = problems.get(decoy["id"], [])
        if not guarded:
            found = [f"the bug it guards ({decoy['guards']}) is not fixed"] + found
        passed = not found and not cheating
        result[decoy["id"]] = 1.0 if passed else 0.0
        total += decoy["weight"] if passed else 0.0
        log.append(f"=== Intended behaviour {decoy['id']} (weight {decoy['weight']}) ===")
        log += [f"FAIL: {p}" for p in found] or ["PASS"]
    return result, total


def score(task: dict, workspace: Path) -> tuple[dict[str, float], list[str]]:
    """reward.json's content and the log lines explaining it.

    A violated anti-cheat gate scores 0 whatever the probes say, so they are not run. When the
    probes find every bug fixed, the training script's first steps must also learn; if they do
    not, the probes were deceived (code that behaves differently when checked) or the fix is
    incomplete, and every bug scores 0."""
    log = ["=== Anti-cheat ==="]
    cheating = anti_cheat(task, workspace)
    log += [f"FAIL: {p}" for p in cheating] or [
        "PASS: protected files, start-up hooks and installed packages intact"
    ]
    if cheating:
        result, _ = _weigh(task, {}, True, log)
        return result | {"anti_cheat": 0.0, "learning": 0.0, "reward": 0.0}, log
    with tempfile.TemporaryDirectory() as scratch:
        trainer = task.get("trainer", "")
        children = Children(workspace, Path(scratch), task["family"])
        checker = {
            "rlzero": check_independent,
            "mygrpo": check_user,
        }.get(trainer, check_trl)
        problems = checker(task, children)
        result, total = _weigh(task, problems, False, log)
        learning: list[str] = ["not run: a bug is not fixed"]
        rule = task.get("learning")
        if rule is None:
            learning = []
            log.append("=== Learning: no short-run threshold measured for this task ===")
        elif all(result.values()):
            steps, tail, ended_early = children.train(rule)
            learning = learning_problems(steps, rule, tail, ended_early)
            log.append("=== Learning: the first steps of the training script ===")
            bounded = [*rule.get("min", {}), *rule.get("max", {})]
            # each figure once, a bounded one among the usual ones included
            for figure in dict.fromkeys(
                ("reward", "loss", "kl", "grad_norm", "clip_ratio", *bounded)
            ):
                if any(figure in step for step in steps):
                    log.append(
                        f"{figure}: {[round(s.get(figure, float('nan')), 3) for s in steps]}"
                    )
            log += [f"FAIL: {p}" for p in learning] or ["PASS"]
            if learning:
                result = dict.fromkeys(result, 0.0)
                total = 0.0
        else:
            log.append("=== Learning: not run, since a bug above is not fixed (scored 0) ===")
    result |= {"anti_cheat": 1.0, "learning": 0.0 if learning else 1.0}
    return result | {"reward": round(total, 4)}, log


def main() -> int:
    workspace, logs = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    task = json.loads((TESTS_DIR / "task.json").read_text())
    logs.mkdir(parents=True, exist_ok=True)
    try:
        result, log = score(task, workspace)
    except Exception as error:  # a verifier that cannot judge scores 0, never crashes silently
        keys = [b["id"] for b in task["bugs"]] + [d["id"] for d in task["decoys"]]
        result = dict.fromkeys(keys, 0.0) | {"anti_cheat": 0.0, "learning": 0.0, "reward": 0.0}
        log = [f"ERROR: the verifier could not run: {type(error).__name__}: {error}"]
    print("\n".join(log))
    print(f"reward = {result['reward']:.4f}")
    (logs / "reward.json").write_text(json.dumps(result, indent=2))
    (logs / "reward.txt").write_text(f"{result['reward']:.4f}\n")
    return 0


if __name__ == "__main__":
    if importlib.util.find_spec("torch") is None:
        raise SystemExit("the verifier needs torch")
    sys.exit(main())
