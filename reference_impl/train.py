"""A GRPO training loop on the stage-protocol functions, in the order it runs (CleanRL style).

    generate G completions per prompt -> completion mask -> decode -> rewards -> group advantages
    -> old / reference log-probs -> num_iterations x (log-probs -> loss -> optimizer step)

Besides `train`, it exposes three optional trainer-level functions that `grpo-check` uses to
check the `generation`, `reference_model` and `update` stages of a from-scratch trainer:
`generate_completions`, `make_reference_model` and `grpo_step`.

Run it: `python -m reference_impl.train_cli --task succ` (every field below is an option; see `--help`).
"""

from __future__ import annotations

import copy
import inspect
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from reference_impl.advantages import compute_advantages
from reference_impl.decode import strip_reasoning
from reference_impl.errors import GRPOInputError
from reference_impl.kl import per_token_kl
from reference_impl.logprobs import get_per_token_logps
from reference_impl.loss import compute_loss
from reference_impl.masking import completion_mask
from reference_impl.protocol import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, SCALE_REWARDS
from reference_impl.rewards import combine_rewards
from reference_impl.tiny import TinySpec, load_tiny
from reference_impl.toy_tasks import TOY_TASKS, ToyTask


@dataclass
class TrainConfig:
    """Options of the reference loop. Defaults follow TRL 1.16's `GRPOConfig` unless a toy task
    overrides them (a value of None means "the task's measured value")."""

    task: str = "succ"
    """Toy task to learn; one of `reference_impl.toy_tasks.TOY_TASKS`."""
    seed: int = 0
    """Seeds sampling and the prompt order (the initial weights are seeded by `tiny.seed`)."""
    max_steps: int = 300
    """Upper bound on generation batches; training stops earlier once `target_fraction` is reached."""
    target_fraction: float = 0.9
    """Stop when the 10-step moving average of mean reward reaches this fraction of the maximum."""
    learning_rate: float | None = None
    """AdamW step size. TRL's default 1e-6 suits pretrained LLMs; a random tiny model needs ~1e-3."""
    prompts_per_step: int | None = None
    """Distinct prompts per generation batch."""
    num_generations: int | None = None
    """G, completions per prompt (TRL default 8). The group baseline needs G >= 2."""
    max_completion_length: int | None = None
    """Tokens sampled per completion at most (TRL default 512)."""
    temperature: float = 1.0
    """Sampling temperature; the same value divides the logits when scoring (TRL #3029)."""
    loss_type: str = "dapo"
    """Aggregation of the per-token loss (TRL 1.16 default "dapo")."""
    scale_rewards: str = "group"
    """Divide advantages by the group std ("group", default), the batch std ("batch") or not ("none")."""
    beta: float = 0.0
    """KL coefficient (TRL default 0.0 since v0.19); > 0 keeps a frozen copy of the initial policy."""
    epsilon: float = 0.2
    """Lower clip range: the ratio is clipped at 1 - epsilon."""
    epsilon_high: float | None = None
    """Upper clip range (None: epsilon); DAPO's clip-higher uses 0.28."""
    delta: float | None = None
    """Two-sided clipping cap on the unclipped ratio (None: off)."""
    importance_sampling_level: str = "token"
    """"token" ratios, or one "sequence" ratio per completion (GSPO)."""
    use_bias_correction_kl: bool = True
    """Multiply the KL by the importance ratio (TRL default True since v1.10)."""
    num_iterations: int = 1
    """Optimizer steps per generation batch (mu). > 1 makes the batch stale: old log-probs are stored."""
    mask_truncated_completions: bool = False
    """Drop completions that hit `max_completion_length` without EOS from the loss."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip, as in TRL's default."""
    reward_weights: list[float] | None = None
    """One weight per reward function (None: all 1.0)."""
    tiny: TinySpec = field(default_factory=TinySpec)
    """The tiny model to train."""

    def resolved(self) -> ResolvedConfig:
        """Fill task defaults and check every option; raises GRPOInputError with one line."""
        if self.task not in TOY_TASKS:
            raise GRPOInputError(f"unknown task {self.task!r}; choose one of {sorted(TOY_TASKS)}")
        toy = TOY_TASKS[self.task]
        config = ResolvedConfig(
            base=self,
            toy=toy,
            learning_rate=self.learning_rate or toy.learning_rate,
            prompts_per_step=self.prompts_per_step or toy.prompts_per_step,
            num_generations=self.num_generations or toy.num_generations,
            max_completion_length=self.max_completion_length or toy.max_completion_length,
        )
        config.validate()
        return config


@dataclass
class ResolvedConfig:
    """A TrainConfig with the toy task's values filled in."""

    base: TrainConfig
    toy: ToyTask
    learning_rate: float
    prompts_per_step: int
    num_generations: int
    max_completion_length: int

    def validate(self) -> None:
        base = self.base
        if base.loss_type not in LOSS_TYPES:
            raise GRPOInputError(f"loss_type must be one of {LOSS_TYPES}, got {base.loss_type!r}")
        if base.scale_rewards not in SCALE_REWARDS:
            raise GRPOInputError(
                f"scale_rewards must be one of {SCALE_REWARDS}, got {base.scale_rewards!r}"
            )
        if base.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise GRPOInputError(
                f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {base.importance_sampling_level!r}"
            )
        if self.num_generations < 2:
            raise GRPOInputError(
                f"num_generations must be at least 2 for a group baseline, got {self.num_generations}"
            )
        if not base.temperature > 0:
            raise GRPOInputError(f"temperature must be > 0, got {base.temperature}")
        if base.num_iterations < 1:
            raise GRPOInputError(f"num_iterations must be >= 1, got {base.num_iterations}")
        if self.prompts_per_step < 1 or self.max_completion_length < 1 or base.max_steps < 1:
            raise GRPOInputError(
                "prompts_per_step, max_completion_length and max_steps must be >= 1"
            )
        if self.learning_rate <= 0:
            raise GRPOInputError(f"learning_rate must be > 0, got {self.learning_rate}")


@dataclass
class StepStats:
    """What one generation batch produced."""

    step: int
    mean_reward: float
    loss: float
    mean_length: float
    kl: float | None = None


@dataclass
class TrainResult:
    """The reward history of a run and whether it reached its target."""

    history: list[StepStats]
    seconds: float
    reached_target: bool
    target: float
    max_reward: float

    @property
    def rewards(self) -> list[float]:
        return [s.mean_reward for s in self.history]


def moving_average(values: list[float], window: int = 10) -> float:
    tail = values[-window:]
    return sum(tail) / len(tail)


def _score(
    toy: ToyTask,
    prompts: list[str],
    completion_texts: list[str],
    completion_id_lists: list[list[int]],
    columns: dict[str, list],
    reward_weights: list[float] | None,
) -> torch.Tensor:
    """Call every reward function on the local rows; None becomes NaN; returns combined rewards [N]."""
    per_func = []
    for reward_func in toy.reward_funcs:
        values = reward_func(
            prompts=prompts,
            completions=completion_texts,
            completion_ids=completion_id_lists,
            **columns,
        )
        if len(values) != len(prompts):
            raise GRPOInputError(
                f"reward function {reward_func.__name__} returned {len(values)} rewards for {len(prompts)} completions"
            )
        per_func.append([math.nan if v is None else float(v) for v in values])
    rewards_per_func = torch.tensor(per_func, dtype=torch.float32).T  # [N, K]
    return combine_rewards(rewards_per_func, reward_weights)


def generate_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    num_generations: int,
    max_completion_length: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Stage `generation`: sample G completions per prompt; `[P, Lp] -> [P * G, T]`.

    Rows g*G .. g*G + G - 1 continue prompt g (contiguous groups, as TRL's RepeatSampler lays them
    out), sampled from softmax(logits / temperature) with top-k and top-p off (TRL 1.16 defaults);
    after a row's first EOS it holds `pad_token_id`.
    """
    if not temperature > 0:
        raise GRPOInputError(f"temperature must be > 0, got {temperature}")
    # A plain KV-cache sampling loop: transformers' generate() costs more per call than the
    # forward passes themselves on a model this small, and this loop says exactly what is sampled.
    # transformers renamed past_key_values to cache (5.2x); use whichever this model takes.
    cache_kwarg = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    eos = torch.tensor(list(eos_token_ids), device=prompt_ids.device)
    # Positions count real tokens only, so left padding does not shift them (as generate() does).
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        # Prefill each distinct prompt once, then give each of its G samples a copy of the cache.
        outputs = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = outputs.get("cache", outputs.get("past_key_values"))
        cache.batch_repeat_interleave(num_generations)
        next_logits = outputs.logits[:, -1].repeat_interleave(num_generations, dim=0)
        attention_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
        position = positions[:, -1:].repeat_interleave(num_generations, dim=0)
        finished = torch.zeros(attention_mask.size(0), dtype=torch.bool, device=prompt_ids.device)
        sampled = []
        for _ in range(max_completion_length):
            # x_t ~ softmax(z_t / T): the same temperature divides the logits when scoring.
            probs = torch.softmax(next_logits.float() / temperature, dim=-1)
            next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            next_tokens = torch.where(finished, pad_token_id, next_tokens)
            sampled.append(next_tokens)
            finished |= torch.isin(next_tokens, eos)
            if finished.all() or len(sampled) == max_completion_length:
                break
            attention_mask = torch.cat(
                [attention_mask, attention_mask.new_ones(finished.size(0), 1)], 1
            )
            position = position + 1
            outputs = model(
                input_ids=next_tokens.unsqueeze(1),
                attention_mask=attention_mask,
                position_ids=position,
                use_cache=True,
                logits_to_keep=1,
                **{cache_kwarg: cache},
            )
            cache = outputs.get("cache", outputs.get("past_key_values"))
            next_logits = outputs.logits[:, -1]
    return torch.stack(sampled, dim=1)


def make_reference_model(policy: torch.nn.Module) -> torch.nn.Module:
    """Stage `reference_model`: a frozen copy of the policy as it is now (pi_ref for the KL term)."""
    return copy.deepcopy(policy).eval().requires_grad_(False)


def grpo_step(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    rewards: torch.Tensor,
    *,
    num_generations: int,
    eos_token_ids: list[int],
    reference: torch.nn.Module | None = None,
    temperature: float = 1.0,
    num_iterations: int = 1,
    max_grad_norm: float = 1.0,
    metrics: dict[str, float] | None = None,
    **loss_kwargs,
) -> float:
    """Stage `update`: learn from one generation batch; returns the last loss.

    `prompt_ids`/`prompt_mask` are `[N, Lp]`, already repeated G times in contiguous groups;
    `completion_ids` `[N, T]`; `rewards` `[N]`, already combined. `loss_kwargs` go to
    `compute_loss`, except `scale_rewards` (advantages) and `mask_truncated_completions` (mask).
    When `metrics` is a dict, it receives `advantage_abs_mean` and, when beta != 0, `kl`: the
    masked token mean of the k3 KL in the last pass (TRL gt:L3259-3268 logs it after the ratio
    correction, which is the same value on policy).
    """
    scale_rewards = loss_kwargs.pop("scale_rewards", "group")
    mask_truncated = loss_kwargs.pop("mask_truncated_completions", False)
    beta = loss_kwargs.get("beta", 0.0)
    if beta != 0.0 and reference is None:
        raise GRPOInputError("beta != 0 needs a reference model (make_reference_model(policy))")
    if num_iterations < 1:
        raise GRPOInputError(f"num_iterations must be >= 1, got {num_iterations}")

    # Mask and advantages: tokens up to the first EOS; A_i = (r_i - mean_g) / (std_g + 1e-4).
    mask = completion_mask(completion_ids, eos_token_ids, mask_truncated)
    advantages = compute_advantages(rewards, num_generations, scale_rewards)

    # Old and reference log-probs, once per generation batch, without gradient.
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, mask], dim=1)
    num_tokens = completion_ids.size(1)
    with torch.no_grad():
        # On policy (mu = 1) old == current, so the loss uses logp.detach() instead (TRL gt:L3066).
        old_logps = (
            get_per_token_logps(policy, input_ids, attention_mask, num_tokens, temperature)
            if num_iterations > 1
            else None
        )
        ref_logps = (
            get_per_token_logps(reference, input_ids, attention_mask, num_tokens, temperature)
            if beta != 0.0
            else None
        )

    # mu optimizer steps on this batch: log-probs with gradient -> clipped surrogate -> AdamW.
    for _ in range(num_iterations):
        logps = get_per_token_logps(policy, input_ids, attention_mask, num_tokens, temperature)
        loss = compute_loss(
            logps,
            advantages,
            mask,
            old_per_token_logps=old_logps,
            ref_per_token_logps=ref_logps,
            **loss_kwargs,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
        optimizer.step()
    if metrics is not None:
        metrics["advantage_abs_mean"] = float(advantages.abs().mean())
        if ref_logps is not None:
            token_kl = per_token_kl(logps.detach(), ref_logps)
            metrics["kl"] = float((token_kl * mask).sum() / mask.sum().clamp(min=1))
    return float(loss.detach())


def train(
    config: TrainConfig, on_step: Callable[[StepStats, ResolvedConfig], None] | None = None
) -> TrainResult:
    """Train the tiny model on a toy task with GRPO; stops at the reward target or `max_steps`."""
    run = config.resolved()
    toy, G = run.toy, run.num_generations
    random.seed(config.seed)
    torch.manual_seed(config.seed)

    policy, tokenizer = load_tiny(config.tiny)
    eos_ids = list(policy.generation_config.eos_token_id)
    reference = make_reference_model(policy) if config.beta != 0.0 else None
    # As TRL's default optim adamw_torch_fused: one fused kernel, no weight decay (torch's
    # default is 0.01). betas (0.9, 0.99) as in the toy-task measurements.
    optimizer = torch.optim.AdamW(
        policy.parameters(), lr=run.learning_rate, betas=(0.9, 0.99), weight_decay=0.0, fused=True
    )
    dataset = toy.dataset().to_list()
    order: list[int] = []
    history: list[StepStats] = []
    target = config.target_fraction * toy.max_reward
    started = time.perf_counter()

    for step in range(config.max_steps):
        # Prompts: shuffled passes over the dataset, P distinct prompts per generation batch.
        while len(order) < run.prompts_per_step:
            order += random.sample(range(len(dataset)), len(dataset))
        rows = [dataset[i] for i in order[: run.prompts_per_step]]
        del order[: run.prompts_per_step]
        encoded = tokenizer(
            [row["prompt"] for row in rows],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )

        # 1. Generation: G completions per left-padded prompt, in contiguous groups of G rows.
        completion_ids = generate_completions(
            policy,
            encoded["input_ids"],
            encoded["attention_mask"],
            num_generations=G,
            max_completion_length=run.max_completion_length,
            eos_token_ids=eos_ids,
            pad_token_id=tokenizer.pad_token_id,
            temperature=config.temperature,
        )
        prompt_ids = encoded["input_ids"].repeat_interleave(G, dim=0)
        prompt_mask = encoded["attention_mask"].repeat_interleave(G, dim=0)
        prompts = [row["prompt"] for row in rows for _ in range(G)]
        columns = {
            key: [row[key] for row in rows for _ in range(G)] for key in rows[0] if key != "prompt"
        }

        # 2. Decode and reward: tokens up to the first EOS; the reward sees the answer after any
        #    reasoning block. Truncated rows are scored too, even when mask_truncated_completions
        #    later drops them from the loss (TRL decodes before it masks, gt:L2247 and gt:L2488).
        mask = completion_mask(completion_ids, eos_ids)
        lengths = mask.sum(dim=1).tolist()
        id_lists = [row[:n] for row, n in zip(completion_ids.tolist(), lengths, strict=True)]
        texts = [
            strip_reasoning(t) for t in tokenizer.batch_decode(id_lists, skip_special_tokens=True)
        ]
        rewards = _score(toy, prompts, texts, id_lists, columns, config.reward_weights)

        # 3. Update: advantages, old/ref log-probs and num_iterations optimizer steps.
        metrics: dict[str, float] = {}
        loss = grpo_step(
            policy,
            optimizer,
            prompt_ids,
            prompt_mask,
            completion_ids,
            rewards,
            num_generations=G,
            eos_token_ids=eos_ids,
            reference=reference,
            temperature=config.temperature,
            num_iterations=config.num_iterations,
            max_grad_norm=config.max_grad_norm,
            metrics=metrics,
            scale_rewards=config.scale_rewards,
            mask_truncated_completions=config.mask_truncated_completions,
            loss_type=config.loss_type,
            beta=config.beta,
            epsilon_low=config.epsilon,
            epsilon_high=config.epsilon_high,
            delta=config.delta,
            importance_sampling_level=config.importance_sampling_level,
            use_bias_correction_kl=config.use_bias_correction_kl,
            max_completion_length=run.max_completion_length,
        )

        stats = StepStats(
            step=step + 1,
            mean_reward=float(torch.nanmean(rewards)),
            loss=loss,
            mean_length=float(mask.sum(1).float().mean()),
            kl=metrics.get("kl"),
        )
        history.append(stats)
        if on_step is not None:
            on_step(stats, run)
        if len(history) >= 10 and moving_average([s.mean_reward for s in history]) >= target:
            break

    seconds = time.perf_counter() - started
    reached = len(history) >= 10 and moving_average([s.mean_reward for s in history]) >= target
    return TrainResult(history, seconds, reached, target, toy.max_reward)
