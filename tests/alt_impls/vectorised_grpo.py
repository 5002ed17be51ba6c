"""A correct, vectorised GRPO with its own names; `vectorised_grpo.yaml` maps them to the protocol."""

import torch


def reward_sum(scores, weights):
    weights = torch.as_tensor(weights, dtype=scores.dtype)
    total = torch.where(torch.isnan(scores), 0.0, scores * weights).sum(1)
    return torch.where(torch.isnan(scores).all(1), torch.nan, total)


def group_normalise(rewards, num_generations, scale_rewards="group"):
    g = rewards.reshape(-1, num_generations)
    valid = ~torch.isnan(g)
    n = valid.sum(1, keepdim=True)
    mean = torch.where(valid, g, 0.0).sum(1, keepdim=True) / n
    var = torch.where(valid, (g - mean) ** 2, 0.0).sum(1, keepdim=True) / (n - 1)
    centred = g - mean
    if scale_rewards == "group":
        centred = centred / (var.sqrt() + 1e-4)
    elif scale_rewards == "batch":
        flat = rewards[~torch.isnan(rewards)]
        centred = centred / (flat.std() + 1e-4)
    return torch.nan_to_num(centred.reshape(-1), nan=0.0)


def eos_mask(ids, eos_ids, mask_truncated_completions=False):
    hit = torch.zeros_like(ids, dtype=torch.bool)
    for e in eos_ids:
        hit |= ids == e
    before = torch.cumsum(hit.int(), 1) - hit.int()  # EOS tokens strictly before each position
    mask = (before == 0).long()
    if mask_truncated_completions:
        mask = mask * hit.any(1, keepdim=True).long()
    return mask


def token_logprobs(logits, index, temperature=1.0):
    z = logits.float() / temperature
    return z.gather(-1, index.unsqueeze(-1)).squeeze(-1) - z.logsumexp(-1)


def objective(
    logp,
    adv,
    mask,
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
    m = mask.to(logp.dtype)
    a = adv[:, None] if adv.dim() == 1 else adv
    old = logp.detach() if old_per_token_logps is None else old_per_token_logps
    diff = logp - old
    if importance_sampling_level == "sequence":
        diff = (diff * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    r = diff.exp()
    high = epsilon_low if epsilon_high is None else epsilon_high
    if loss_type == "cispo":
        per_token = -r.clamp(max=high).detach() * a * logp
    elif loss_type == "sapo":
        tau = torch.where(a > 0, sapo_temperature_pos, sapo_temperature_neg)
        per_token = -4 / tau * torch.sigmoid(tau * (r - 1)) * a
    else:
        capped = r if delta is None else r.clamp(max=delta)
        per_token = torch.maximum(-capped * a, -r.clamp(1 - epsilon_low, 1 + high) * a)
    if beta:
        d = ref_per_token_logps - logp
        k3 = d.exp() - d - 1
        per_token = per_token + beta * (k3 * r if use_bias_correction_kl else k3)
    s = (per_token * m).sum()
    if loss_type in ("grpo", "sapo"):
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return s / m.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        return s / (m.shape[0] * (max_completion_length or m.shape[1]))
    n = m.sum() if num_items_in_batch is None else torch.as_tensor(float(num_items_in_batch))
    return s / n.clamp(min=1)


def k3(logp, ref):
    return torch.expm1(ref - logp) - (ref - logp)
