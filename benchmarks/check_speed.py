"""How long a full grpo-check takes from a cold start, and how much of it is importing libraries.

Measures, each in a fresh process (as a user runs it):
- functions: `grpo-check reference_impl/__init__.py --json` (every check, 12 stages);
- trl: `grpo-check trl --json` (every check through TRL 1.16's GRPOTrainer code);
- trl 0.17: the same on the TRL 0.17.0 release (with transformers 4.57.6), the oldest supported;
- verl: `grpo-check verl --json` on verl 0.9.1's core_algos (imports Ray and tensordict);
- import: `import torch, transformers` plus the tiny model class, which each child pays once.
The TRL 0.17 and verl environments are the cached installs of tests/trl_releases.py (built from
the package registry on first use). Goals (issue): functions < 10 s, trl, trl 0.17 and verl
< 30 s on 2 cores. The machine load is printed too, because the figures scale with it.

Last line: `check_speed: functions X s, trl Y s, trl 0.17 Z s, verl V s, import W s`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")


def timed(command: list[str], env: dict[str, str] = ENV) -> tuple[float, str]:
    started = time.perf_counter()
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode not in (0, 1):
        sys.exit(f"check_speed: {' '.join(command)} exited {run.returncode}: {run.stderr[-300:]}")
    return seconds, run.stdout


def best_of(runs: int, command: list[str], env: dict[str, str] = ENV) -> tuple[float, str]:
    results = [timed(command, env) for _ in range(runs)]
    return min(results, key=lambda r: r[0])


def release_environments() -> dict[str, dict[str, str]]:
    """The cached TRL 0.17.0 and verl 0.9.1 environments (installed on first use)."""
    sys.path.insert(0, str(REPO / "tests"))
    from trl_releases import import_environment, verl_environment

    try:
        return {"trl 0.17": import_environment("0.17.0"), "verl": verl_environment()}
    except BaseException as error:  # noqa: BLE001 - pytest.skip when the registry is unreachable
        sys.exit(f"check_speed: cannot install TRL 0.17.0 or verl 0.9.1: {error}")


def main() -> None:
    runs = int(os.environ.get("CHECK_SPEED_RUNS", "2"))
    print(
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; best of {runs}"
    )
    import_s, _ = best_of(
        runs,
        [
            sys.executable,
            "-c",
            "import torch, transformers; from transformers import Qwen2ForCausalLM",
        ],
    )
    functions_s, out = best_of(runs, [GRPO_CHECK, "reference_impl/__init__.py", "--json"])
    functions = json.loads(out)["summary"]
    rows = [("functions", functions_s, 10, functions)]
    trl_s, out = best_of(runs, [GRPO_CHECK, "trl", "--json"])
    rows.append(("trl", trl_s, 30, json.loads(out)["summary"]))
    environments = release_environments()
    trl17_s, out = best_of(runs, [GRPO_CHECK, "trl", "--json"], environments["trl 0.17"])
    rows.append(("trl 0.17", trl17_s, 30, json.loads(out)["summary"]))
    verl_s, out = best_of(runs, [GRPO_CHECK, "verl", "--json"], environments["verl"])
    rows.append(("verl", verl_s, 30, json.loads(out)["summary"]))
    print(f"{'run':<12}{'seconds':>9}{'goal':>7}{'import share':>14}   summary")
    for name, seconds, goal, summary in rows:
        print(f"{name:<12}{seconds:>9.1f}{goal:>7}{import_s / seconds:>13.0%}   {summary}")
    print(f"{'import':<12}{import_s:>9.1f}       (torch + transformers, paid once per child)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        f"check_speed: functions {functions_s:.1f} s, trl {trl_s:.1f} s, "
        f"trl 0.17 {trl17_s:.1f} s, verl {verl_s:.1f} s, import {import_s:.1f} s"
    )


if __name__ == "__main__":
    main()
