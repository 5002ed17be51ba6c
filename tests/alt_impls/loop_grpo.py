"""A correct GRPO written with explicit Python loops, as a first-time implementer might.

grpo-check must pass it with zero failures: it shares no code with reference_impl.
"""

import math

import torch


def combine_rewards(rewards_per_func, reward_weights):
    out = []
    for row in rewards_per_func.tolist():
        values = [w * r for w, r in zip(reward_weights, row, strict=True) if not math.isnan(r)]
        out.append(sum(values) if values else math.nan)
    return torch.tensor(out, dtype=torch.float32)


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    values = rewards.tolist()

    def mean_std(xs):
        valid = [x for x in xs if not math.isnan(x)]
        if not valid:
            return math.nan, math.nan
        mean = sum(valid) / len(valid)
        if len(valid) < 2:
            return mean, math.nan
        return mean, math.sqrt(sum((x - mean) ** 2 for x in valid) / (len(valid) - 1))

    _, batch_std = mean_std(values)
    out = []
    for start in range(0, len(values), num_generations):
        group = values[start : start + num_generations]
        mean, std = mean_std(group)
        for r in group:
            a = r - mean
            if scale_rewards == "group":
                a = a / (std + 1e-4)
            elif scale_rewards == "batch":
                a = a / (batch_std + 1e-4)
            out.append(0.0 if math.isnan(a) else a)
    return torch.tensor(out, dtype=torch.float32)


def selective_log_softmax(logits, index, temperature=1.0):
    scaled = logits.double() / temperature
    return torch.log_softmax(scaled, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1).float()


def completion_logps(logits, input_ids, completion_mask, temperature=1.0):
    rows, width = completion_mask.shape
    length = input_ids.shape[1]
    out = torch.zeros(rows, width)
    for b in range(rows):
        for j in range(width):
            if completion_mask[b, j]:
                position = length - width + j
                row_logits = logits[b, position - 1].double() / temperature
                out[b, j] = torch.log_softmax(row_logits, -1)[input_ids[b, position]].float()
    return out


def get_per_token_logps(model, input_ids, attention_mask, logits_to_keep, temperature=1.0):
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    mask = attention_mask[:, -logits_to_keep:]
    scaled = logits[:, -logits_to_keep - 1 : -1].float() / temperature
    tokens = input_ids[:, -logits_to_keep:]
    return torch.log_softmax(scaled, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1) * mask


def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
    eos = set(eos_token_ids)
    rows = []
    for ids in completion_ids.tolist():
        row, ended = [], False
        for token in ids:
            row.append(0 if ended else 1)
            if token in eos:
                ended = True
        if mask_truncated_completions and not ended:
            row = [0] * len(ids)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64)


def per_token_kl(per_token_logps, ref_per_token_logps):
    d = ref_per_token_logps - per_token_logps
    return torch.exp(d) - d - 1


def compute_loss(
    per_token_logps,
    advantages,
    completion_mask,
    *,
    old_per_token_logps=None,
    ref_per_token_logps=None,
    loss_type="dapo",
    beta=0.0,
    epsilon_low=0.2,
    epsilon_high=None,
    delta=None,
    importance_sampling_level="token",
    use_bias_correction_kl=True,
    max_completion_length=None,
    num_items_in_batch=None,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
):
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    rows, width = per_token_logps.shape
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    row_losses, total, tokens = [], 0.0, 0.0
    for b in range(rows):
        count = float(mask[b].sum())
        if importance_sampling_level == "sequence":
            seq = sum((per_token_logps[b, t] - old[b, t]) * mask[b, t] for t in range(width)) / max(
                count, 1.0
            )
        row_total = 0.0
        for t in range(width):
            if mask[b, t] == 0:
                continue
            a = advantages[b] if advantages.dim() == 1 else advantages[b, t]
            log_r = (
                seq
                if importance_sampling_level == "sequence"
                else per_token_logps[b, t] - old[b, t]
            )
            r = torch.exp(log_r)
            if loss_type == "cispo":
                term = -torch.clamp(r, max=eps_high).detach() * a * per_token_logps[b, t]
            elif loss_type == "sapo":
                tau = sapo_temperature_pos if a > 0 else sapo_temperature_neg
                term = -torch.sigmoid(tau * (r - 1)) * 4 / tau * a
            else:
                unclipped = r if delta is None else torch.clamp(r, max=delta)
                term = -torch.min(unclipped * a, torch.clamp(r, 1 - epsilon_low, 1 + eps_high) * a)
            if beta != 0.0:
                d = ref_per_token_logps[b, t] - per_token_logps[b, t]
                kl = torch.exp(d) - d - 1
                term = term + beta * (kl * r if use_bias_correction_kl else kl)
            row_total = row_total + term
        row_losses.append(row_total / max(count, 1.0))
        total = total + row_total
        tokens += count
    zero = per_token_logps.sum() * 0.0
    if loss_type in ("grpo", "sapo"):
        return sum(row_losses, zero) / rows
    if loss_type == "bnpo":
        return (total + zero) / max(tokens, 1.0)
    if loss_type == "dr_grpo":
        return (total + zero) / (rows * (max_completion_length or width))
    items = tokens if num_items_in_batch is None else float(num_items_in_batch)
    return (total + zero) / max(items, 1.0)


def strip_reasoning(text, open_tag="<think>", close_tag="</think>"):
    position = text.find(close_tag)
    if position >= 0:
        return text[position + len(close_tag) :].strip()
    return "" if open_tag in text else text
