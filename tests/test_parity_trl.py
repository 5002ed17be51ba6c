"""`reference_impl` reproduces TRL 1.16's `GRPOTrainer` on tensors captured from real runs.

Each config below is one `GRPOTrainer.train()` of two optimizer steps on the tiny model, captured
by `trl_harness.CapturingGRPOTrainer`. Every stage is then recomputed with `reference_impl`:

- masking:    `completion_mask(completion_ids)` equals TRL's mask exactly;
- advantages: `compute_advantages(combine_rewards(rewards_per_func))` within 1e-6;
- logprobs:   `get_per_token_logps` on a never-prepared fp32 copy with the same weights, on
              mask == 1, within 1e-5 (policy, old and reference log-probs);
- loss:       `compute_loss` on TRL's own log-probs within 1e-6, and dL/dlogp within 1e-7;
              end to end from our own log-probs within rtol 1e-5.

How TRL's normalisation maps onto the protocol (P = GA = S = 1). Every run uses one process and
`gradient_accumulation_steps=1`, so TRL's extra `/ GA` (gt:L3153-3167) is 1. Off-policy regimes
come from `num_iterations=2` (GA % (S * mu) != 0, so TRL stores old log-probs, gt:L2642) or from
`steps_per_generation=2`, where one generation batch is split into two micro-batches; dapo and
cispo then divide by N * GA / S (gt:L3170-3172), which `trl_harness.protocol_num_items` passes as
`num_items_in_batch`. TRL shuffles rows before splitting (gt:L1543), so the loss is compared per
captured micro-batch and the advantages on the pre-shuffle batch.

A fixture only tells right from wrong if the formulas it separates give different numbers
`eos_bias` gives unequal completion lengths, T = 0.7 in most configs, reward
functions return None for some rows and for a whole row, and `test_fixture_has_*` fails if a run
loses one of these properties.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from datasets import Dataset
from trl_harness import IndependentScorer, TRLCapture, protocol_loss_kwargs, run_trl

from reference_impl import combine_rewards, completion_mask, compute_advantages, compute_loss
from reference_impl.protocol import LOSS_TYPES
from reference_impl.tiny import TinySpec, tiny_model_path

pytestmark = pytest.mark.xdist_group("trl")

# 0.2 on the EOS logit: lengths 1..8 of max 8 with T = 0.7, a quarter of them truncated (measured).
EOS_BIAS = 0.2
G = 4
MAX_COMPLETION_LENGTH = 8
PROMPTS = ["1 =", "1 + 2 =", "A B B ="]  # three lengths, so prompts are left-padded
UNSCORED_PROMPT = PROMPTS[0]
REWARD_WEIGHTS = [1.0, 0.5]

ADVANTAGE_ATOL = 1e-6
LOGP_ATOL = 1e-5
LOSS_ATOL = 1e-6
GRAD_ATOL = 1e-7
END_TO_END_RTOL = 1e-5


def first_word_reward(prompts, completions, completion_ids, **_) -> list[float | None]:
    """1 when the completion starts with a letter word (A or B); None for the second completion
    of UNSCORED_PROMPT. The position in the group stands in for a verifier that cannot score some
    completions. Content, not length, is rewarded: a length reward drives every completion to the
    maximum within one step and the lengths stop differing."""
    return [
        None if prompt == UNSCORED_PROMPT and index % G == 1 else float(text[:1] in ("A", "B"))
        for index, (prompt, text) in enumerate(zip(prompts, completions, strict=True))
    ]


def digit_reward(prompts, completions, completion_ids, **_) -> list[float | None]:
    """Fraction of digit words; None for every second completion of a group.

    With `first_word_reward` this leaves one row of UNSCORED_PROMPT with no reward at all (NaN, so
    advantage 0) and one row in each other group scored by `first_word_reward` alone."""
    rewards: list[float | None] = []
    for index, text in enumerate(completions):
        words = text.split()
        digits = sum(word.isdigit() for word in words)
        rewards.append(None if index % G == 1 else digits / max(len(words), 1))
    return rewards


BASE = {
    "num_generations": G,
    "per_device_train_batch_size": G * len(PROMPTS),
    "max_completion_length": MAX_COMPLETION_LENGTH,
    "max_steps": 2,
    "learning_rate": 3e-4,
    "temperature": 0.7,
    "reward_weights": REWARD_WEIGHTS,
    "seed": 0,
}

# name -> GRPOConfig overrides. "offpolicy" means old log-probs exist and ratios differ from 1.
CONFIGS: dict[str, dict] = {
    "dapo-onpolicy-defaults": {"loss_type": "dapo", "temperature": 1.0},
    "grpo-onpolicy-kl": {"loss_type": "grpo", "beta": 0.04},
    "bnpo-offpolicy-kl-nocorrection-batch": {
        "loss_type": "bnpo",
        "num_iterations": 2,
        "beta": 0.04,
        "use_bias_correction_kl": False,
        "scale_rewards": "batch",
    },
    "dr_grpo-offpolicy-masktruncated-none": {
        "loss_type": "dr_grpo",
        "num_iterations": 2,
        "scale_rewards": "none",
        "mask_truncated_completions": True,
    },
    "dapo-offpolicy-spg2-cliphigh": {
        "loss_type": "dapo",
        "steps_per_generation": 2,
        "per_device_train_batch_size": G * len(PROMPTS) // 2,
        "epsilon_high": 0.28,
    },
    "cispo-offpolicy": {"loss_type": "cispo", "num_iterations": 2, "epsilon_high": 1.2},
    "sapo-offpolicy-kl": {"loss_type": "sapo", "num_iterations": 2, "beta": 0.04},
    "gspo-offpolicy-kl": {
        "loss_type": "grpo",
        "num_iterations": 2,
        "importance_sampling_level": "sequence",
        "beta": 0.04,
    },
    "grpo-offpolicy-delta": {"loss_type": "grpo", "num_iterations": 2, "delta": 1.5},
}
OFF_POLICY = [name for name, config in CONFIGS.items() if "offpolicy" in name]


@pytest.fixture(scope="module")
def model_path():
    return tiny_model_path(TinySpec(eos_bias=EOS_BIAS))


@pytest.fixture(scope="module")
def scorer(model_path) -> IndependentScorer:
    return IndependentScorer(model_path)


@pytest.fixture(scope="module")
def initial_weights(model_path) -> dict[str, torch.Tensor]:
    """The weights on disk: TRL reloads its reference model from there (gt:L1003)."""
    return {
        name: value.clone()
        for name, value in IndependentScorer(model_path).model.state_dict().items()
    }


@dataclass
class ParityRun:
    name: str
    capture: TRLCapture

    @property
    def off_policy(self) -> bool:
        return self.name in OFF_POLICY


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, model_path) -> ParityRun:
    """One captured `train()` per config, shared by every test of that config."""
    capture = run_trl(
        model_path,
        [first_word_reward, digit_reward],
        Dataset.from_dict({"prompt": PROMPTS}),
        **{**BASE, **CONFIGS[request.param]},
    )
    return ParityRun(request.param, capture)


def _max_diff(ours: torch.Tensor, theirs: torch.Tensor, where: torch.Tensor) -> float:
    keep = where.bool()
    return (ours[keep] - theirs[keep]).abs().max().item()


def _reference_loss(run: ParityRun, inputs: dict, per_token_logps: torch.Tensor) -> torch.Tensor:
    return compute_loss(
        per_token_logps,
        inputs["advantages"],
        inputs["completion_mask"],
        **protocol_loss_kwargs(run.capture.args, inputs),
    )


def _loss_and_grad(run: ParityRun, inputs: dict, per_token_logps: torch.Tensor):
    leaf = per_token_logps.detach().clone().requires_grad_(True)
    loss = _reference_loss(run, inputs, leaf)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


# --- the fixture exercises what it must ------------------------------------------------------


def test_fixture_has_unequal_lengths_and_truncation(run):
    """Equal lengths make grpo, bnpo, dr_grpo and dapo agree; truncated rows drive
    `mask_truncated_completions`."""
    for generation in run.capture.generations:
        ids = generation.batch["completion_ids"]
        has_eos = torch.isin(ids, torch.tensor(run.capture.eos_token_ids)).any(1)
        lengths = torch.where(has_eos, (generation.batch["completion_mask"].sum(1)), ids.size(1))
        assert len(set(lengths.tolist())) >= 3, f"completion lengths {lengths.tolist()}"
        assert has_eos.any() and not has_eos.all(), f"EOS per row {has_eos.tolist()}"


def test_fixture_has_unscorable_rows(run):
    """A function returns None for some rows, and every function for one row."""
    for generation in run.capture.generations:
        is_nan = generation.rewards_per_func.isnan()
        assert is_nan.any(1).sum() > is_nan.all(1).sum() > 0, f"NaN rewards {is_nan.tolist()}"


def test_fixture_offpolicy_ratios_move(run):
    """Off-policy configs store old log-probs and reach ratios far from 1, so clipping, delta and
    the cispo cap are all exercised; on-policy configs store none (gt:L2642)."""
    steps = run.capture.micro_steps
    if not run.off_policy:
        assert all("old_per_token_logps" not in step.inputs for step in steps)
        return
    ratios = torch.cat(
        [
            (step.per_token_logps - step.inputs["old_per_token_logps"]).exp()[
                step.inputs["completion_mask"].bool()
            ]
            for step in steps
        ]
    )
    assert ratios.max() > 1.5 and ratios.min() < 0.5, f"ratios in [{ratios.min()}, {ratios.max()}]"


# --- stage by stage parity -------------------------------------------------------------------


def test_completion_mask_matches(run):
    """First EOS kept, everything after it dropped; truncated rows zeroed on request (gt:L1880, L2490)."""
    for generation in run.capture.generations:
        ours = completion_mask(
            generation.batch["completion_ids"],
            run.capture.eos_token_ids,
            run.capture.args.mask_truncated_completions,
        )
        assert torch.equal(ours, generation.batch["completion_mask"].int())


def test_advantages_match(run):
    """Weighted nansum of the rewards, then group-relative advantages (gt:L2759-2810)."""
    args = run.capture.args
    for generation in run.capture.generations:
        rewards = combine_rewards(generation.rewards_per_func, args.reward_weights)
        ours = compute_advantages(rewards, args.num_generations, args.scale_rewards)
        theirs = generation.batch["advantages"]
        assert (ours - theirs).abs().max() <= ADVANTAGE_ATOL, f"{ours} vs {theirs}"


def test_policy_logps_match(run, scorer):
    """Fused-head log-probs equal log_softmax(logits / T) of a plain fp32 forward on mask == 1."""
    for step in run.capture.micro_steps:
        inputs = step.inputs
        ours = scorer.logps(
            step.weights,
            inputs["prompt_ids"],
            inputs["prompt_mask"],
            inputs["completion_ids"],
            inputs["completion_mask"],
            run.capture.args.temperature,
        )
        diff = _max_diff(ours, step.per_token_logps, inputs["completion_mask"])
        assert diff <= LOGP_ATOL, f"max |logp diff| {diff:.3g}"


def test_old_and_ref_logps_match(run, scorer, initial_weights):
    """Old log-probs use the weights at generation time; reference ones the weights on disk."""
    for generation in run.capture.generations:
        batch = generation.batch
        tokens = (
            batch["prompt_ids"],
            batch["prompt_mask"],
            batch["completion_ids"],
            batch["completion_mask"],
        )
        temperature = run.capture.args.temperature
        for key, weights in (
            ("old_per_token_logps", generation.weights),
            ("ref_per_token_logps", initial_weights),
        ):
            if key in batch:
                ours = scorer.logps(weights, *tokens, temperature)
                diff = _max_diff(ours, batch[key], batch["completion_mask"])
                assert diff <= LOGP_ATOL, f"{key}: max diff {diff:.3g}"


def test_loss_and_gradient_match(run):
    """The loss from TRL's own log-probs, and dL/dlogp, at the parity tolerances."""
    for step in run.capture.micro_steps:
        loss, grad = _loss_and_grad(run, step.inputs, step.per_token_logps)
        assert (loss - step.loss).abs() <= LOSS_ATOL, (
            f"loss {loss.item()} vs TRL {step.loss.item()}"
        )
        grad_diff = (grad - step.grad).abs().max().item()
        assert grad_diff <= GRAD_ATOL, f"max |dL/dlogp diff| {grad_diff:.3g}"


def test_loss_end_to_end(run, scorer):
    """The loss from our own log-probs, advantages and mask, relative to TRL's."""
    args = run.capture.args
    for step in run.capture.micro_steps:
        inputs = step.inputs
        logps = scorer.logps(
            step.weights,
            inputs["prompt_ids"],
            inputs["prompt_mask"],
            inputs["completion_ids"],
            inputs["completion_mask"],
            args.temperature,
        )
        loss = _reference_loss(run, inputs, logps)
        assert torch.allclose(loss, step.loss, rtol=END_TO_END_RTOL, atol=LOSS_ATOL), (
            f"loss {loss.item()} vs TRL {step.loss.item()}"
        )


def _loss_variants(args, off_policy: bool) -> dict[str, dict]:
    """`compute_loss` keyword changes that the fixture must tell apart from TRL's config.

    True identities are not variants: dapo and bnpo agree exactly when one micro-batch is the
    whole generation batch, and on policy the sequence-level ratio has the token-level
    gradient (each token gets -A/N either way)."""
    one_micro_batch = args.steps_per_generation == 1
    variants = {
        f"loss_type={other}": {"loss_type": other}
        for other in LOSS_TYPES
        if other != args.loss_type
        and not (one_micro_batch and {other, args.loss_type} == {"dapo", "bnpo"})
    }
    if off_policy:
        other_level = "sequence" if args.importance_sampling_level == "token" else "token"
        variants[f"importance_sampling_level={other_level}"] = {
            "importance_sampling_level": other_level
        }
    if args.delta is not None:
        variants["delta=None"] = {"delta": None}
    if args.epsilon_high is not None:
        variants["epsilon_high=None"] = {"epsilon_high": None}
    if args.beta != 0.0:
        variants["beta=0"] = {"beta": 0.0}
        flipped = not args.use_bias_correction_kl
        variants[f"use_bias_correction_kl={flipped}"] = {"use_bias_correction_kl": flipped}
    return variants


def test_fixture_tells_loss_options_apart(run):
    """Each other loss_type, and each option of this config switched off or flipped, misses TRL's
    loss or dL/dlogp by over 100x the tolerance: the parity above is not a coincidence of the data
    (on policy, for instance, the KL bias correction changes the gradient but not the loss)."""
    args = run.capture.args
    for variant, change in _loss_variants(args, run.off_policy).items():
        worst = 0.0
        for step in run.capture.micro_steps:
            leaf = step.per_token_logps.clone().requires_grad_(True)
            kwargs = {**protocol_loss_kwargs(args, step.inputs), **change}
            loss = compute_loss(
                leaf, step.inputs["advantages"], step.inputs["completion_mask"], **kwargs
            )
            (grad,) = torch.autograd.grad(loss, leaf)
            loss_miss = (loss.detach() - step.loss).abs().item() / LOSS_ATOL
            grad_miss = (grad - step.grad).abs().max().item() / GRAD_ATOL
            worst = max(worst, loss_miss, grad_miss)
        assert worst > 100, f"{variant} is within {worst:.3g} tolerances of TRL's {args.loss_type}"


def test_fixture_tells_advantage_and_temperature_options_apart(run, scorer):
    """Another scale_rewards moves the advantages, and scoring at T = 1 moves the log-probs,
    by over 100x their tolerances (a missing / T is TRL #3029)."""
    args = run.capture.args
    generation = run.capture.generations[0]
    rewards = combine_rewards(generation.rewards_per_func, args.reward_weights)
    for other in {"group", "batch", "none"} - {args.scale_rewards}:
        wrong = compute_advantages(rewards, args.num_generations, other)
        miss = (wrong - generation.batch["advantages"]).abs().max().item()
        assert miss > 100 * ADVANTAGE_ATOL, f"scale_rewards={other} is within {miss:.3g}"
    if args.temperature != 1.0:
        step = run.capture.micro_steps[0]
        inputs = step.inputs
        untempered = scorer.logps(
            step.weights,
            inputs["prompt_ids"],
            inputs["prompt_mask"],
            inputs["completion_ids"],
            inputs["completion_mask"],
            1.0,
        )
        miss = _max_diff(untempered, step.per_token_logps, inputs["completion_mask"])
        assert miss > 100 * LOGP_ATOL, f"scoring at T = 1 is within {miss:.3g}"
