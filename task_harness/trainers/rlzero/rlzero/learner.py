"""The training loop: rollout -> advantages -> passes of optimizer steps, in the order it runs.

One rollout samples `group_size` completions for each of `prompts_per_step` prompts, scores them
and keeps the sampler's log-probs as the old policy's. Then `passes` times over the rollout, each
of its `minibatches` shares of rows is one optimizer step, run as `grad_accum_steps`
micro-batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlzero import checkpoint
from rlzero.advantages import estimate_advantages, group_reward_spread, uniform_groups
from rlzero.config import RunConfig
from rlzero.data import (
    PromptStream,
    check_dataset,
    decode_counted,
    encode_prompts,
    keep_last_tokens,
    render_prompts,
    reward_inputs,
    split_rows,
)
from rlzero.evaluation import evaluate
from rlzero.metrics import JsonLines, PassStats, StepLog, Stopwatch, lengths, reached
from rlzero.objective import surrogate_loss
from rlzero.reference import due_for_sync, frozen_copy, sync_reference
from rlzero.rewards import mix_rewards, reward_means, score_table
from rlzero.sampling import completion_tokens_mask, sample_groups, truncated_rows
from rlzero.scoring import completion_entropy, completion_logprobs, masked_mean
from rlzero.shaping import shape_rewards


def step_size_factor(done: int, warmup_steps: int, schedule: str, total: int) -> float:
    """The multiple of the configured step size at optimizer step `done` + 1 of `total`: rising
    linearly over `warmup_steps`, then constant, or decaying linearly or along a half cosine to 0
    at the last step."""
    if done < warmup_steps:
        return (done + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (done - warmup_steps) / max(1, total - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def step_size_schedule(optimizer, cfg: RunConfig):
    """The optimizer's step-size schedule (None for a constant step size without warm-up: the
    optimizer's own step size is left alone)."""
    if cfg.warmup_steps <= 0 and cfg.lr_schedule == "constant":
        return None
    total = cfg.optimizer_steps()
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: step_size_factor(done, cfg.warmup_steps, cfg.lr_schedule, total)
    )


@dataclass
class Rollout:
    """One batch of experience: prompts repeated G times, their completions and what they earned."""

    input_ids: torch.Tensor  # [N, Lp + T] prompt then completion
    attention_mask: torch.Tensor  # [N, Lp + T] prompt padding 0, counted completion tokens 1
    completion_mask: torch.Tensor  # [N, T]
    rewards: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    old_logp: torch.Tensor  # [N, T] log-probs of the policy that sampled, no gradient
    ref_logp: torch.Tensor | None = None  # [N, T] under the reference policy
    left_out: torch.Tensor | None = None  # [N] bool: rows the loss leaves out (config)
    stats: dict[str, float] = field(default_factory=dict)  # what the rollout logs

    def loss_mask(self) -> torch.Tensor:
        """The tokens the loss counts: the completion's, except in the rows left out."""
        if self.left_out is None:
            return self.completion_mask
        return self.completion_mask * (~self.left_out).int().unsqueeze(1)

    def select(self, rows: slice) -> Rollout:
        """The rollout's rows `rows`, every per-row tensor cut alike."""
        return Rollout(
            self.input_ids[rows],
            self.attention_mask[rows],
            self.completion_mask[rows],
            self.rewards[rows],
            self.advantages[rows],
            self.old_logp[rows],
            None if self.ref_logp is None else self.ref_logp[rows],
            None if self.left_out is None else self.left_out[rows],
        )


class Learner:
    """GRPO on a causal LM with a list of reward functions (TRL's reward signature)."""

    def __init__(self, cfg: RunConfig, model, tokenizer, reward_fns):
        if cfg.reward_weights is not None and len(cfg.reward_weights) != len(reward_fns):
            raise ValueError(
                f"{len(cfg.reward_weights)} reward weights for {len(reward_fns)} reward functions"
            )
        self.cfg = cfg
        self.policy = model
        self.tokenizer = tokenizer
        self.reward_fns = reward_fns
        self.reference = frozen_copy(model) if cfg.kl_coef != 0.0 else None
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = step_size_schedule(self.optimizer, cfg)

    def rollout(self, rows: list[dict]) -> Rollout:
        cfg, tok = self.cfg, self.tokenizer
        G = cfg.group_size
        enc = keep_last_tokens(
            encode_prompts(tok, render_prompts(rows, cfg.prompt_template)), cfg.max_prompt_tokens
        )
        completions, sampled_logp = sample_groups(
            self.policy,
            enc["input_ids"],
            enc["attention_mask"],
            G,
            cfg.max_new_tokens,
            cfg.temperature,
            tok.eos_token_id,
            tok.pad_token_id,
        )
        mask = completion_tokens_mask(completions, tok.eos_token_id)

        # What the reward functions see: the counted tokens of each completion.
        token_ids, texts = decode_counted(tok, completions, mask)
        prompts, columns = reward_inputs(rows, G)
        per_fn = score_table(self.reward_fns, prompts, texts, token_ids, columns)
        rewards = shape_rewards(
            mix_rewards(per_fn, cfg.reward_weights),
            mask.sum(1),
            cfg.max_new_tokens,
            cfg.overlong_buffer,
            cfg.overlong_weight,
        )
        advantages = estimate_advantages(rewards, G, cfg.advantage_estimator, cfg.adv_eps)

        input_ids = torch.cat([enc["input_ids"].repeat_interleave(G, 0), completions], 1)
        attention_mask = torch.cat([enc["attention_mask"].repeat_interleave(G, 0), mask], 1)
        # The sampler's own log-probs are the old policy's (no second forward pass, as with
        # vLLM-served rollouts).
        old_logp = sampled_logp * mask
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp = completion_logprobs(
                    self.reference, input_ids, attention_mask, completions.size(1), cfg.temperature
                )
        left_out = truncated_rows(completions, tok.eos_token_id) if cfg.mask_truncated else None
        if cfg.skip_zero_std_groups:
            flat = uniform_groups(rewards, G)
            left_out = flat if left_out is None else left_out | flat
        stats = group_reward_spread(rewards, G) | reward_means(per_fn, self.reward_fns)
        stats |= lengths(mask)
        if left_out is not None:
            stats["left_out"] = float(left_out.float().mean())
        if cfg.log_entropy:
            entropy = completion_entropy(
                self.policy, input_ids, attention_mask, completions.size(1), cfg.temperature
            )
            stats["entropy"] = masked_mean(entropy, mask)
        return Rollout(
            input_ids,
            attention_mask,
            mask,
            rewards,
            advantages,
            old_logp,
            ref_logp,
            left_out,
            stats,
        )

    def learn(self, batch: Rollout) -> tuple[float, dict[str, float]]:
        """`cfg.passes` passes over one rollout, `cfg.minibatches` optimizer steps each; the last
        step's loss, and statistics: the last step's, with `ratio_max` the largest ratio of any."""
        cfg = self.cfg
        ratio_max = 0.0
        for _ in range(cfg.passes):
            for rows in split_rows(batch.rewards.size(0), cfg.minibatches):
                loss, stats = self.optimizer_step(batch.select(rows))
                ratio_max = max(ratio_max, stats["ratio_max"])
        return loss, stats | {"ratio_max": ratio_max}

    def optimizer_step(self, batch: Rollout) -> tuple[float, dict[str, float]]:
        """One optimizer step on `batch`, run as `cfg.grad_accum_steps` micro-batches whose losses
        use the step's rows and tokens as their normaliser (objective.aggregate); the step's loss
        and its statistics, with the gradient norm before clipping."""
        cfg = self.cfg
        n_new = batch.completion_mask.size(1)
        loss_mask = batch.loss_mask()
        tokens = float(loss_mask.sum())
        gathered = PassStats()
        total = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        for rows in split_rows(loss_mask.size(0), cfg.grad_accum_steps):
            micro = batch.select(rows)
            logp = completion_logprobs(
                self.policy, micro.input_ids, micro.attention_mask, n_new, cfg.temperature
            )
            loss, stats = surrogate_loss(
                logp,
                micro.old_logp,
                micro.advantages,
                loss_mask[rows],
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                max_new_tokens=cfg.max_new_tokens,
                ref_logp=micro.ref_logp,
                kl_coef=cfg.kl_coef,
                kl_estimator=cfg.kl_estimator,
                dual_clip=cfg.dual_clip,
                loss_type=cfg.loss_type,
                importance_level=cfg.importance_level,
                rows=loss_mask.size(0),
                tokens=tokens,
            )
            loss.backward()
            total += float(loss.detach())
            gathered.add(stats, float(loss_mask[rows].sum()))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return total, gathered.means() | {"grad_norm": float(grad_norm)}

    def evaluate(self, rows: list[dict]) -> dict[str, float]:
        """The policy's greedy answers to `rows`, scored (rlzero.evaluation)."""
        cfg = self.cfg
        return evaluate(
            self.policy,
            self.tokenizer,
            rows,
            self.reward_fns,
            cfg.reward_weights,
            cfg.max_new_tokens,
            cfg.eval_batch_size,
        )

    def train(
        self,
        dataset: list[dict],
        on_step: Callable[[StepLog], None] | None = None,
        eval_dataset: list[dict] | None = None,
    ):
        """Rollouts over shuffled passes of `dataset` until `cfg.steps` or the target (resumed
        from `cfg.resume_from` if set, checkpointed to `cfg.output_dir` if set); the logs. After
        each rollout's update the reference may be synced and the policy evaluated (config), on
        `eval_dataset` if given."""
        cfg = self.cfg
        check_dataset(dataset)
        if self.tokenizer.pad_token_id is None or self.tokenizer.eos_token_id is None:
            # The sampler pads finished rows and batches prompts: it needs both ids.
            raise ValueError(
                "the tokenizer needs a pad token and an EOS token "
                "(many models ship none for padding: set tokenizer.pad_token = tokenizer.eos_token)"
            )
        if eval_dataset is not None:
            check_dataset(eval_dataset)
        stream = PromptStream(len(dataset), cfg.prompts_per_step, cfg.seed)
        done, logs = 0, []
        if cfg.resume_from:
            done, logs = checkpoint.resume(self, stream, cfg.resume_from)
        sinks = [s for s in (on_step, JsonLines(cfg.log_file) if cfg.log_file else None) if s]
        for step in range(done + 1, cfg.steps + 1):
            if reached(logs, cfg.target, cfg.target_window):
                break
            watch = Stopwatch()
            batch = self.rollout([dataset[i] for i in stream.next_indices()])
            watch.lap("rollout")
            loss, stats = self.learn(batch)
            watch.lap("learn")
            if cfg.log_timing:
                stats |= watch.stats(float(batch.completion_mask.sum()))
            if self.reference is not None and due_for_sync(step, cfg.ref_sync_every):
                sync_reference(self.reference, self.policy, cfg.ref_sync_alpha)
            if cfg.eval_every and step % cfg.eval_every == 0:
                stats |= self.evaluate((eval_dataset or dataset)[: cfg.eval_prompts])
            log = StepLog(
                step,
                float(torch.nanmean(batch.rewards)),
                loss,
                float(batch.completion_mask.sum(1).float().mean()),
                stats | batch.stats,
            )
            logs.append(log)
            for sink in sinks:
                sink(log)
            if cfg.output_dir and cfg.save_every and step % cfg.save_every == 0:
                checkpoint.save(self, stream, logs, step)
        if cfg.output_dir and logs:
            checkpoint.save(self, stream, logs, logs[-1].step)
        if cfg.export_dir:
            checkpoint.export_policy(self.policy, self.tokenizer, cfg.export_dir)
        return logs
