"""The training loop: rollout -> advantages -> a few passes of updates, in the order it runs."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlzero.advantages import group_advantages
from rlzero.config import RunConfig
from rlzero.objective import surrogate_loss
from rlzero.rewards import score_completions
from rlzero.sampling import completion_tokens_mask, sample_groups
from rlzero.scoring import completion_logprobs


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy: an independent copy of `model` as it is now, in eval mode, frozen."""
    return copy.deepcopy(model).eval().requires_grad_(False)


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


@dataclass
class StepLog:
    step: int
    reward: float
    loss: float
    length: float
    stats: dict[str, float] = field(default_factory=dict)


class Learner:
    """GRPO on a causal LM with a list of reward functions (TRL's reward signature)."""

    def __init__(self, cfg: RunConfig, model, tokenizer, reward_fns):
        self.cfg = cfg
        self.policy = model
        self.tokenizer = tokenizer
        self.reward_fns = reward_fns
        self.reference = frozen_copy(model) if cfg.kl_coef != 0.0 else None
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0
        )

    def rollout(self, rows: list[dict]) -> Rollout:
        cfg, tok = self.cfg, self.tokenizer
        G = cfg.group_size
        enc = tok([r["prompt"] for r in rows], return_tensors="pt", padding=True)
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
        lengths = mask.sum(1).tolist()
        token_ids = [ids[:n] for ids, n in zip(completions.tolist(), lengths, strict=True)]
        texts = tok.batch_decode(token_ids, skip_special_tokens=True)
        group_rows = [r for r in rows for _ in range(G)]
        columns = {k: [r[k] for r in group_rows] for k in rows[0] if k != "prompt"}
        prompts = [r["prompt"] for r in group_rows]
        rewards = score_completions(
            self.reward_fns, cfg.reward_weights, prompts, texts, token_ids, columns
        )
        advantages = group_advantages(rewards, G, cfg.adv_eps)

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
        return Rollout(input_ids, attention_mask, mask, rewards, advantages, old_logp, ref_logp)

    def learn(self, batch: Rollout) -> tuple[float, dict[str, float]]:
        """`cfg.passes` optimizer steps on one rollout; the last loss, and statistics: the last
        pass's, with `ratio_max` the largest ratio of any pass."""
        cfg = self.cfg
        n_new = batch.completion_mask.size(1)
        ratio_max = 0.0
        for _ in range(cfg.passes):
            logp = completion_logprobs(
                self.policy, batch.input_ids, batch.attention_mask, n_new, cfg.temperature
            )
            loss, stats = surrogate_loss(
                logp,
                batch.old_logp,
                batch.advantages,
                batch.completion_mask,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                max_new_tokens=cfg.max_new_tokens,
                ref_logp=batch.ref_logp,
                kl_coef=cfg.kl_coef,
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
            self.optimizer.step()
            ratio_max = max(ratio_max, stats["ratio_max"])
        return float(loss.detach()), stats | {"ratio_max": ratio_max}

    def train(self, dataset: list[dict], on_step: Callable[[StepLog], None] | None = None):
        """Rollouts over shuffled passes of `dataset` until `cfg.steps` or the target; the logs."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        order: list[int] = []
        logs: list[StepLog] = []
        for step in range(1, cfg.steps + 1):
            while len(order) < cfg.prompts_per_step:
                order += rng.sample(range(len(dataset)), len(dataset))
            rows = [dataset[i] for i in order[: cfg.prompts_per_step]]
            del order[: cfg.prompts_per_step]
            batch = self.rollout(rows)
            loss, stats = self.learn(batch)
            log = StepLog(
                step,
                float(torch.nanmean(batch.rewards)),
                loss,
                float(batch.completion_mask.sum(1).float().mean()),
                stats,
            )
            logs.append(log)
            if on_step is not None:
                on_step(log)
            recent = [entry.reward for entry in logs[-10:]]
            if len(recent) == 10 and sum(recent) / 10 >= cfg.target:
                break
        return logs
