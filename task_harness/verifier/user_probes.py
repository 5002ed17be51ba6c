"""What a user's GRPOTrainer subclass computes: the `user` family's child side.

The verifier runs this file in a child process (as `session.py`, called by the job's script;
`Children.observe` in `verify.py`). It imports the workspace's trainer class and config (the job
names them), hands them to grpo-check's subclass driver (`checker.adapters.trl_trainer`
`check_subclass`, then `checker.adapters.trl_adapter`, as `grpo-check FILE.py:CLASS` does) on
the TRL release shipped beside this file, never the one installed in the workspace's
environment, and records what each stage function of the driver returns for the job's inputs,
together with the inputs it passed. It holds no rule and no expected value: the job, made in the
verifier's own process (`user_judge.py`), carries every input.
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager

for _name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ[_name] = "1"

import plain  # noqa: E402
import torch  # noqa: E402


def _named(reference: str):
    """The object `module:NAME` names."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _select_trainer(job: dict) -> None:
    """The workspace's trainer class, built by the driver with the workspace's config."""
    from checker.adapters import trl_trainer

    values = dict(_named(job["config_values"])) if job.get("config_values") else {}
    trl_trainer.check_subclass(_named(job["trainer"]), _named(job["config_class"]), values)


def _loss(adapter, inputs: dict) -> dict:
    """The loss and its gradient with respect to the given policy log-probs."""
    logps = inputs.pop("per_token_logps").clone().requires_grad_(True)
    loss = adapter.compute_loss(logps, **inputs)
    (grad,) = torch.autograd.grad(loss, logps, allow_unused=True)
    return {"loss": loss.detach(), "grad": torch.zeros_like(logps) if grad is None else grad}


def _reference_sync(adapter, inputs: dict) -> dict:
    """The reference model through training steps of the driver (`grpo_step`: the trainer's own
    `training_step`, as many passes as the config's `ref_sync_steps`, with the events
    `Trainer.train` sends its callbacks around each step, so a sync kept in a callback runs as
    in training), then after one more update of the policy alone. Every update moves the policy
    by a fixed drift drawn from the case's `drift_seed`, whatever the loss's gradient: the policy
    at each step is then the same in every workspace, so a bug left in the advantages, the ratio
    or the KL cannot change what the reference is synced from (their own probes judge them).
    Observed: the reference; the
    policy just before the last step's update (what a reference synced in that step, before
    its update, is a copy of; where in the step the sync runs changes that step's loss, not
    this); and the reference after the extra update (a reference that moves with the policy)."""
    from transformers import AutoModelForCausalLM

    from reference_impl.tiny import TinySpec, tiny_model_path

    path = tiny_model_path(TinySpec())
    policy = AutoModelForCausalLM.from_pretrained(path)
    reference = AutoModelForCausalLM.from_pretrained(path).eval().requires_grad_(False)
    probe = inputs["probe_ids"]
    before_update: list[torch.Tensor] = []

    generator = torch.Generator().manual_seed(int(inputs["drift_seed"]))
    drifts = [
        inputs["drift"] * torch.randn(p.shape, generator=generator) for p in policy.parameters()
    ]

    class Drifting(torch.optim.SGD):
        """Records the policy before each update, then moves it by the drift, not the gradient."""

        def step(self, closure=None):
            with torch.no_grad():
                before_update[:] = [policy(input_ids=probe).logits]
                for param, drift in zip(policy.parameters(), drifts, strict=True):
                    param.add_(drift)

    optimizer = Drifting(policy.parameters(), lr=0.0)
    passes = int(getattr(adapter.harness.trainer().args, "ref_sync_steps", 1) or 1)
    adapter.grpo_step(
        policy,
        optimizer,
        inputs["prompt_ids"],
        inputs["prompt_mask"],
        inputs["completion_ids"],
        inputs["rewards"],
        num_generations=inputs["num_generations"],
        eos_token_ids=inputs["eos_token_ids"],
        reference=reference,
        num_iterations=passes,
        callbacks=True,
        beta=inputs["beta"],
    )
    with torch.no_grad():
        synced = reference(input_ids=probe).logits
    last_update_from = before_update[0]
    optimizer.zero_grad()
    policy(input_ids=probe).logits.logsumexp(-1).mean().backward()
    optimizer.step()
    with torch.no_grad():
        later = reference(input_ids=probe).logits
    return {
        "reference": synced,
        "policy_before_update": last_update_from,
        "reference_after_policy_step": later,
    }


@contextmanager
def _arguments(adapter, values: dict):
    """The trainer's config with `values` set for one case (a case that runs one of the team's
    settings at another value than its default, `case["args"]`), then as it was."""
    args = adapter.harness.trainer().args
    missing = object()
    saved = {name: getattr(args, name, missing) for name in values}
    for name, value in values.items():
        setattr(args, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                delattr(args, name)
            else:
                setattr(args, name, value)


@contextmanager
def _own_state_kept(adapter):
    """The trainer's own attributes as they were before one case, after it: every case runs on
    the one trainer the process builds, and a subclass that keeps its own count across steps (a
    sync run once per step, a blind agent's fix of user-ref-anchor) must start each case where a
    new run starts, not where the last case left it."""
    attributes = vars(adapter.harness.trainer())
    before = dict(attributes)
    try:
        yield
    finally:
        attributes.clear()
        attributes.update(before)


def _call(adapter, case: dict, inputs: dict):
    with _own_state_kept(adapter), _arguments(adapter, case.get("args", {})):
        return _call_with(adapter, case, inputs)


def _call_with(adapter, case: dict, inputs: dict):
    if case["call"] == "compute_loss":
        return _loss(adapter, inputs)
    if case["call"] == "reference_sync":
        return _reference_sync(adapter, inputs)
    if case["call"] == "reward_function":
        values = _named(case["function"])(**inputs)
        return [float("nan") if v is None else float(v) for v in values]
    return getattr(adapter, case["call"])(**inputs)


def observe(job: dict) -> dict:
    """{case name: {"inputs": what was passed, "output": what came back}}; a crash inside the
    trainer becomes an {"error": ...} output."""
    import trl

    here = os.path.realpath(os.path.dirname(__file__))
    if not os.path.realpath(trl.__file__).startswith(here + os.sep):
        raise SystemExit(f"import trl resolved to {trl.__file__}, not the shipped release")
    _select_trainer(job)
    from checker.adapters import trl_adapter

    seen = {}
    for case in job["cases"]:
        inputs = {name: plain.decode(value) for name, value in case["inputs"].items()}
        reported = {name: plain.encode(value) for name, value in inputs.items()}
        try:
            output = _call(trl_adapter, case, inputs)
        except Exception as error:  # a crash inside the candidate fails its stage, not the run
            output = {"error": f"{type(error).__name__}: {error}"[:300]}
        seen[case["name"]] = {"inputs": reported, "output": output}
    return seen


def main(job: dict) -> None:
    """Observe the workspace's trainer and write the observations as JSON to job["out"]."""
    torch.set_num_threads(1)
    plain.dump(observe(job), job["out"])
