"""Checkpoints: everything a run needs to continue as if it had not stopped; and the trained
policy exported for use without rlzero (`export_policy`).

A checkpoint is one file, `step-<n>.pt` in `RunConfig.output_dir`, holding the policy's and the
reference's weights, the optimizer's state and the warm-up schedule's (if any), the prompt stream's
order and shuffler, torch's random state (the sampler draws from it), the rollouts' logs so far
the number of the last rollout done and the run's configuration. `resume` checks that the
configuration still fits (`check_compatible`) and restores all of it, so a run resumed from
step n samples and learns at step n + 1 what the uninterrupted run did.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from rlzero.metrics import StepLog


def checkpoint_path(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f"step-{step:05d}.pt"


def save(learner, stream, logs: list[StepLog], step: int) -> Path:
    """Write the state after rollout `step` to `learner.cfg.output_dir`; the file written."""
    path = checkpoint_path(learner.cfg.output_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "config": asdict(learner.cfg),
        "policy": learner.policy.state_dict(),
        "reference": None if learner.reference is None else learner.reference.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "scheduler": None if learner.scheduler is None else learner.scheduler.state_dict(),
        "stream": stream.state(),
        "torch_rng": torch.get_rng_state(),
        "logs": [asdict(entry) for entry in logs],
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # a run killed while saving leaves the previous checkpoint intact
    prune(path.parent, learner.cfg.keep_checkpoints)
    return path


def prune(output_dir: Path, keep: int) -> list[Path]:
    """Delete all but the latest `keep` checkpoints of `output_dir` (keep 0: delete none); the
    files deleted."""
    found = sorted(output_dir.glob("step-*.pt"))
    stale = found[:-keep] if keep > 0 else []
    for old in stale:
        old.unlink()
    return stale


# What a resumed run must share with the saved one to continue it: the rollouts' shape, the
# prompt order's seed, the optimizer steps a rollout makes (the step-size schedule counts them)
# and the KL penalty the saved state was trained under (a checkpoint holds a reference model only
# when kl_coef > 0: `resume` below).
SHAPE = ("task", "seed", "prompts_per_step", "group_size", "passes", "minibatches", "kl_coef")


def check_compatible(saved: dict, now: dict, path: Path) -> None:
    """Raise ValueError naming the first option of SHAPE whose value differs."""
    for name in SHAPE:
        if saved.get(name) != now.get(name):
            raise ValueError(
                f"{path} was saved with {name}={saved.get(name)!r}; this run has {now.get(name)!r}"
            )


def latest(output_dir: str | Path) -> Path | None:
    """The checkpoint of the latest rollout in `output_dir`, if any."""
    found = sorted(Path(output_dir).glob("step-*.pt"))
    return found[-1] if found else None


def resume(learner, stream, path: str | Path) -> tuple[int, list[StepLog]]:
    """Restore the state saved in `path` into `learner` and `stream`; the last rollout done and
    the logs up to it. A folder stands for its latest checkpoint."""
    path = Path(path)
    if path.is_dir():
        found = latest(path)
        if found is None:
            raise FileNotFoundError(f"no checkpoint in {path}")
        path = found
    state = torch.load(path, weights_only=False)
    check_compatible(state["config"], asdict(learner.cfg), path)
    learner.policy.load_state_dict(state["policy"])
    if learner.reference is not None:
        if state["reference"] is None:
            raise ValueError(f"{path} was saved without a reference model (kl_coef was 0)")
        learner.reference.load_state_dict(state["reference"])
    learner.optimizer.load_state_dict(state["optimizer"])
    if learner.scheduler is not None and state["scheduler"] is not None:
        learner.scheduler.load_state_dict(state["scheduler"])
    stream.restore(state["stream"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], [StepLog(**entry) for entry in state["logs"]]


def export_policy(policy, tokenizer, folder: str | Path) -> Path:
    """Save the policy and its tokenizer to `folder` in Hugging Face's format, so that
    `AutoModelForCausalLM.from_pretrained(folder)` loads the trained model; the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
