"""Routes by which the code under judgement could fool the verifier or reach another trial, each
tried as an adversary would (payloads written here, never shipped): every one must score 0.

- a forger added to the trl fork (`trl/_x.py`, imported by `trl/__init__.py`) that rewrites the
  child's observations with whatever judge it can import there, and with degenerate inputs (equal
  rewards and zero advantages, an empty completion mask) that every rule agrees with;
- a standard-library module in the workspace (`/app/json.py`), which once replaced the child's own
  `import json`;
- a server on one trial's loopback, fetched from a trial run at the same time;
- a `setsid` daemon in a view whose `unshare` alone is killed;
- the child's command line and `sys.path`, which once said "probe".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from task_harness.build import build_task
from task_harness.runner import run_trial
from task_harness.spec import load_tasks
from task_harness.verifier import jail, verify

pytestmark = [
    pytest.mark.xdist_group("tasks-forgery"),
    pytest.mark.skipif(
        not jail.available(), reason="the runner's isolation needs root and unshare"
    ),
]

MARKER = "grpo-forgery-daemon-5e1c"

# Rewrites the observations just before the child writes them: rows with what the judges it can
# import say (reference_impl's stage functions, as the child once held them), the rest with
# degenerate inputs that make any rule computed from the child's own report agree.
FORGER = """
import sys

def _forge(seen):
    import torch
    try:
        from reference_impl import strip_reasoning
    except ImportError:
        strip_reasoning = None
    session = sys.modules.get("session")
    texts = getattr(session, "DECODE_TEXTS", None)
    for name, value in list(seen.items()):
        if isinstance(value, tuple) and len(value) == 2:  # (rewards per function, advantages)
            rewards, advantages = value
            seen[name] = (torch.ones_like(rewards), torch.zeros_like(advantages))
        elif isinstance(value, dict) and "loss" in value and "grad" in value:
            value["advantages"] = torch.zeros_like(value["advantages"])
            value["loss"] = torch.zeros_like(value["loss"])
            value["grad"] = torch.zeros_like(value["grad"])
        elif name == "batch":
            value["completion_mask"] = torch.zeros_like(value["completion_mask"])
        elif name == "batch.entropies":
            seen[name] = torch.zeros_like(value)
        elif name == "decode.reward_inputs" and strip_reasoning and texts:
            seen[name] = [strip_reasoning(t) if "<think>" in t or "</think>" in t else t for t in texts]
    return seen

def _install():
    plain = sys.modules.get("plain")
    if plain is None or getattr(plain, "_forged", False):
        return
    encode, first = plain.encode, [True]

    def forged(value):  # the first call is the whole set; the rest are its parts
        if first[0]:
            first[0] = False
            value = _forge(value)
        return encode(value)

    plain.encode = forged
    plain._forged = True

_install()
"""

STDLIB_SHADOW = """
import importlib.util as _u, sys as _sys
_spec = _u.spec_from_file_location("_real_json", _sys.base_prefix + "/lib/python%d.%d/json/__init__.py" % _sys.version_info[:2])
_real = _u.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
"""

# The process holding an unshare's namespace, killed alone, must take the daemon with it.
# (the marker is assembled by the shell, so that only the daemon's command line holds it)
DAEMON = (
    f"M={MARKER[:8]}; setsid python3 -c 'import time; time.sleep(120)' \"${{M}}{MARKER[8:]}\" "
    "< /dev/null > /dev/null 2>&1 & sleep 60"
)


def survivors(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def trio(tmp_path_factory) -> tuple[Path, list[str]]:
    (spec,) = load_tasks(ids=["trl-skillsbench-trio"])
    built = build_task(spec, tmp_path_factory.mktemp("built-trio"))
    return built, [b.id for b in spec.bugs]


def test_a_forger_in_the_trl_package_scores_zero(trio):
    """The forger finds no judge in the child, and every input it could make degenerate is the
    verifier's own: each bug and decoy fails on what the forger changed."""
    built, ids = trio
    agent = (
        f"cat > /app/trl/trl/_x.py <<'EOF'\n{FORGER}EOF\n"
        "echo 'from . import _x  # noqa' >> /app/trl/trl/__init__.py"
    )
    result = run_trial(built, agent, timeout=300)
    assert result.status == "ok", result.detail
    assert result.reward == 0.0, result.detail
    assert all(result.bugs[i] == 0.0 for i in ids), result.detail
    assert "the reward functions returned" in result.detail
    assert "completion mask is empty" in result.detail


def test_a_standard_library_module_in_the_workspace_scores_zero(trio):
    built, ids = trio
    agent = f"cat > /app/json.py <<'EOF'\n{STDLIB_SHADOW}EOF\ntrue"
    result = run_trial(built, agent, timeout=120)
    assert result.bugs["anti_cheat"] == 0.0, result.detail
    assert result.reward == 0.0 and all(result.bugs[i] == 0.0 for i in ids)
    assert "json.py would replace the installed module 'json'" in result.detail


def test_the_child_starts_as_the_training_script_with_the_workspace_after_the_stdlib(tmp_path):
    """The child's command line is the training run's (`python train.py`), a workspace module
    named like a standard-library one is not what the child imports, and the child is not its
    namespace's PID 1 (the holder is)."""
    workspace = tmp_path / "workspace"
    (workspace / "rlzero").mkdir(parents=True)
    seen = (
        "import os, sys\n"
        "line = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "json = getattr(sys.modules.get('json'), '__file__', '')\n"
        "raise SystemExit('SEEN ' + repr([line, json, os.getpid()]))\n"
    )
    (workspace / "rlzero" / "__init__.py").write_text(seen)
    (workspace / "train.py").write_text("import rlzero\n")
    (workspace / "json.py").write_text("raise SystemExit('the workspace json.py was imported')\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    children = verify.Children(workspace, scratch, "reference")
    observed, cause = children.observe({"stages": ["masking"], "probes": []})
    assert observed is None
    probe_line, probe_json, probe_pid = eval(cause.split("SEEN ", 1)[1])  # noqa: S307 (our own repr)
    training, _ = children.start(
        ["python", "train.py"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = training.communicate(timeout=120)
    children.stop(training)
    train_line, _, _ = eval(err.strip().splitlines()[-1].split("SEEN ", 1)[1])  # noqa: S307
    assert probe_line == train_line == [b"python", b"train.py", b""]
    assert not probe_json.startswith("/app"), probe_json
    assert probe_pid != 1  # the namespace's holder is PID 1, out of the code's reach


def test_the_training_run_has_the_mount_table_of_the_probes_without_their_support(tmp_path):
    """Code that keys fixed behaviour on the verifier's mounts must train with its bugs: the
    training run's /proc/self/mountinfo (mount roots and points) is the probe child's without
    the support folder, so neither that folder nor a numbered run folder tells them apart."""
    workspace = tmp_path / "workspace"
    (workspace / "rlzero").mkdir(parents=True)
    (workspace / "rlzero" / "__init__.py").write_text(
        "import hashlib\n"
        "mounts = [line.split()[3:5] for line in open('/proc/self/mountinfo')]\n"
        "rest = repr([m for m in mounts if m[1] != '/opt/lib']).encode()\n"
        "lib = any(m[1] == '/opt/lib' for m in mounts)\n"
        "raise SystemExit('SEEN ' + repr((lib, hashlib.sha256(rest).hexdigest())))\n"
    )
    (workspace / "train.py").write_text("import rlzero\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    children = verify.Children(workspace, scratch, "reference")
    observed, cause = children.observe({"stages": ["masking"], "probes": []})
    assert observed is None
    probed = eval(cause.split("SEEN ", 1)[1])  # noqa: S307 (our own repr)
    training, _ = children.start(
        ["python", "train.py"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = training.communicate(timeout=120)
    children.stop(training)
    trained = eval(err.strip().splitlines()[-1].split("SEEN ", 1)[1])  # noqa: S307
    # (support folder mounted, digest of every other mount's root and point)
    assert probed[0] and not trained[0], (probed, trained)
    assert probed[1] == trained[1], (
        "the training run's mounts differ from the probes' beyond /opt/lib"
    )


def _view(tmp_path: Path, name: str, argv: list[str]) -> list[str]:
    base = tmp_path / name
    folders = [base / f for f in ("ws", "home", "tmp")]
    jail.prepare(*folders)
    (base / "view").mkdir()
    return jail.command(argv, base / "view", jail.view(*folders, None), dict(jail.BASE_ENV))


SERVE = (
    "import socket, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', {port})); s.listen(); print('listening', flush=True); time.sleep(30)\n"
)
REACH = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('reached')\n"
    "except OSError as error:\n"
    "    print('unreachable', type(error).__name__)\n"
)


def test_two_views_at_once_cannot_reach_each_other_or_the_host(tmp_path):
    """A server on one view's loopback, and one on the host's, are unreachable from a second view
    running at the same time; each view has its own loopback, which works."""
    port = 38000 + os.getpid() % 1000
    server = subprocess.Popen(
        _view(tmp_path, "a", ["python3", "-c", SERVE.format(port=port)]),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    host = subprocess.Popen(
        [sys.executable, "-c", SERVE.format(port=port + 1)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "listening"
        assert host.stdout.readline().strip() == "listening"
        probe = REACH.format(port=port) + REACH.format(port=port + 1)
        # its own server on the port the first view holds (taken, were the loopback shared)
        inside = SERVE.format(port=port).replace("time.sleep(30)", "") + probe
        done = subprocess.run(
            _view(tmp_path, "b", ["python3", "-c", inside]),
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = done.stdout.split()
        assert lines[0] == "listening", done.stderr  # its own loopback serves
        assert lines.count("reached") == 1, done.stdout  # its own server, nothing else
        assert lines.count("unreachable") == 1, done.stdout
        # --network host: the weaker option reaches the host's loopback
        base = tmp_path / "c"
        folders = [base / f for f in ("ws", "home", "tmp")]
        jail.prepare(*folders)
        (base / "view").mkdir()
        shared = jail.command(
            ["python3", "-c", REACH.format(port=port + 1)],
            base / "view",
            jail.view(*folders, None),
            dict(jail.BASE_ENV),
            network=True,
        )
        reached = subprocess.run(shared, capture_output=True, text=True, timeout=60)
        assert reached.stdout.split() == ["reached"], reached.stderr
    finally:
        for process in (server, host):
            process.kill()
            process.wait()


def test_two_trials_at_once_cannot_reach_each_other(tmp_path):
    """Two trials of a task run at the same time: the second one's agent cannot fetch what the
    first serves on its loopback (the collusion route between concurrent trials)."""
    (spec,) = load_tasks(ids=["rz-format-stop"])
    built = build_task(spec, tmp_path / "built")
    port = 39000 + os.getpid() % 1000
    serve = f'python -c "{SERVE.format(port=port)}" > /home/agent/served.txt'
    reach = (
        f"cat > /tmp/reach.py <<'EOF'\n{REACH.format(port=port)}EOF\n"
        "for i in 1 2 3 4 5 6; do python /tmp/reach.py; sleep 2; done > /home/agent/reach.txt"
    )
    kept = {name: tmp_path / name for name in ("served", "reached")}
    results = {}

    def trial(name: str, agent: str) -> None:
        try:
            results[name] = run_trial(built, agent, timeout=120, keep=kept[name])
        except Exception as error:  # reported below, not lost in the thread
            results[name] = error

    threads = [
        threading.Thread(target=trial, args=("served", serve)),
        threading.Thread(target=trial, args=("reached", "sleep 3; " + reach)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    (served,) = kept["served"].iterdir()
    (reached,) = kept["reached"].iterdir()
    assert "listening" in (served / "agent" / "home" / "served.txt").read_text()
    attempts = (reached / "agent" / "home" / "reach.txt").read_text().split("\n")
    assert attempts and all(a.startswith("unreachable") for a in attempts if a), attempts
    assert all(r.reward == 0.0 for r in results.values())


def test_killing_only_unshare_ends_a_setsid_daemon_in_the_view(tmp_path):
    """The namespace's holder keeps the parent-death signal that `setpriv` would clear: killing
    the `unshare` process alone ends the view and a daemon that left its session."""
    process = subprocess.Popen(
        _view(tmp_path, "d", ["sh", "-c", DAEMON]),
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not survivors(MARKER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors(MARKER), "the daemon never started"
    os.kill(process.pid, signal.SIGKILL)  # unshare alone, not its process group
    process.wait()
    deadline = time.monotonic() + 10
    while survivors(MARKER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors(MARKER) == []
