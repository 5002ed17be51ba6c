"""A view of the machine that code under test cannot leave: util-linux `unshare`, `chroot`, `setpriv`.

The command runs in new mount, PID and network namespaces, inside a root made of a few bind mounts
(the system's `/usr` and `/etc` and a Python environment, read-only; the workspace, a home and a
temporary folder, writable), as the unprivileged user `nobody` with no way to regain privileges.
It sees no other file of the machine, no other process, and no network but a loopback of its own:
two views never reach each other, nor the host's services (`network=False` keeps the host's
network, for an agent that must call its model's API: weaker, since the host's loopback is
shared). It cannot outlive its run: the namespace's first process is a holder that stays root
and keeps `unshare`'s parent-death signal (the user change of `setpriv` would clear it), and runs
the command as its child; when the command exits, or the `unshare` holding the view is killed,
the holder dies and the kernel kills every process left in the namespace, daemons included (a
double fork or `setsid` does not leave a PID namespace).

Why these tools: they ship with util-linux and coreutils on every Debian or Ubuntu machine
(nothing to install), they are what bubblewrap and firejail build on, and run as root they need no
user namespaces. Used by the local runner for the agent and by `verify.py` for the children that
run the agent's code, with the same view, so the code cannot tell training from verification.

Shipped in each task's `tests/` beside `verify.py`; imports nothing from the project.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

UID = GID = 65534  # nobody / nogroup
WORKSPACE = "/app"  # where the workspace appears, as in the Harbor image
HOME = "/home/agent"
PYTHON_ENV = "/opt/venv"  # the agent's Python environment, read-only
TOOLS = ("unshare", "chroot", "setpriv", "mount")
SYSTEM = ("/usr", "/etc")
DEVICES = ("null", "zero", "random", "urandom", "full", "tty")
BASE_ENV = {
    "PATH": f"{PYTHON_ENV}/bin:/usr/local/bin:/usr/bin:/bin",
    "HOME": HOME,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    # TRL's Trainer writes each logged dict with tqdm.write, which does not flush: through a pipe
    # the verifier's training gate would see none of them for 70 steps. The agent's runs and the
    # verifier's children share this environment, so it tells nothing about being checked.
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    writable: bool = False


def available() -> bool:
    """True when this process may build views (root, the tools present, namespaces allowed)."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in TOOLS):
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--pid", "--net", "--fork", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def base_python_prefix(python_env: Path) -> Path:
    """The installation a venv's interpreter links to (read from its pyvenv.cfg)."""
    for line in (python_env / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent
    return Path(sys.base_prefix)


def view(
    workspace: Path, home: Path, tmp: Path, python_env: Path | None, extra: tuple[Mount, ...] = ()
) -> list[Mount]:
    """The mounts of the view: the system read-only, the Python environment (a venv, shown at
    /opt/venv, and the interpreter it links to) read-only, the workspace, home and /tmp writable."""
    mounts = [Mount(Path(folder), folder) for folder in SYSTEM]
    if python_env is not None:
        base = base_python_prefix(python_env)
        if not str(base).startswith(SYSTEM):
            mounts.append(Mount(base, str(base)))
        mounts.append(Mount(python_env, PYTHON_ENV))
    mounts += [
        Mount(workspace, WORKSPACE, writable=True),
        Mount(home, HOME, writable=True),
        Mount(tmp, "/tmp", writable=True),
    ]
    return mounts + list(extra)


def prepare(*folders: Path) -> None:
    """Give the view's writable folders to its user (the agent cannot write root's files)."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for path in [folder, *folder.rglob("*")]:
            os.lchown(path, UID, GID)


def _setup_script(root: Path, mounts: list[Mount]) -> str:
    q = shlex.quote
    lines = [
        "set -e",
        f"R={q(str(root))}",
        'mount -t tmpfs -o mode=755 view "$R"',
        'for link in bin lib lib64 sbin; do ln -s "usr/$link" "$R/$link"; done',
    ]
    for mount in mounts:
        target = f'"$R"{q(mount.target)}'
        make = "touch" if mount.source.is_file() else "mkdir -p"
        if mount.source.is_file():
            lines.append(f'mkdir -p "$(dirname {target})"')
        options = "bind" if mount.writable else "bind,ro"
        lines += [f"{make} {target}", f"mount -o {options} {q(str(mount.source))} {target}"]
    lines += [
        'mkdir -p "$R/proc" "$R/dev/shm"',
        'mount -t proc proc "$R/proc"',
        'mount -t tmpfs -o mode=1777 shm "$R/dev/shm"',
        f'for d in {" ".join(DEVICES)}; do [ -e "/dev/$d" ] || continue; '
        'touch "$R/dev/$d"; mount -o bind "/dev/$d" "$R/dev/$d"; done',
        'mount -o remount,bind,ro "$R"',
        # a new network namespace has only a loopback, down, that the host never sees; iproute2
        # brings it up where installed (without it the view has no network at all)
        "if command -v ip > /dev/null; then ip link set lo up; fi",
    ]
    return "\n".join(lines)


def command(
    argv: list[str],
    root: Path,
    mounts: list[Mount],
    env: dict[str, str],
    cwd: str = WORKSPACE,
    network: bool = False,
) -> list[str]:
    """The command line that runs `argv` in the view made of `mounts` (on the empty folder `root`)
    with exactly the environment `env`, as nobody, from `cwd`; with a private network (loopback
    only) unless `network` asks for the host's."""
    variables = [f"{k}={v}" for k, v in env.items()]
    # The holder (this shell, the namespace's PID 1, root) runs the command as its child, with
    # its standard input (an asynchronous command's would be /dev/null), and exits with it.
    enter = (
        "exec 3<&0\n"
        f'chroot "$R" setpriv --reuid={UID} --regid={GID} --clear-groups '
        f"--no-new-privs --inh-caps=-all --bounding-set=-all env -i {' '.join(map(shlex.quote, variables))} "
        'sh -c \'cd "$0" && exec "$@"\' ' + shlex.quote(cwd) + ' "$@" <&3 3<&- &\n'
        "exec 3<&-\n"
        'wait "$!"'
    )
    script = _setup_script(root, mounts) + "\n" + enter
    namespaces = ["--mount", "--pid"] + ([] if network else ["--net"])
    return [
        "unshare",
        *namespaces,
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "view",
        *argv,
    ]
