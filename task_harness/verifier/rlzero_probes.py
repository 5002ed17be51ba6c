"""Behavioural probes of an `rlzero` trainer (the reference family's independent trainer).

Each probe calls rlzero's own functions on a fixed, seeded fixture and returns what it saw. The
verifier runs every probe on the agent's rlzero in a child process (this file as `session.py`)
and on the intended rlzero (`expected/`, the task's trainer without its bugs) in its own
process, and requires the same result: the task's conventions are the trainer's, not TRL's or
grpo-skill's reference. A probe never reads source text, so any correct fix passes.

The conditions the task's run has are fixtures here: a tokenizer whose pad token is its EOS,
temperatures other than 1, several passes over a rollout, reward functions that return None.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

import torch

PROBES: dict[str, tuple[str, Callable]] = {}
EOS, PAD = 1, 0


def probe(name: str, stage: str):
    def register(fn: Callable) -> Callable:
        PROBES[name] = (stage, fn)
        return fn

    return register


def rz(module: str):
    return importlib.import_module(f"rlzero.{module}")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tiny(seed: int = 0, weight_scale: float = 1.0, pad_is_eos: bool = True):
    """The task's tiny model and tokenizer; pad == EOS, as the training script sets it."""
    model, tokenizer = rz("tiny").load_tiny()
    if pad_is_eos:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn_like(parameter) * 0.2 * weight_scale)
    return model, tokenizer


def _config(**overrides):
    return rz("config").RunConfig(**overrides)


# --- rewards ------------------------------------------------------------------------------------
NAN = float("nan")


@probe("rewards.mix_weighted", "rewards")
def _():
    per_fn = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]])
    return rz("rewards").mix_rewards(per_fn, (1.0, 0.25))


@probe("rewards.mix_unscored", "rewards")
def _():
    per_fn = torch.tensor([[NAN, 1.0], [NAN, NAN], [2.0, NAN], [1.0, 1.0]])
    return rz("rewards").mix_rewards(per_fn, (1.0, 2.0))


def _answers(prompts, completions, completion_ids, answer, **_):
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer, strict=True)]


def _length_or_none(prompts, completions, completion_ids, **_):
    """Applies to digit prompts only: None for the others (TRL's convention for 'not mine')."""
    return [
        None if p.startswith("A") else 0.1 * len(ids)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


@probe("rewards.score_with_none", "rewards")
def _():
    prompts = ["1 =", "1 =", "A =", "A ="]
    texts = ["2", "3", "7", "7 7"]
    ids = [[4, 1], [5, 1], [9, 1], [9, 9]]
    columns = {"answer": ["2", "2", "7", "7"]}
    fns = [_answers, _length_or_none]
    return rz("rewards").score_completions(fns, (1.0, 0.5), prompts, texts, ids, columns)


# --- advantages ---------------------------------------------------------------------------------
SPREAD = torch.tensor([0.0, 1.0, 1.0, 1.0, 10.0, 12.0, 10.0, 12.0])


@probe("advantages.group", "advantages")
def _():
    return rz("advantages").group_advantages(SPREAD, 4)


@probe("advantages.pairs", "advantages")
def _():
    return rz("advantages").group_advantages(torch.tensor([0.0, 1.0, 10.0, 11.0, 3.0, 3.0]), 2)


@probe("advantages.low_variance", "advantages")
def _():
    return rz("advantages").group_advantages(torch.tensor([1.0, 1.001, 2.0, 2.003]), 2)


@probe("advantages.unscored", "advantages")
def _():
    return rz("advantages").group_advantages(torch.tensor([NAN, 1.0, 0.0, 1.0, 5, 5, 5, 5]), 4)


@probe("advantages.config_eps", "advantages")
def _():
    eps = _config().adv_eps
    return rz("advantages").group_advantages(torch.tensor([1.0, 1.001, 2.0, 2.003]), 2, eps)


# --- logprobs -----------------------------------------------------------------------------------
def _scored(temperature: float):
    model, _ = _tiny(1)
    model.eval()
    g = _gen(3)
    input_ids = torch.randint(2, 17, (3, 6), generator=g)
    attention = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]])
    with torch.no_grad():
        logp = rz("scoring").completion_logprobs(
            model, input_ids, attention, n_new=3, temperature=temperature
        )
    return logp * attention[:, -3:]  # positions after a completion's end may hold anything


@probe("logprobs.temperature_one", "logprobs")
def _():
    return _scored(1.0)


@probe("logprobs.temperature_low", "logprobs")
def _():
    return _scored(0.7)


@probe("logprobs.temperature_high", "logprobs")
def _():
    return _scored(1.5)


# --- masking ------------------------------------------------------------------------------------
# pad == EOS: after its first EOS a row holds more EOS ids (the pad).
PADDED = torch.tensor([[5, 1, 1, 1], [5, 6, 1, 1], [5, 6, 7, 8], [1, 1, 1, 1], [7, 2, 1, 1]])


@probe("masking.tokens", "masking")
def _():
    return rz("sampling").completion_tokens_mask(PADDED, EOS)


def _fixed_rollout(completions: torch.Tensor, config: dict, seed: int = 4):
    """Learner.rollout with sampling replaced by `completions` (as the sampler would return them
    for the prompts "1 =" and "A ="), so every later step of the rollout is deterministic."""
    learner_module = rz("learner")
    model, tokenizer = _tiny(seed)
    seen = {}

    def recorded(prompts, completions, completion_ids, answer, **_):
        seen.setdefault("completion_ids", [list(ids) for ids in completion_ids])
        seen.setdefault("prompts", list(prompts))
        seen.setdefault("answers", list(answer))
        seen.setdefault("completions", list(completions))
        return _answers(prompts, completions, completion_ids, answer)

    sampled_logp = -torch.rand(completions.shape, generator=_gen(seed))
    original = learner_module.sample_groups
    learner_module.sample_groups = lambda *args, **kwargs: (completions.clone(), sampled_logp)
    try:
        cfg = _config(**config)
        learner = learner_module.Learner(cfg, model, tokenizer, [recorded, _length_or_none])
        batch = learner.rollout(
            [{"prompt": "1 =", "answer": "2"}, {"prompt": "A =", "answer": "7"}]
        )
    finally:
        learner_module.sample_groups = original
    return learner, batch, seen


# Two prompts, G = 3: token 4 is "2", 9 is "7", 1 is EOS (and the pad).
ROLLOUT_COMPLETIONS = torch.tensor(
    [[4, 1, 1], [5, 4, 1], [4, 4, 4], [9, 1, 1], [1, 1, 1], [9, 9, 1]]
)


@probe("masking.rollout", "masking")
def _():
    _, batch, seen = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return {
        "completion_mask": batch.completion_mask,
        "attention_mask": batch.attention_mask,
        "reward_ids": seen["completion_ids"],
        "rewards": batch.rewards,
    }


@probe("generation.rollout_pairs", "generation")
def _():
    """Each completion is scored after the prompt it was sampled for (rows g*G .. g*G + G - 1)."""
    _, batch, _ = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return batch.input_ids


@probe("rewards.rollout", "rewards")
def _():
    """Each completion is judged with its own prompt's row: the rewards of a rollout and the
    prompts and answers the reward functions were handed."""
    _, batch, seen = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return {"rewards": batch.rewards, "prompts": seen["prompts"], "answers": seen["answers"]}


# --- rollout (advantages and old log-probs as the loop computes them) ----------------------------
@probe("advantages.rollout", "advantages")
def _():
    _, batch, _ = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return batch.advantages


@probe("logprobs.rollout", "logprobs")
def _():
    """The rollout keeps the sampler's log-probs of the counted tokens as the old policy's."""
    _, batch, _ = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return batch.old_logp


@probe("logprobs.first_pass_ratio", "logprobs")
def _():
    """Sampled at temperature 0.7 and scored: the first pass's ratio is 1."""
    model, tokenizer = _tiny(6)
    model.eval()
    prompt_ids = torch.tensor([[EOS, 3, 13], [5, 6, 13]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    torch.manual_seed(1)
    sampling = rz("sampling")
    completions, sampled = sampling.sample_groups(
        model, prompt_ids, prompt_mask, **_sampling_arguments(4, 3, 0.7)
    )
    mask = sampling.completion_tokens_mask(completions, EOS)
    ids = torch.cat([prompt_ids.repeat_interleave(4, 0), completions], 1)
    attention = torch.cat([prompt_mask.repeat_interleave(4, 0), mask], 1)
    with torch.no_grad():
        scored = rz("scoring").completion_logprobs(
            model, ids, attention, n_new=completions.size(1), temperature=0.7
        )
    return ((scored - sampled) * mask).abs().max().item() < 1e-4


# --- the surrogate: ratio, clipping, kl, aggregation ---------------------------------------------
def _loss_case(seed: int, offset: float):
    g = _gen(seed)
    logp = -torch.rand(3, 5, generator=g) * 2
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    advantages = torch.tensor([1.2, -0.7, 0.4])
    old = logp - (torch.rand(3, 5, generator=g) * 2 - 1) * offset
    return logp, old, advantages, mask


def _surrogate(seed: int, offset: float, **kwargs):
    logp, old, advantages, mask = _loss_case(seed, offset)
    logp = logp.clone().requires_grad_(True)
    cfg = _config()
    kwargs = {"clip_low": cfg.clip_low, "clip_high": cfg.clip_high, "max_new_tokens": 5} | kwargs
    loss, stats = rz("objective").surrogate_loss(logp, old, advantages, mask, **kwargs)
    (grad,) = torch.autograd.grad(loss, logp)
    return {"loss": loss.detach(), "grad": grad * mask, "stats": stats}


@probe("ratio.near_policy", "ratio")
def _():
    return _surrogate(10, 0.1)


@probe("clipping.outside_band", "clipping")
def _():
    return _surrogate(20, 0.8)


@probe("clipping.config_band", "clipping")
def _():
    cfg = _config()
    return [cfg.clip_low, cfg.clip_high]


@probe("clipping.symmetric_band", "clipping")
def _():
    return _surrogate(21, 0.8, clip_low=0.2, clip_high=0.2)


@probe("kl.penalty", "kl")
def _():
    logp, _, _, mask = _loss_case(30, 0.5)
    ref = logp - 0.4 * torch.rand(3, 5, generator=_gen(31))
    logp = logp.clone().requires_grad_(True)
    loss, stats = rz("objective").surrogate_loss(
        logp,
        logp.detach(),
        torch.zeros(3),
        mask,
        clip_low=0.2,
        clip_high=0.28,
        max_new_tokens=5,
        ref_logp=ref,
        kl_coef=0.1,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return {"loss": loss.detach(), "grad": grad * mask, "stats": stats}


@probe("loss_aggregation.lengths", "loss_aggregation")
def _():
    return _surrogate(40, 0.0)


@probe("loss_aggregation.longer_budget", "loss_aggregation")
def _():
    return _surrogate(41, 0.0, max_new_tokens=8)


# --- the loop: passes over one rollout, the reference policy, the update --------------------------
def _learned(config: dict, completions: torch.Tensor = ROLLOUT_COMPLETIONS):
    """`Learner.learn` on the fixed rollout, whose old log-probs are the policy's own, scored as
    the learner scores them: the first pass's ratio is 1 whatever the trust region, and a fix
    that scores the old log-probs in a forward pass of its own (TRL's way without vLLM) sees
    what the sampler's log-probs give. So a loop probe sees its stage: no trust region, however
    written, clips a first pass (a task with a clipping bug and an update bug scores the update
    fix alone), and no valid source of the old log-probs is mistaken for a bug."""
    base = {"group_size": 3, "max_new_tokens": 3, "lr": 1e-2}
    learner, batch, _ = _fixed_rollout(completions, base | config)
    with torch.no_grad():
        own = rz("learner").completion_logprobs(
            learner.policy,
            batch.input_ids,
            batch.attention_mask,
            batch.completion_mask.size(1),
            learner.cfg.temperature,
        )
    batch.old_logp = own * batch.completion_mask
    loss, stats = learner.learn(batch)
    params = torch.cat([p.detach().flatten() for p in learner.policy.parameters()])
    return {"loss": loss, "stats": stats, "params": params}


@probe("ratio.second_pass", "ratio")
def _():
    return _learned({"passes": 2, "lr": 5e-2})


@probe("update.one_pass", "update")
def _():
    return _learned({"passes": 1})


@probe("update.accumulated", "update")
def _():
    """One optimizer step run as two micro-batches: the step the whole rollout's gradient takes."""
    return _learned({"passes": 1, "grad_accum_steps": 2})


@probe("update.accumulated_token_mean", "update")
def _():
    """The same with a token-mean loss ("dapo"): the two micro-batches count different numbers of
    tokens, and the step still normalises by the whole step's count."""
    return _learned({"passes": 1, "grad_accum_steps": 2, "loss_type": "dapo"})


@probe("kl.learner", "kl")
def _():
    return _learned({"passes": 2, "kl_coef": 0.05, "lr": 5e-2})


@probe("kl.accumulated", "kl")
def _():
    """Two passes, each one optimizer step run as two micro-batches, with a KL penalty (nonzero
    from the second pass on): the penalty weighs against the policy loss as in a step taken
    whole."""
    return _learned({"passes": 2, "grad_accum_steps": 2, "kl_coef": 0.05, "lr": 5e-2})


@probe("kl.tempered", "kl")
def _():
    """Two passes with a KL penalty at sampling temperature 0.7: the reference is the initial
    policy at the temperature the run samples and scores at, so the first step's KL is 0."""
    return _learned({"passes": 2, "kl_coef": 0.05, "lr": 5e-2, "temperature": 0.7})


@probe("reference_model.frozen_copy", "reference_model")
def _():
    policy, _ = _tiny(2, pad_is_eos=False)
    inputs = torch.tensor([[3, 4, 13, 5]])
    before = policy(input_ids=inputs).logits.detach()
    reference = rz("learner").frozen_copy(policy)
    same_outputs = bool(torch.allclose(reference(input_ids=inputs).logits, before, atol=1e-6))
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.05)
    return {
        "same_outputs": same_outputs,
        "unaffected_by_policy_update": bool(
            torch.allclose(reference(input_ids=inputs).logits, before, atol=1e-6)
        ),
        "frozen": all(not p.requires_grad for p in reference.parameters()),
        "eval_mode": not reference.training,
        "policy_still_trainable": all(p.requires_grad for p in policy.parameters()),
    }


@probe("reference_model.config_sync", "reference_model")
def _():
    """The configured reference sync: how often and how far (a run that sets none gets these)."""
    cfg = _config()
    return [cfg.ref_sync_every, cfg.ref_sync_alpha]


@probe("reference_model.learner", "reference_model")
def _():
    """The learner's reference stays the initial policy while the policy learns."""
    out = _learned({"passes": 2, "kl_coef": 0.05, "lr": 5e-2})
    return out["stats"]


# --- generation ---------------------------------------------------------------------------------
def _sampling_arguments(group_size: int, max_new_tokens: int, temperature: float) -> dict:
    """`sample_groups`'s arguments after the prompts, by name: a fix that puts back a parameter a
    bug removed (the temperature) may put it anywhere in the list."""
    return {
        "group_size": group_size,
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "eos_id": EOS,
        "pad_id": EOS,
    }


def _sampled(weight_scale: float, temperature: float, seed: int = 0):
    model, tokenizer = _tiny(5, weight_scale)
    model.eval()
    prompt_ids = torch.tensor([[EOS, 3, 13], [5, 6, 13], [9, 9, 13]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [1, 1, 1]])
    torch.manual_seed(seed)
    sampling = rz("sampling")
    return sampling.sample_groups(
        model, prompt_ids, prompt_mask, **_sampling_arguments(3, 5, temperature)
    )


@probe("generation.groups_contiguous", "generation")
def _():
    """Near-argmax sampling of a model that answers each prompt differently: rows g*G .. g*G+G-1
    hold prompt g's completion, and after EOS only the pad."""
    return _sampled(8.0, 1e-4)


@probe("generation.samples", "generation")
def _():
    completions, _ = _sampled(1.0, 1.0)
    return [len({tuple(r.tolist()) for r in completions[g * 3 : g * 3 + 3]}) > 1 for g in range(3)]


# --- running ------------------------------------------------------------------------------------
def observe(stages: list[str], only: list[str] | None = None) -> dict:
    """Run every probe of `stages` (and those named in `only`) on the rlzero importable now; an
    exception becomes an {"error": ...} observation."""
    seen = {}
    for name, (stage, fn) in PROBES.items():
        if stage not in stages and name not in (only or ()):
            continue
        try:
            seen[name] = fn()
        except Exception as error:  # the candidate's bug, reported, never fatal
            seen[name] = {"error": f"{type(error).__name__}: {error}"[:200]}
    return seen


def main(job: dict) -> None:
    """The child's side: observe the workspace's rlzero and write the observations as JSON."""
    import plain

    torch.set_num_threads(1)
    plain.dump(observe(job["stages"], job.get("probes")), job["out"])


if __name__ == "__main__":
    sys.exit("run by verify.py")
