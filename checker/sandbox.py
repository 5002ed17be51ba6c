"""Running the candidate's code in child processes, with a watchdog per check.

Parent side: `run_isolated` starts up to two workers (`python -m checker.sandbox`): one for the
tensor-only checks and one for the checks that need transformers and the tiny model, so the two
imports overlap on two cores (the parent itself never imports torch). Each worker imports torch and the candidate once and runs its checks
in turn, announcing each one before it starts. A check that outlives `timeout` has its worker
killed; a worker that dies (os._exit, a segfault) takes only the current check with it: both are
reported as `error` and a fresh worker continues with the remaining checks.

Child side (`main`): the real standard output is kept for the protocol (one JSON object per
line) and file descriptor 1 is pointed at standard error, so a candidate that prints cannot corrupt
the protocol or the user's `--json` output.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict

from checker.candidate import CandidateSpec, TargetError, load_candidate
from checker.checks import Check, CheckResult, all_checks
from checker.runner import run_one
from reference_impl.protocol import STAGES

STARTUP_TIMEOUT = 180.0  # importing torch + transformers + the candidate on a busy machine
# Which stages hold light (tensor-only) and heavy (tiny-model) checks; a test keeps this in step
# with the registry. It lets the parent skip a worker that would have nothing to run.
GROUP_STAGES = {
    "light": set(STAGES) - {"generation", "reference_model", "update"},
    "heavy": {"logprobs", "generation", "reference_model", "update"},
}
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


class CandidateLoadError(Exception):
    """The candidate could not be loaded at all (exit status 2)."""


def run_in_process(spec: CandidateSpec, checks: list[Check], seed: int) -> list[CheckResult]:
    """Run the checks in this process (no isolation): for tests and the pytest plugin."""
    try:
        candidate = load_candidate(spec)
    except TargetError as error:
        raise CandidateLoadError(str(error)) from None
    return [run_one(chk, candidate, seed) for chk in checks]


def run_isolated(
    spec: CandidateSpec,
    stages: tuple[str, ...] | list[str],
    seed: int,
    timeout: float,
    workers: int = 2,
    log: Callable[[str], None] = lambda _: None,
) -> list[CheckResult]:
    """Run the checks of `stages` (all when empty) in child processes, in pipeline order.

    The parent never imports torch or the checks: each child selects its own share ("light",
    "heavy" or "all"), so two children start at once and the parent stays light.
    """
    chosen = set(stages) or set(STAGES)
    if spec.kind == "verl":
        # verl's core_algos has no model, so every heavy check skips: a second worker would only
        # import verl (Ray, tensordict: most of the run) a second time.
        workers = 1
    groups = ["light", "heavy"] if workers > 1 else ["all"]
    groups = [g for g in groups if g == "all" or chosen & GROUP_STAGES[g]]
    outcomes: list[tuple[dict[str, CheckResult], str | None]] = [({}, None)] * len(groups)

    def drive(index: int, group: str) -> None:
        outcomes[index] = _Worker(spec, list(stages), group, seed, timeout, log).run()

    threads = [
        threading.Thread(target=drive, args=(i, group), daemon=True)
        for i, group in enumerate(groups)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fatal = [message for _, message in outcomes if message]
    if fatal:
        raise CandidateLoadError(fatal[0])
    results: dict[str, CheckResult] = {}
    for found, _ in outcomes:
        results.update(found)
    return sorted(results.values(), key=lambda r: r.order)


def select_checks(stages: list[str], group: str, skip: list[str]) -> list[Check]:
    """The checks a child runs: its group's share of `stages`, minus those already reported."""
    chosen = [c for c in all_checks(stages) if c.name not in skip]
    if group == "light":
        return [c for c in chosen if not c.heavy]
    if group == "heavy":
        return [c for c in chosen if c.heavy]
    return chosen


class _Worker:
    """One child process at a time for one group of checks; restarted after a hang or a crash."""

    def __init__(self, spec, stages, group, seed, timeout, log):
        self.spec, self.stages, self.group = spec, stages, group
        self.seed, self.timeout, self.log = seed, timeout, log
        self.results: dict[str, CheckResult] = {}
        self.finished = False

    def run(self) -> tuple[dict[str, CheckResult], str | None]:
        while not self.finished:
            fatal = self._one_process()
            if fatal:
                return self.results, fatal
        return self.results, None

    def _one_process(self) -> str | None:
        stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in the finally below
        env = dict(os.environ, **OFFLINE)
        env.setdefault("OMP_NUM_THREADS", "1")
        process = subprocess.Popen(
            [sys.executable, "-m", "checker.sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=self.spec.cwd,
            env=env,
            text=True,
        )
        job = {
            "spec": asdict(self.spec),
            "seed": self.seed,
            "stages": self.stages,
            "group": self.group,
            "skip": sorted(self.results),
        }
        process.stdin.write(json.dumps(job) + "\n")
        process.stdin.flush()
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
        try:
            return self._converse(process, lines, stderr)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            stderr.close()

    def _converse(self, process, lines: queue.Queue, stderr) -> str | None:
        current: dict | None = None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        ready = False
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                process.kill()
                if not ready:
                    return f"{self.spec.target}: loading the candidate took longer than {STARTUP_TIMEOUT:.0f}s"
                self._record_error(current, f"did not finish within {self.timeout:g}s (a hang?)")
                return None
            if line is None:  # the child is gone
                code = process.wait()
                if not ready:
                    return f"{self.spec.target}: the process died while loading the candidate (exit code {code}){_last_line(stderr)}"
                self._record_error(
                    current, f"the candidate ended the process (exit code {code}) during this check"
                )
                return None
            message = json.loads(line)
            if "fatal" in message:
                return message["fatal"]
            if "ready" in message:
                ready = True
            elif "start" in message:
                current = message["start"]
                deadline = time.monotonic() + self.timeout
                self.log(current["check"])
            elif "result" in message:
                result = CheckResult(**message["result"])
                result.depends_on = tuple(result.depends_on)
                self.results[result.check] = result
                current = None
                deadline = time.monotonic() + STARTUP_TIMEOUT
            elif "done" in message:
                self.finished = True
                return None

    def _record_error(self, current: dict | None, message: str) -> None:
        if current is None:  # between checks: nothing to blame, the next child continues
            return
        self.results[current["check"]] = CheckResult(
            current["check"],
            current["stage"],
            "error",
            message,
            seconds=self.timeout,
            depends_on=tuple(current["depends_on"]),
            order=current["order"],
        )


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        if line.strip():
            lines.put(line)
    lines.put(None)


def _last_line(stderr) -> str:
    stderr.seek(0)
    tail = [line.strip() for line in stderr.read().splitlines() if line.strip()]
    return f": {tail[-1][:200]}" if tail else ""


# ---------------------------------------------------------------------------------------------
# Child side


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the candidate prints goes to stderr, never into the protocol

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    job = json.loads(sys.stdin.readline())
    import torch

    torch.set_num_threads(1)
    spec = CandidateSpec(**job["spec"])
    try:
        candidate = load_candidate(spec)
    except TargetError as error:
        send({"fatal": str(error)})
        return
    checks = select_checks(job["stages"], job["group"], job["skip"])
    if any(c.heavy and set(c.needs) <= set(candidate.functions) for c in checks):
        from checker import fixtures

        fixtures.tiny_model()  # load transformers and the model before any watchdog starts
    send({"ready": sorted(candidate.functions)})
    for chk in checks:
        send(
            {
                "start": {
                    "check": chk.name,
                    "stage": chk.stage,
                    "depends_on": list(chk.depends_on),
                    "order": chk.order,
                }
            }
        )
        payload = asdict(run_one(chk, candidate, job["seed"]))
        payload["depends_on"] = list(payload["depends_on"])
        send({"result": payload})
    send({"done": True})


if __name__ == "__main__":
    main()
