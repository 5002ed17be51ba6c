"""Running the candidate's code in child processes, with a watchdog per check.

Parent side: `run_isolated` starts up to two workers (`python -m checker.sandbox`): one for the
tensor-only checks and one for the checks that need transformers and the tiny model, so the two
imports overlap on two cores. Each worker imports torch and the candidate once and runs its checks
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
from checker.checks import Check, CheckResult, all_checks, run_one

STARTUP_TIMEOUT = 180.0  # importing torch + transformers + the candidate on a busy machine
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
    checks: list[Check],
    seed: int,
    timeout: float,
    workers: int = 2,
    log: Callable[[str], None] = lambda _: None,
) -> list[CheckResult]:
    """Run the checks in child processes; results in the order of `checks`."""
    light = [c for c in checks if not c.heavy]
    heavy = [c for c in checks if c.heavy]
    batches = [light, heavy] if workers > 1 and light and heavy else [light + heavy]
    outcomes: list[tuple[dict[str, CheckResult], str | None]] = [({}, None)] * len(batches)

    def drive(index: int, batch: list[Check]) -> None:
        outcomes[index] = _Worker(spec, batch, seed, timeout, log).run()

    threads = [
        threading.Thread(target=drive, args=(i, batch), daemon=True)
        for i, batch in enumerate(batches)
        if batch
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
    return [results[c.name] for c in checks if c.name in results]


class _Worker:
    """One child process at a time for a list of checks; restarted after a hang or a crash."""

    def __init__(self, spec, checks, seed, timeout, log):
        self.spec, self.seed, self.timeout, self.log = spec, seed, timeout, log
        self.checks = {c.name: c for c in checks}
        self.remaining = [c.name for c in checks]
        self.results: dict[str, CheckResult] = {}

    def run(self) -> tuple[dict[str, CheckResult], str | None]:
        while self.remaining:
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
        job = {"spec": asdict(self.spec), "seed": self.seed, "checks": self.remaining}
        job["warm"] = any(self.checks[name].heavy for name in self.remaining)
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
        current: str | None = None
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
                if current:
                    self._record_error(
                        current,
                        f"the candidate ended the process (exit code {code}) during this check",
                    )
                return None
            message = json.loads(line)
            if "fatal" in message:
                return message["fatal"]
            if "ready" in message:
                ready = True
                deadline = time.monotonic() + STARTUP_TIMEOUT
            elif "start" in message:
                current = message["start"]
                deadline = time.monotonic() + self.timeout
                self.log(current)
            elif "result" in message:
                result = CheckResult(**message["result"])
                result.depends_on = tuple(result.depends_on)
                self.results[result.check] = result
                self.remaining.remove(result.check)
                current = None
                deadline = time.monotonic() + STARTUP_TIMEOUT
            elif "done" in message:
                return None

    def _record_error(self, name: str | None, message: str) -> None:
        if name is None:
            return
        chk = self.checks[name]
        self.results[name] = CheckResult(
            name, chk.stage, "error", message, None, self.timeout, chk.depends_on
        )
        self.remaining.remove(name)


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
    checks = {c.name: c for c in all_checks()}
    if job.get("warm"):
        from checker import fixtures

        fixtures.tiny_model()  # load transformers and the model before any watchdog starts
    send({"ready": sorted(candidate.functions)})
    for name in job["checks"]:
        send({"start": name})
        result = run_one(checks[name], candidate, job["seed"])
        payload = asdict(result)
        payload["depends_on"] = list(result.depends_on)
        send({"result": payload})
    send({"done": True})


if __name__ == "__main__":
    main()
