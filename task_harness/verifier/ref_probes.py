"""Behavioural probes of a from-scratch GRPO package (the `reference` task family).

Each probe calls one stage function of a package on a fixed, seeded fixture and returns what it
saw. The verifier runs every probe on the agent's package in a child process (this file as a
script) and on the intended and the upstream implementations in its own process, then compares.
A probe never reads source text, so any correct fix passes.

The verifier runs it in the child as `session.main(job)`, with the workspace as working folder
(first after the support folder on sys.path) and job = {"package", "stages", "out"}; the
observations go to job["out"] as plain JSON.
"""

from __future__ import annotations

import copy
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

PROBES: dict[str, tuple[str, Callable]] = {}


def probe(name: str, stage: str):
    def register(fn: Callable) -> Callable:
        PROBES[name] = (stage, fn)
        return fn

    return register


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _loss_case(seed: int, offset: float | None, per_token_adv: bool = False):
    """logp [3, 5] (<= 0), a ragged mask, advantages of both signs, optional old log-probs."""
    g = _gen(seed)
    logps = -torch.rand(3, 5, generator=g) * 2
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    advantages = torch.tensor([1.2, -0.7, 0.4])
    if per_token_adv:
        advantages = torch.randn(3, 5, generator=g)
    old = None
    if offset is not None:
        old = logps - (torch.rand(3, 5, generator=g) * 2 - 1) * offset
    return logps, mask, advantages, old


def _loss_and_grad(ns, logps, mask, advantages, **kwargs):
    logps = logps.clone().requires_grad_(True)
    loss = ns.compute_loss(logps, advantages, mask, **kwargs)
    (grad,) = torch.autograd.grad(loss, logps)
    return loss.detach(), grad * mask  # masked positions may carry any gradient


# --- rewards ------------------------------------------------------------------------------------
@probe("rewards.weighted", "rewards")
def _(ns):
    rpf = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]])
    return ns.combine_rewards(rpf, [1.0, 0.25])


@probe("rewards.none_entries", "rewards")
def _(ns):
    nan = float("nan")
    rpf = torch.tensor([[nan, 1.0], [nan, nan], [2.0, nan], [1.0, 1.0]])
    return ns.combine_rewards(rpf, [1.0, 2.0])


@probe("rewards.default_weights", "rewards")
def _(ns):
    return ns.combine_rewards(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.5, 0.0]]), None)


# --- advantages ---------------------------------------------------------------------------------
SPREAD = torch.tensor([0.0, 1.0, 1.0, 1.0, 10.0, 12.0, 10.0, 12.0])


@probe("advantages.group", "advantages")
def _(ns):
    return ns.compute_advantages(SPREAD, 4)


@probe("advantages.small_groups", "advantages")
def _(ns):
    return ns.compute_advantages(torch.tensor([0.0, 1.0, 10.0, 11.0, 3.0, 3.0]), 2)


@probe("advantages.batch", "advantages")
def _(ns):
    return ns.compute_advantages(SPREAD, 4, scale_rewards="batch")


@probe("advantages.none", "advantages")
def _(ns):
    return ns.compute_advantages(SPREAD, 4, scale_rewards="none")


@probe("advantages.unscorable", "advantages")
def _(ns):
    return ns.compute_advantages(torch.tensor([float("nan"), 1.0, 0.0, 1.0, 5, 5, 5, 5]), 4)


@probe("advantages.low_variance", "advantages")
def _(ns):
    return ns.compute_advantages(torch.tensor([1.0, 1.001, 2.0, 2.003]), 2)


# --- logprobs -----------------------------------------------------------------------------------
def _logits_case(seed: int):
    g = _gen(seed)
    return torch.randn(3, 4, 9, generator=g) * 3, torch.randint(0, 9, (3, 4), generator=g)


@probe("logprobs.selective", "logprobs")
def _(ns):
    logits, index = _logits_case(1)
    return ns.selective_log_softmax(logits, index)


@probe("logprobs.selective_temperature", "logprobs")
def _(ns):
    logits, index = _logits_case(2)
    return ns.selective_log_softmax(logits, index, temperature=0.7)


@probe("logprobs.large_logits", "logprobs")
def _(ns):
    """Logits of a few hundred must not overflow: log-softmax is computed stably."""
    logits, index = _logits_case(4)
    return ns.selective_log_softmax(logits * 300, index)


@probe("logprobs.completion", "logprobs")
def _(ns):
    g = _gen(3)
    logits = torch.randn(2, 6, 9, generator=g) * 2
    input_ids = torch.randint(0, 9, (2, 6), generator=g)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return ns.completion_logps(logits, input_ids, mask, temperature=0.7)


def _tiny(seed: int = 0, weight_scale: float = 1.0):
    """The tiny Qwen2; a weight scale > 1 makes its next token depend strongly on the prompt."""
    from reference_impl.tiny import TinySpec, load_tiny

    torch.manual_seed(seed)
    model, _ = load_tiny(TinySpec())
    if weight_scale != 1.0:
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() > 1:
                    parameter.mul_(weight_scale)
    return model


@probe("logprobs.model", "logprobs")
def _(ns):
    model = _tiny().eval()
    input_ids = torch.tensor([[0, 0, 5, 13, 7, 8, 1], [3, 4, 5, 13, 9, 1, 0]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        return ns.get_per_token_logps(model, input_ids, attention_mask, 3, temperature=0.7)


# --- masking ------------------------------------------------------------------------------------
IDS = torch.tensor([[5, 1, 3, 3], [5, 6, 2, 0], [5, 6, 7, 8], [1, 0, 0, 0], [7, 2, 1, 0]])


@probe("masking.eos_set", "masking")
def _(ns):
    return ns.completion_mask(IDS, [1, 2])


@probe("masking.single_eos", "masking")
def _(ns):
    return ns.completion_mask(IDS, 1)


@probe("masking.pad_is_eos", "masking")
def _(ns):
    return ns.completion_mask(torch.tensor([[5, 0, 0, 0], [5, 6, 0, 0], [4, 4, 4, 4]]), [0])


@probe("masking.truncated", "masking")
def _(ns):
    return ns.completion_mask(IDS, [1, 2], mask_truncated_completions=True)


# --- ratio --------------------------------------------------------------------------------------
@probe("ratio.token", "ratio")
def _(ns):
    logps, mask, adv, old = _loss_case(10, offset=0.1)
    return _loss_and_grad(ns, logps, mask, adv, old_per_token_logps=old)


@probe("ratio.sequence", "ratio")
def _(ns):
    logps, mask, adv, old = _loss_case(11, offset=0.1)
    return _loss_and_grad(
        ns, logps, mask, adv, old_per_token_logps=old, importance_sampling_level="sequence"
    )


@probe("ratio.grpo", "ratio")
def _(ns):
    logps, mask, adv, old = _loss_case(12, offset=0.1)
    return _loss_and_grad(ns, logps, mask, adv, old_per_token_logps=old, loss_type="grpo")


# --- clipping -----------------------------------------------------------------------------------
@probe("clipping.outside_band", "clipping")
def _(ns):
    logps, mask, adv, old = _loss_case(20, offset=0.8)
    return _loss_and_grad(ns, logps, mask, adv, old_per_token_logps=old, epsilon_high=0.28)


@probe("clipping.delta", "clipping")
def _(ns):
    logps, mask, adv, old = _loss_case(21, offset=0.8)
    return _loss_and_grad(ns, logps, mask, adv, old_per_token_logps=old, delta=1.3)


@probe("clipping.cispo", "clipping")
def _(ns):
    logps, mask, adv, old = _loss_case(22, offset=0.8)
    return _loss_and_grad(
        ns, logps, mask, adv, old_per_token_logps=old, loss_type="cispo", epsilon_high=1.2
    )


@probe("clipping.sapo", "clipping")
def _(ns):
    logps, mask, adv, old = _loss_case(23, offset=0.8)
    return _loss_and_grad(ns, logps, mask, adv, old_per_token_logps=old, loss_type="sapo")


# --- kl -----------------------------------------------------------------------------------------
@probe("kl.per_token", "kl")
def _(ns):
    logps, _, _, ref = _loss_case(30, offset=1.0)
    return ns.per_token_kl(logps, ref)


@probe("kl.in_loss", "kl")
def _(ns):
    logps, mask, _, ref = _loss_case(31, offset=0.5)
    zero = torch.zeros(3)
    return _loss_and_grad(ns, logps, mask, zero, ref_per_token_logps=ref, beta=0.04)


@probe("kl.bias_correction", "kl")
def _(ns):
    logps, mask, adv, old = _loss_case(32, offset=0.1)
    ref = logps - 0.3
    return _loss_and_grad(
        ns, logps, mask, adv, old_per_token_logps=old, ref_per_token_logps=ref, beta=0.1
    )


@probe("kl.bias_correction_outside_band", "kl")
def _(ns):
    """The KL is weighted by the unclipped ratio, also where the surrogate is clipped."""
    logps, mask, adv, old = _loss_case(34, offset=0.8)
    return _loss_and_grad(
        ns, logps, mask, adv, old_per_token_logps=old, ref_per_token_logps=logps - 0.3, beta=0.1
    )


@probe("kl.no_bias_correction", "kl")
def _(ns):
    logps, mask, adv, old = _loss_case(33, offset=0.1)
    ref = logps + 0.2
    return _loss_and_grad(
        ns,
        logps,
        mask,
        adv,
        old_per_token_logps=old,
        ref_per_token_logps=ref,
        beta=0.1,
        use_bias_correction_kl=False,
    )


# --- loss_aggregation ---------------------------------------------------------------------------
def _aggregation(ns, seed: int, **kwargs):
    logps, mask, adv, _ = _loss_case(seed, offset=None)
    return _loss_and_grad(ns, logps, mask, adv, **kwargs)


@probe("loss_aggregation.grpo", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 40, loss_type="grpo")


@probe("loss_aggregation.bnpo", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 41, loss_type="bnpo")


@probe("loss_aggregation.dr_grpo", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 42, loss_type="dr_grpo", max_completion_length=8)


@probe("loss_aggregation.dapo", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 43, loss_type="dapo", num_items_in_batch=20)


@probe("loss_aggregation.dapo_default", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 44, loss_type="dapo")


@probe("loss_aggregation.sapo", "loss_aggregation")
def _(ns):
    return _aggregation(ns, 45, loss_type="sapo")


@probe("loss_aggregation.empty_row", "loss_aggregation")
def _(ns):
    """A row whose mask is all zero (a filtered completion) counts as 0, never NaN."""
    logps, mask, adv, _ = _loss_case(47, offset=None)
    mask = mask.clone()
    mask[1] = 0
    return [_loss_and_grad(ns, logps, mask, adv, loss_type=t) for t in ("grpo", "sapo", "bnpo")]


@probe("loss_aggregation.per_token_advantages", "loss_aggregation")
def _(ns):
    logps, mask, adv, _ = _loss_case(46, offset=None, per_token_adv=True)
    return _loss_and_grad(ns, logps, mask, adv, loss_type="grpo")


# --- decode -------------------------------------------------------------------------------------
@probe("decode.plain", "decode")
def _(ns):
    return [ns.strip_reasoning(t) for t in ("7", "  the answer is 42 ", "", "a > b")]


@probe("decode.reasoning", "decode")
def _(ns):
    texts = (
        "<think>3 + 4</think> 7",
        "3 + 4</think>7 ",
        "<think>3 + 4",
        "<think>a</think>b</think>c",
    )
    return [ns.strip_reasoning(t) for t in texts]


@probe("decode.custom_tags", "decode")
def _(ns):
    return [
        ns.strip_reasoning("<r>x</r> y", open_tag="<r>", close_tag="</r>"),
        ns.strip_reasoning("<r>x", open_tag="<r>", close_tag="</r>"),
    ]


# --- generation ---------------------------------------------------------------------------------
def _greedy(ns, weight_scale: float, eos_token_ids=(1,), temperature: float = 1e-4):
    model = _tiny(1, weight_scale).eval()
    prompt_ids = torch.tensor([[0, 3, 13], [5, 6, 13], [9, 9, 13]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [1, 1, 1]])
    torch.manual_seed(0)
    return ns.generate_completions(
        model,
        prompt_ids,
        prompt_mask,
        num_generations=3,
        max_completion_length=5,
        eos_token_ids=list(eos_token_ids),
        pad_token_id=0,
        temperature=temperature,
    )


@probe("generation.groups_contiguous", "generation")
def _(ns):
    """At temperature 1e-4 sampling is argmax, and this model answers each prompt differently:
    rows g*G .. g*G + G - 1 must all hold prompt g's completion."""
    return _greedy(ns, weight_scale=8.0)


@probe("generation.temperature_applied", "generation")
def _(ns):
    """A near-uniform model at temperature 1e-4 still gives G identical rows; at 1 it would not."""
    return _greedy(ns, weight_scale=1.0)


@probe("generation.every_eos_id_stops", "generation")
def _(ns):
    """Generation stops at any id of the EOS set (11 is this model's second token for prompt 0)."""
    return _greedy(ns, weight_scale=8.0, eos_token_ids=(1, 11))


@probe("generation.samples", "generation")
def _(ns):
    """At temperature 1 a near-uniform model gives G different completions of one prompt."""
    completions = _greedy(ns, weight_scale=1.0, temperature=1.0)
    return [
        len({tuple(row.tolist()) for row in completions[g * 3 : g * 3 + 3]}) > 1 for g in range(3)
    ]


# --- reference_model ----------------------------------------------------------------------------
@probe("reference_model.frozen_copy", "reference_model")
def _(ns):
    policy = _tiny(2)
    inputs = torch.tensor([[3, 4, 13, 5]])
    before = policy(input_ids=inputs).logits.detach()
    reference = ns.make_reference_model(policy)
    same_outputs = bool(torch.allclose(reference(input_ids=inputs).logits, before, atol=1e-6))
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.05)
    unaffected = bool(torch.allclose(reference(input_ids=inputs).logits, before, atol=1e-6))
    return {
        "same_outputs": same_outputs,
        "unaffected_by_policy_update": unaffected,
        "frozen": all(not p.requires_grad for p in reference.parameters()),
        "eval_mode": not reference.training,
        "policy_still_trainable": all(p.requires_grad for p in policy.parameters()),
    }


# --- update -------------------------------------------------------------------------------------
def _isolated_step(ns, **kwargs):
    """grpo_step with the upstream stage functions, so that only the update logic is observed."""
    import reference_impl

    train = ns.train_module
    saved = {}
    for name in ("completion_mask", "compute_advantages", "get_per_token_logps", "compute_loss"):
        if hasattr(train, name):
            saved[name] = getattr(train, name)
            setattr(train, name, getattr(reference_impl, name))
    try:
        policy = _tiny(3)
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
        prompt_ids = torch.tensor([[3, 13], [3, 13], [5, 13], [5, 13]])
        prompt_mask = torch.ones_like(prompt_ids)
        completion_ids = torch.tensor([[4, 1, 0], [7, 8, 9], [6, 1, 0], [2, 1, 0]])
        rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
        if kwargs.get("beta"):
            kwargs["reference"] = reference
        loss = ns.grpo_step(
            policy,
            optimizer,
            prompt_ids,
            prompt_mask,
            completion_ids,
            rewards,
            num_generations=2,
            eos_token_ids=[1],
            **kwargs,
        )
        params = torch.cat([p.detach().flatten() for p in policy.parameters()])
        return float(loss), params
    finally:
        for name, fn in saved.items():
            setattr(train, name, fn)


@probe("update.one_step", "update")
def _(ns):
    return _isolated_step(ns, loss_type="dapo")


@probe("update.two_iterations_with_kl", "update")
def _(ns):
    return _isolated_step(ns, num_iterations=2, beta=0.04, loss_type="grpo", temperature=0.9)


# --- running ------------------------------------------------------------------------------------


def load_namespace(package: str) -> types.SimpleNamespace:
    """The stage functions of `package` and the trainer extensions of `package.train`."""
    module = importlib.import_module(package)
    train = importlib.import_module(f"{package}.train")
    ns = types.SimpleNamespace(train_module=train)
    from reference_impl import EXTENSION_FUNCTIONS, STAGE_FUNCTIONS  # the tests/ copy

    for name in STAGE_FUNCTIONS:
        setattr(ns, name, getattr(module, name, None))
    for name in EXTENSION_FUNCTIONS:
        setattr(ns, name, getattr(train, name, None))
    return ns


def observe(ns: types.SimpleNamespace, stages: list[str]) -> dict:
    """Run every probe of `stages` on `ns`; an exception becomes an {"error": ...} observation."""
    seen = {}
    for name, (stage, fn) in PROBES.items():
        if stage not in stages:
            continue
        try:
            seen[name] = fn(ns)
        except Exception as error:  # the candidate's bug, reported, never fatal
            seen[name] = {"error": f"{type(error).__name__}: {error}"[:200]}
    return seen


def main(job: dict) -> None:
    """The child's side: observe the workspace's package and write the observations as JSON."""
    import plain

    torch.set_num_threads(1)
    plain.dump(observe(load_namespace(job["package"]), job["stages"]), job["out"])
