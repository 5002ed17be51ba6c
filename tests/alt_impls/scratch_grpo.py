"""A correct from-scratch GRPO whose conventions are not TRL's, as a small training loop has them.

- advantages: (r - mean) / (std + 1e-6) with NumPy's population std (`np.std`, n, not n - 1), in
  float64; rewards are never NaN (failed scores are 0 upstream);
- loss: the REINFORCE form -A * log p on policy (no ratio, no clipping), each row's token mean,
  then the mean over rows (TRL's "grpo" aggregation);
- update: `optimizer.zero_grad()` after `optimizer.step()`, not before backward.

`grpo-check profile scratch_grpo.py --write cfg.yaml` measures these, and `grpo-check cfg.yaml`
then reports no failure (tests/test_profile.py).
"""

import numpy as np
import torch

EPSILON = 1e-6


def compute_advantages(rewards, num_generations):
    grouped = rewards.double().numpy().reshape(-1, num_generations)
    centred = grouped - np.mean(grouped, axis=1, keepdims=True)
    scaled = centred / (np.std(grouped, axis=1, keepdims=True) + EPSILON)
    return torch.from_numpy(scaled.reshape(-1)).float()


def completion_mask(completion_ids, eos_token_ids):
    is_eos = torch.isin(completion_ids, torch.tensor(eos_token_ids))
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    return (eos_before == 0).long()  # every token up to and including the first EOS


def selective_log_softmax(logits, index):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def compute_loss(per_token_logps, advantages, completion_mask):
    mask = completion_mask.float()
    token_loss = -advantages.unsqueeze(1) * per_token_logps
    row_loss = (token_loss * mask).sum(1) / mask.sum(1).clamp(min=1)
    return row_loss.mean()


def grpo_step(
    policy,
    optimizer,
    prompt_ids,
    prompt_mask,
    completion_ids,
    rewards,
    *,
    num_generations,
    eos_token_ids,
    max_grad_norm=1.0,
):
    mask = completion_mask(completion_ids, eos_token_ids)
    advantages = compute_advantages(rewards, num_generations)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, mask], dim=1)
    width = completion_ids.size(1)
    logits = policy(input_ids=input_ids, attention_mask=attention_mask).logits
    logps = selective_log_softmax(logits[:, -width - 1 : -1], completion_ids)
    loss = compute_loss(logps, advantages, mask)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)
