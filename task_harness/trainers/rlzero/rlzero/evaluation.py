"""Measurement of the policy apart from training: its greedy answer to each prompt of a set of
rows (held-out ones if the run is given them), scored by the task's reward functions. Evaluation draws no random numbers, so a run with evaluations samples the same
rollouts as one without."""

from __future__ import annotations

import torch

from rlzero.data import decode_counted, encode_prompts, reward_inputs
from rlzero.rewards import mix_rewards, score_table
from rlzero.sampling import completion_tokens_mask, truncated_rows


@torch.no_grad()
def greedy_completions(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
) -> torch.Tensor:
    """[P, Lp] left-padded prompts -> [P, T] completions, each token the most likely one; after a
    row's EOS its positions hold `pad_id`."""
    ids, attention = prompt_ids, prompt_mask
    done = torch.zeros(ids.size(0), dtype=torch.bool)
    new_tokens = []
    for _ in range(max_new_tokens):
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -1]
        token = torch.where(
            done, torch.full_like(done, pad_id, dtype=torch.long), logits.argmax(-1)
        )
        new_tokens.append(token)
        done |= token == eos_id
        ids = torch.cat([ids, token[:, None]], dim=1)
        attention = torch.cat([attention, torch.ones_like(token[:, None])], dim=1)
        if done.all():
            break
    return torch.stack(new_tokens, dim=1)


def evaluate(
    model, tokenizer, rows: list[dict], reward_fns, weights, max_new_tokens: int, batch_size: int
) -> dict[str, float]:
    """The mean combined reward of the greedy answers to `rows` (`eval_reward`), and the share of
    them that were cut at the token budget (`eval_truncated`); `batch_size` prompts at a time.
    The model's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    rewards, truncated = [], []
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            enc = encode_prompts(tokenizer, chunk)
            completions = greedy_completions(
                model,
                enc["input_ids"],
                enc["attention_mask"],
                max_new_tokens,
                tokenizer.eos_token_id,
                tokenizer.pad_token_id,
            )
            mask = completion_tokens_mask(completions, tokenizer.eos_token_id)
            token_ids, texts = decode_counted(tokenizer, completions, mask)
            prompts, columns = reward_inputs(chunk, 1)
            per_fn = score_table(reward_fns, prompts, texts, token_ids, columns)
            rewards.append(mix_rewards(per_fn, weights))
            truncated.append(truncated_rows(completions, tokenizer.eos_token_id))
    finally:
        model.train(was_training)
    return {
        "eval_reward": float(torch.nanmean(torch.cat(rewards))),
        "eval_truncated": float(torch.cat(truncated).float().mean()),
    }
