"""Running grpo-check on a small candidate written by a test: its checks in process, `profile
--write` and a JSON run through the command line, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from checker.candidate import resolve_target
from checker.checks import CheckResult, all_checks
from checker.sandbox import run_in_process

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
SEED = 1234

# The head of a `compute_loss` with PPO's symmetric clipped surrogate and no KL term: a test
# appends the `return` that aggregates `token` over `mask` its own way.
CLIPPED_LOSS_HEAD = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 epsilon_low=0.2):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
"""


def check_results(target: Path, stages: tuple[str, ...]) -> dict[str, CheckResult]:
    """The results of `stages`' checks on `target` (a .py or .yaml), by check name."""
    spec = resolve_target(str(target))
    return {r.check: r for r in run_in_process(spec, all_checks(stages), SEED)}


def profiled(folder: Path, candidate: str = "candidate.py") -> dict:
    """The YAML document `grpo-check profile CANDIDATE --write cfg.yaml` writes in `folder`."""
    written = folder / "cfg.yaml"
    done = subprocess.run(
        [GRPO_CHECK, "profile", candidate, "--write", str(written)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
    )
    assert written.exists(), done.stdout + done.stderr
    return yaml.safe_load(written.read_text())


def json_report(folder: Path, *args: str) -> dict:
    """`grpo-check ARGS --json` run in `folder`, parsed."""
    done = subprocess.run(
        [GRPO_CHECK, *args, "--json"], capture_output=True, text=True, timeout=600, cwd=folder
    )
    return json.loads(done.stdout)
