"""How long a trial's environment digest takes, before and after the agent runs.

The local runner digests every Python environment a trial depends on (the agent's, the
verifier's and the standard library: task_harness/runner.py python_environments) twice per
watched trial. Measured here on this checkout's environments, best of 3, beside a walk that
builds a `pathlib.Path` per file (how the digest was written first), with the file count.

Last line: `trial_digest: scandir X s, pathlib Y s, ratio R, files N`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import time
from pathlib import Path

from task_harness.verifier.digest import environment_digest


def pathlib_walk(roots: list[Path]) -> int:
    """Stat every file through a Path, as the first version did; returns the file count."""
    count = 0
    digest = hashlib.sha256()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = Path(folder, name)
                if not path.is_symlink():
                    status = path.stat()
                    digest.update(f"{path}:{status.st_size}:{status.st_mtime_ns}".encode())
                count += 1
    return count


def best_of(runs: int, fn, *args) -> tuple[float, object]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        result = fn(*args)
        timings.append(time.perf_counter() - started)
    return min(timings), result


def main() -> None:
    roots = [Path(sys.prefix), Path(sysconfig.get_paths()["stdlib"])]
    fast, _ = best_of(3, environment_digest, roots)
    slow, files = best_of(3, pathlib_walk, roots)
    print(f"{'walk':<10}{'seconds':>10}")
    print(f"{'scandir':<10}{fast:>10.2f}")
    print(f"{'pathlib':<10}{slow:>10.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(
        f"trial_digest: scandir {fast:.2f} s, pathlib {slow:.2f} s, "
        f"ratio {slow / fast:.1f}, files {files}"
    )


if __name__ == "__main__":
    main()
