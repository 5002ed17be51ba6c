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
import inspect
import sys
from collections.abc import Callable

import torch

PROBES: dict[str, tuple[str, Callable]] = {}
# The probes that take the verifier's inputs (INPUTS): what they see depends on them.
GIVEN: set[str] = set()
EOS, PAD = 1, 0


def probe(name: str, stage: str, given: bool = False):
    def register(fn: Callable) -> Callable:
        PROBES[name] = (stage, fn)
        if given:
            GIVEN.add(name)
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


def _first_id_or_none(prompts, completions, completion_ids, **_):
    """`_length_or_none` read from the first token only, which every masking rule counts: a
    masking bug left in does not reach the rewards it gives."""
    return [
        None if p.startswith("A") else 0.1 * ids[0] if len(ids) else 0.0
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


# Two groups whose rewards barely differ (std 2^-11 and 3 * 2^-11), where the epsilon's place
# decides the advantages: with 1e-6 on the std they are about +-1, under the root about +-0.44.
# Dyadic rewards, exact in float32, so the centred values are exact and a trainer that computes
# its statistics in float64 agrees with one in float32 far inside the judge's tolerance (with
# 1.001 the float32 rounding alone moved them by 1e-4, as much as the tolerance).
LOW_VARIANCE = torch.tensor([1.0, 1.0 + 2**-10, 2.0, 2.0 + 3 * 2**-10])


@probe("advantages.low_variance", "advantages")
def _():
    return rz("advantages").group_advantages(LOW_VARIANCE, 2)


@probe("advantages.unscored", "advantages")
def _():
    return rz("advantages").group_advantages(torch.tensor([NAN, 1.0, 0.0, 1.0, 5, 5, 5, 5]), 4)


@probe("advantages.config_eps", "advantages")
def _():
    eps = _config().adv_eps
    return rz("advantages").group_advantages(LOW_VARIANCE, 2, eps)


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


def _counted_tokens(completion_ids: torch.Tensor) -> torch.Tensor:
    """`completion_tokens_mask` of `completion_ids`, whose pad is the EOS, given that id under
    each of the names `eos_id` and `pad_id` the function takes (positionally if it takes
    neither): a fix that adds an `eos_id` beside a bug's `pad_id` is asked about the EOS by
    name, as its own callers ask it."""
    mask_fn = rz("sampling").completion_tokens_mask
    names = inspect.signature(mask_fn).parameters
    by_name = {name: EOS for name in ("eos_id", "pad_id") if name in names}
    return mask_fn(completion_ids, **by_name) if by_name else mask_fn(completion_ids, EOS)


@probe("masking.tokens", "masking")
def _():
    return _counted_tokens(PADDED)


ROLLOUT_ROWS = [{"prompt": "1 =", "answer": "2"}, {"prompt": "A =", "answer": "7"}]


def _fixed_rollout(
    completions: torch.Tensor,
    config: dict,
    seed: int = 4,
    rows: list[dict] = ROLLOUT_ROWS,
    reward_fns: list[Callable] | None = None,
    other: Callable | None = _length_or_none,
):
    """Learner.rollout of `rows` with sampling replaced by `completions` (as the sampler would
    return them for those prompts), so every later step of the rollout is deterministic; scored
    by `reward_fns` (default: the prompt's answer, recorded, and `other` if any)."""
    learner_module = rz("learner")
    model, tokenizer = _tiny(seed)
    seen = {}

    def recorded(prompts, completions, completion_ids, answer, **_):
        seen.setdefault("completion_ids", [list(ids) for ids in completion_ids])
        seen.setdefault("prompts", list(prompts))
        seen.setdefault("answers", list(answer))
        seen.setdefault("completions", list(completions))
        return _answers(prompts, completions, completion_ids, answer)

    cfg = _config(**config)
    reward_fns = reward_fns or [recorded] + ([other] if other else [])
    learner = learner_module.Learner(cfg, model, tokenizer, reward_fns)
    return learner, _rollout_of(learner, completions, seed, rows), seen


def _rollout_of(learner, completions: torch.Tensor, seed: int, rows: list[dict]):
    """`learner.rollout(rows)` with sampling replaced by `completions`."""
    learner_module = rz("learner")
    sampled_logp = -torch.rand(completions.shape, generator=_gen(seed))
    original = learner_module.sample_groups
    learner_module.sample_groups = lambda *args, **kwargs: (completions.clone(), sampled_logp)
    try:
        return learner.rollout([dict(row) for row in rows])
    finally:
        learner_module.sample_groups = original


# Two prompts, G = 3: token 4 is "2", 9 is "7", 1 is EOS (and the pad).
ROLLOUT_COMPLETIONS = torch.tensor(
    [[4, 1, 1], [5, 4, 1], [4, 4, 4], [9, 1, 1], [1, 1, 1], [9, 9, 1]]
)


@probe("masking.rollout", "masking")
def _():
    """The counted tokens of a rollout, what the reward function is handed and what it gives:
    one function, so how several are mixed (the rewards stage's) does not reach this."""
    _, batch, seen = _fixed_rollout(
        ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3}, other=None
    )
    return {
        "completion_mask": batch.completion_mask,
        "attention_mask": batch.attention_mask,
        "reward_ids": seen["completion_ids"],
        "rewards": batch.rewards,
    }


# Two prompts, G = 4: rows 1, 3, 5 and 7 never produce EOS (token 1) and are cut at the budget.
TRUNCATED_COMPLETIONS = torch.tensor(
    [[4, 1, 1], [4, 4, 4], [5, 4, 1], [5, 5, 5], [9, 1, 1], [9, 9, 9], [1, 1, 1], [7, 7, 7]]
)


@probe("masking.truncated_rows", "masking")
def _():
    """With `mask_truncated` the rows cut at the budget leave the loss, and only the loss (TRL's
    mask_truncated_completions zeroes their completion mask, gt:L2492, and scores every
    completion, gt:L2753): their rewards still count in their group's mean. One reward function
    returns given rewards and the advantages are mean-only, so neither the rewards' nor the
    advantages' stage reaches this."""
    _, batch, _ = _fixed_rollout(
        TRUNCATED_COMPLETIONS,
        {
            "group_size": 4,
            "max_new_tokens": 3,
            "mask_truncated": True,
            "advantage_estimator": "mean_only",
        },
        rows=ROLLOUT_ROWS,
        reward_fns=_given([1.0, 0.5, 0.0, 0.25, 1.0, 0.0, 0.5, 0.75]),
    )
    return {"left_out": batch.left_out, "advantages": batch.advantages}


@probe("generation.rollout_pairs", "generation")
def _():
    """Each completion is scored after the prompt it was sampled for (rows g*G .. g*G + G - 1)."""
    _, batch, _ = _fixed_rollout(ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
    return batch.input_ids


@probe("rewards.rollout", "rewards")
def _():
    """Each completion is judged with its own prompt's row: the rewards of a rollout and the
    prompts and answers the reward functions were handed."""
    _, batch, seen = _fixed_rollout(
        ROLLOUT_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3}, other=_first_id_or_none
    )
    return {"rewards": batch.rewards, "prompts": seen["prompts"], "answers": seen["answers"]}


# --- rollout (advantages and old log-probs as the loop computes them) ----------------------------
@probe("advantages.rollout", "advantages", given=True)
def _():
    """The advantages the rollout computes from its rewards (the configured estimator, epsilon
    and std), on the loop's rollout, whose one reward function returns the given rewards: how the
    rollout counts tokens or lays out reward rows is not this stage's."""
    given = INPUTS.get("loop") or loop_inputs()
    _, batch, _ = _fixed_rollout(
        LOOP_COMPLETIONS, LOOP_BASE, rows=LOOP_ROWS, reward_fns=_given(given["rewards"])
    )
    return batch.advantages


# Two prompts, G = 3, every completion cut at the length limit (no EOS): every masking rule counts
# all of their tokens, so how the rollout counts tokens (masking.rollout) does not reach the old
# log-probs it keeps.
UNSTOPPED_COMPLETIONS = torch.tensor(
    [[4, 5, 4], [5, 4, 9], [4, 4, 4], [9, 9, 7], [7, 9, 9], [9, 9, 4]]
)


@probe("logprobs.rollout", "logprobs")
def _():
    """The rollout keeps the sampler's log-probs as the old policy's."""
    _, batch, _ = _fixed_rollout(UNSTOPPED_COMPLETIONS, {"group_size": 3, "max_new_tokens": 3})
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
    mask = _counted_tokens(completions)
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


@probe("ratio.sequence_level", "ratio")
def _():
    """GSPO's one ratio per completion (importance_level "sequence"), near the old policy and away
    from it: the loss, its gradient and the statistics."""
    return [
        _surrogate(seed, offset, importance_level="sequence")
        for seed, offset in ((11, 0.1), (12, 0.6))
    ]


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


@probe("clipping.dual_clip", "clipping")
def _():
    """Dual-clip PPO's second bound (`dual_clip` c = 2; arXiv:1912.09729) on ratios far from 1:
    a token whose advantage is negative loses at most -c * A, however large its ratio. The loss,
    its gradient and the statistics at two seeds whose negative row holds ratios of 4.7 and 2.6,
    then 4.9 and 2.0: past 1 + c, between c and 1 + c, and under c. The trust region is fixed
    (0.2, 0.28) rather than the config's, so a band changed against the task's conventions costs
    the decoy that guards it, not this bound's credit as well."""
    return [_surrogate(seed, 2.0, dual_clip=2.0, clip_low=0.2, clip_high=0.28) for seed in (31, 44)]


@probe("kl.penalty", "kl")
def _():
    """The KL term as the learner adds it: with the estimator the run's config names
    (`Learner.optimizer_step` passes `cfg.kl_estimator`), so a fix in the config alone is what the run
    computes, whatever `surrogate_loss`'s own default (a blind agent's fix of rz-succ-pairs)."""
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
        kl_estimator=_config().kl_estimator,
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
# The loop's rollout: one prompt, G = 6 ("1 =", answer "2"; token 4 is "2", 9 is "7", 1 is EOS and
# the pad). One prompt, so no question of how several prompts' rows are laid out (the generation
# and rewards stages' probes ask it) reaches the loop.
LOOP_ROWS = [{"prompt": "1 =", "answer": "2"}]
LOOP_COMPLETIONS = torch.tensor([[4, 1, 1], [5, 4, 1], [4, 4, 4], [9, 1, 1], [1, 1, 1], [4, 9, 1]])
LOOP_BASE = {"group_size": 6, "max_new_tokens": 3, "lr": 1e-2}
# The inputs of the probes that take any (observe's `inputs`): {"loop": loop_inputs()}.
INPUTS: dict = {}


def _scorers(record: list) -> list[Callable]:
    """The loop's reward functions, `_answers` and `_length_or_none`: each records what it
    returns in `record`."""

    def scorer(fn: Callable) -> Callable:
        def score(prompts, completions, completion_ids, **columns):
            values = fn(prompts, completions, completion_ids, **columns)
            record.append(list(values))
            return values

        return score

    return [scorer(fn) for fn in (_answers, _length_or_none)]


def loop_inputs() -> dict:
    """What the stages before the update make of the loop's rollout, on the rlzero importable now:
    the counted tokens (`completion_mask`), each row's reward, its reward functions' scores (with
    the counted tokens they are handed) mixed as the rollout mixes them (`rewards`, None for a row
    no function scored), and the rows the loss leaves out. The verifier computes them on the
    intended rlzero and passes them to both sides (the job's "inputs"), so a masking or reward bug
    left in the agent's rollout does not reach the loop probes of a stage it fixed; the child
    only uses them. The advantages are left to the learner: they carry the task's conventions
    (conventions.py)."""
    record: list = []
    _, batch, _ = _fixed_rollout(
        LOOP_COMPLETIONS, LOOP_BASE, rows=LOOP_ROWS, reward_fns=_scorers(record)
    )
    per_fn = torch.tensor([[NAN if v is None else float(v) for v in column] for column in record]).T
    mixed = rz("rewards").mix_rewards(per_fn, None).tolist()
    return {
        "completion_mask": batch.completion_mask,
        "rewards": [None if value != value else value for value in mixed],
        "left_out": batch.left_out,
    }


def _given(rewards: list) -> list[Callable]:
    """One reward function that returns `rewards` whatever it is handed: mixed alone with weight
    1, by a weighted sum or any weighted mean, it is the reward itself, so how the rollout mixes
    several functions (the rewards stage's) does not reach the probe."""

    def given(prompts, completions, completion_ids, **_):
        return list(rewards)

    return [given]


def _learned(config: dict) -> dict:
    """The loss, statistics and parameters after `_learn(config)`."""
    learner, loss, stats = _learn(config)
    params = torch.cat([p.detach().flatten() for p in learner.policy.parameters()])
    return {"loss": loss, "stats": stats, "params": params}


def _learn(config: dict, left_out: torch.Tensor | None = None):
    """`Learner.learn` on the loop's rollout as the learner's own `rollout` makes it (its input
    ids, rewards, advantages and reference log-probs: a bug in how the rollout scores the
    reference is the KL stage's), but with what the stages before it make given
    (`INPUTS["loop"]`, the intended rlzero's): one reward function returns the given rewards, and
    the counted tokens and rows left out are the given ones. Its old log-probs are the policy's
    own, scored as the learner scores them: the first pass's ratio is 1 whatever the trust
    region, and a fix that scores the old log-probs in a forward pass of its own (TRL's way
    without vLLM) sees what the sampler's log-probs give. So a loop probe sees its stage: no trust
    region, however written, clips a first pass (a task with a clipping bug and an update bug
    scores the update fix alone), no valid source of the old log-probs is mistaken for a bug, and
    a masking, reward or row-layout bug left in changes nothing here."""
    given = INPUTS.get("loop") or loop_inputs()
    learner, batch, _ = _fixed_rollout(
        LOOP_COMPLETIONS,
        LOOP_BASE | config,
        rows=LOOP_ROWS,
        reward_fns=_given(given["rewards"]),
    )
    mask = given["completion_mask"]
    n_new = mask.size(1)
    prompt_attention = batch.attention_mask[:, :-n_new]
    batch.completion_mask = mask.clone()
    batch.attention_mask = torch.cat([prompt_attention, mask.to(prompt_attention.dtype)], 1)
    if left_out is None:
        left_out = given["left_out"]
    batch.left_out = None if left_out is None else left_out.clone()
    with torch.no_grad():
        own = rz("learner").completion_logprobs(
            learner.policy, batch.input_ids, batch.attention_mask, n_new, learner.cfg.temperature
        )
    batch.old_logp = own * batch.completion_mask
    _step_with_sgd(learner)
    loss, stats = learner.learn(batch)
    return learner, loss, stats


def _step_with_sgd(learner) -> None:
    """Give `learner` plain SGD at its configured step size over the parameters its optimizer
    holds, and no step-size schedule (not a loop probe's concern). SGD's step is proportional
    to the gradient, so gradients that agree to float rounding give parameters that agree to
    float rounding. AdamW's first steps are about lr * sign(gradient) per coordinate
    (m / sqrt(v)): a coordinate whose gradient is rounding noise moves by the whole step one way
    or the other, and a right fix that computed the advantages in float64 moved 64 of 83,712
    parameters by up to 1.3e-3 after two passes."""
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    learner.optimizer = torch.optim.SGD(params, lr=learner.cfg.lr)
    learner.scheduler = None


# The loop's last two completions left out of the loss (as RunConfig.mask_truncated or
# skip_zero_std_groups leaves rows out); the advantages of the four kept ones do not sum to 0.
LOOP_LEFT_OUT = torch.tensor([False, False, False, False, True, True])


@probe("loss_aggregation.left_out_rows", "loss_aggregation", given=True)
def _():
    """The loss of one optimizer step with rows left out, for "grpo" and "dr_grpo": a left-out
    row still counts in the number of rows the sum is divided by (TRL averages over every row of
    the batch, a row with no counted token adding 0, gt:L3154; dr_grpo divides by every row
    times the budget). The first pass's ratio is 1 and the loop's completions have counted
    tokens, so the loss is a weighted sum of the kept rows' advantages whatever the log-probs
    are: how they are scored is not this stage's."""
    return [
        _learn({"passes": 1, "loss_type": loss_type}, left_out=LOOP_LEFT_OUT)[1]
        for loss_type in ("grpo", "dr_grpo")
    ]


@probe("ratio.second_pass", "ratio", given=True)
def _():
    return _learned({"passes": 2, "lr": 5e-2})


# The update probes take one SGD step of the clipped gradient (norm 1, the default bound): at step
# size 0.1 the largest parameter moves by about 1e-2, a thousand times the judge's tolerance.
@probe("update.one_pass", "update", given=True)
def _():
    return _learned({"passes": 1, "lr": 0.1})


@probe("update.accumulated", "update", given=True)
def _():
    """One optimizer step run as two micro-batches: the step the whole rollout's gradient takes."""
    return _learned({"passes": 1, "grad_accum_steps": 2, "lr": 0.1})


@probe("update.accumulated_token_mean", "update", given=True)
def _():
    """The same with a token-mean loss ("dapo"): the two micro-batches count different numbers of
    tokens, and the step still normalises by the whole step's count."""
    return _learned({"passes": 1, "grad_accum_steps": 2, "loss_type": "dapo", "lr": 0.1})


@probe("update.accumulated_clipped", "update", given=True)
def _():
    """One step run as two micro-batches with a gradient-norm bound that every step's gradient
    exceeds: the whole step's gradient is clipped, so the step follows its direction (a step of
    norm 1e-2 at step size 10)."""
    return _learned({"passes": 1, "grad_accum_steps": 2, "max_grad_norm": 1e-3, "lr": 10.0})


# The KL probes take one pass over the rollout as two optimizer steps (the penalty is 0 at the first,
# nonzero at the second): a first pass's old log-probs are the policy's own however a fix sources
# them, so how the old policy is kept across passes (the ratio stage's) does not reach them. The
# second step's ratio is off 1, so they name the trust region themselves (KL_BAND): a band set
# against the task's conventions is the clipping stage's (and its decoy's), not the KL's.
KL_BAND = {"clip_low": 0.2, "clip_high": 0.28}


@probe("kl.learner", "kl", given=True)
def _():
    return _learned({"minibatches": 2, "kl_coef": 0.05, "lr": 5e-2} | KL_BAND)


@probe("kl.accumulated", "kl", given=True)
def _():
    """Two optimizer steps, each run as two micro-batches, with a KL penalty (nonzero from the
    second step on): the penalty weighs against the policy loss as in a step taken whole. No
    gradient-norm bound reached (how a step's gradient is clipped is the update stage's)."""
    return _learned(
        {"minibatches": 2, "grad_accum_steps": 2, "kl_coef": 0.05, "lr": 5e-2, "max_grad_norm": 1e6}
        | KL_BAND
    )


@probe("kl.tempered", "kl", given=True)
def _():
    """Two optimizer steps with a KL penalty at sampling temperature 0.7: the reference is the
    initial policy at the temperature the run samples and scores at, so the first step's KL is
    0."""
    return _learned({"minibatches": 2, "kl_coef": 0.05, "lr": 5e-2, "temperature": 0.7} | KL_BAND)


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


@probe("reference_model.learner", "reference_model", given=True)
def _():
    """The learner's reference stays the initial policy while the policy learns: its log-probs of
    the loop's completions as the learner's next rollout scores them, after two passes with a KL
    penalty. Read from the reference itself, not from the KL the learner logs, so a bug of the
    objective or of the passes left in changes nothing here."""
    learner, _, _ = _learn({"passes": 2, "kl_coef": 0.05, "lr": 5e-2})
    again = _rollout_of(learner, LOOP_COMPLETIONS, 4, LOOP_ROWS)
    mask = (INPUTS.get("loop") or loop_inputs())["completion_mask"]
    return again.ref_logp * mask  # positions after a completion's end may hold anything


@probe("reference_model.soft_sync", "reference_model")
def _():
    """The reference pulled towards a policy by a sync at the configured `ref_sync_alpha`, then
    at 0.25: the reference's parameters after each (the two models differ in every matrix)."""
    reference, _ = _tiny(2, pad_is_eos=False)
    policy, _ = _tiny(3, pad_is_eos=False)
    after = []
    for alpha in (_config().ref_sync_alpha, 0.25):
        rz("reference").sync_reference(reference, policy, alpha)
        after.append(torch.cat([p.detach().flatten() for p in reference.parameters()]))
    return after


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
def observe(stages: list[str], only: list[str] | None = None, inputs: dict | None = None) -> dict:
    """Run every probe of `stages` (and those named in `only`) on the rlzero importable now; an
    exception becomes an {"error": ...} observation. `inputs` are those of the probes that take
    any ({"loop": loop_inputs()} of the intended rlzero); without them, the rlzero importable now
    makes its own."""
    INPUTS.clear()
    INPUTS.update(inputs or {})
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
    inputs = plain.decode(job["inputs"]) if "inputs" in job else None
    plain.dump(observe(job["stages"], job.get("probes"), inputs), job["out"])


if __name__ == "__main__":
    sys.exit("run by verify.py")
