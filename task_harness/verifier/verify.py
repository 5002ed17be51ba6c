"""The hidden verifier of a grpo-skill debug task: anti-cheat gate, then one weighted check per bug.

Runs after the agent, from the task's `tests/` folder, with no network:

    python verify.py WORKSPACE LOGS_DIR

Writes LOGS_DIR/reward.json (1.0 or 0.0 per bug and per decoy, "anti_cheat", and "reward", the
weighted total) and LOGS_DIR/reward.txt (the total, 4 decimals). Everything it needs sits next to
it: task.json (bugs, weights, protected files), the probes, `reference_impl` (upstream semantics)
and, for the reference family, `expected/` (the intended package, decoys included).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

from digest import sha256, tree_digest  # noqa: E402  (shipped beside this file)

CHILD_TIMEOUT = 600


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
    """Protected files byte-identical, installed packages (TRL, the checker) untouched."""
    problems = []
    for relative, digest in task["protected"].items():
        path = workspace / relative
        if not path.is_file():
            problems.append(f"protected file {relative} was deleted")
        elif sha256(path) != digest:
            problems.append(f"protected file {relative} was modified")
    for name, digest in task.get("installed", {}).items():
        location = installed_package_dir(name)
        if location is None:
            problems.append(f"installed package {name} is gone")
        elif tree_digest(location) != digest:
            problems.append(f"installed package {name} ({location}) was modified")
    return problems


def run_child(args: list[str], workspace: Path) -> tuple[dict | None, str]:
    """Run a probe script (`args`: script, then its arguments after the workspace, "OUT" standing
    for the observations file) on the agent's code in a child process; observations or the cause."""
    import torch

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "observations.pt"
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1")
        env.pop("PYTHONPATH", None)
        try:
            script, *rest = args
            command = [sys.executable, script, str(workspace)]
            command += [str(out) if arg == "OUT" else arg for arg in rest]
            done = subprocess.run(
                command,
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return None, f"the probes did not finish within {CHILD_TIMEOUT} s"
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"the probes crashed (exit {done.returncode}): {tail[0][:300]}"
        return torch.load(out, weights_only=False), ""


def check_reference(task: dict, workspace: Path) -> dict[str, list[str]]:
    """Every probe of a stage must give the intended or the upstream result."""
    import ref_probes
    from judge import describe, same

    checks = sorted({bug["stage"] for bug in task["bugs"]})
    seen, cause = run_child(
        [str(TESTS_DIR / "ref_probes.py"), task["package"], "OUT", ",".join(checks)], workspace
    )
    if seen is None:
        return {stage: [cause] for stage in checks} | {d["id"]: [cause] for d in task["decoys"]}
    sys.path.insert(0, str(TESTS_DIR / "expected"))
    intended = ref_probes.observe(ref_probes.load_namespace(task["package"]), checks)
    upstream = ref_probes.observe(ref_probes.load_namespace("reference_impl"), checks)
    problems: dict[str, list[str]] = {stage: [] for stage in checks}
    for name, expected in intended.items():
        got = seen.get(name, {"error": "not observed"})
        if not (same(got, expected) or same(got, upstream[name])):
            stage = ref_probes.PROBES[name][0]
            problems[stage].append(f"{name}: expected {describe(expected)}, got {describe(got)}")
    for decoy in task["decoys"]:
        problems[decoy["id"]] = [
            f"{name}: intended {describe(intended[name])}, got {describe(seen.get(name))}"
            for name in decoy["probes"]
            if not same(seen.get(name), intended[name])
        ]
    return problems


def check_trl(task: dict, workspace: Path) -> dict[str, list[str]]:
    """Each stage's observations of the workspace's GRPOTrainer, judged against reference_impl."""
    import trl_probes

    checks = sorted({bug["stage"] for bug in task["bugs"]})
    seen, cause = run_child([str(TESTS_DIR / "trl_probes.py"), "OUT", ",".join(checks)], workspace)
    if seen is None:
        return {stage: [cause] for stage in checks} | {d["id"]: [cause] for d in task["decoys"]}
    problems = {stage: trl_probes.judge(seen, stage) for stage in checks}
    for decoy in task["decoys"]:
        problems[decoy["id"]] = [
            p for rule in decoy["probes"] for p in trl_probes.judge(seen, rule)
        ]
    return problems


def score(task: dict, workspace: Path) -> tuple[dict[str, float], list[str]]:
    """reward.json's content and the log lines explaining it."""
    log = ["=== Anti-cheat ==="]
    cheating = anti_cheat(task, workspace)
    log += [f"FAIL: {p}" for p in cheating] or [
        "PASS: protected files and installed packages intact"
    ]
    checker = check_reference if task["family"] == "reference" else check_trl
    # A violated gate scores 0 whatever the probes say, so they are not run.
    problems = {} if cheating else checker(task, workspace)
    result: dict[str, float] = {"anti_cheat": 0.0 if cheating else 1.0}
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
    result["reward"] = round(total, 4) if not cheating else 0.0
    return result, log


def main() -> int:
    workspace, logs = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    task = json.loads((TESTS_DIR / "task.json").read_text())
    logs.mkdir(parents=True, exist_ok=True)
    try:
        result, log = score(task, workspace)
    except Exception as error:  # a verifier that cannot judge scores 0, never crashes silently
        keys = [b["id"] for b in task["bugs"]] + [d["id"] for d in task["decoys"]]
        result = {key: 0.0 for key in keys} | {"anti_cheat": 0.0, "reward": 0.0}
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
