"""G completions per prompt, and which of their tokens count."""

from __future__ import annotations

import torch


@torch.no_grad()
def sample_groups(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[P, Lp] left-padded prompts -> [P * G, T] completions, rows g*G .. g*G + G - 1 for prompt g,
    and the log-probability each sampled token had, [P * G, T].

    Each token is drawn from softmax(logits / temperature); once a row has produced EOS, its
    remaining positions hold `pad_id` (log-prob 0). The model sees the whole sequence at every
    step (no cache): completions here are a few tokens long."""
    ids = prompt_ids.repeat_interleave(group_size, dim=0)
    attention = prompt_mask.repeat_interleave(group_size, dim=0)
    done = torch.zeros(ids.size(0), dtype=torch.bool)
    new_tokens, new_logprobs = [], []
    for _ in range(max_new_tokens):
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -1].float()
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        token = torch.multinomial(logprobs.exp(), 1).squeeze(1)
        picked = logprobs.gather(1, token[:, None]).squeeze(1)
        new_logprobs.append(torch.where(done, torch.zeros_like(picked), picked))
        token = torch.where(done, torch.full_like(token, pad_id), token)
        new_tokens.append(token)
        done |= token == eos_id
        ids = torch.cat([ids, token[:, None]], dim=1)
        attention = torch.cat([attention, torch.ones_like(token[:, None])], dim=1)
        if done.all():
            break
    return torch.stack(new_tokens, dim=1), torch.stack(new_logprobs, dim=1)


def completion_tokens_mask(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 for every token up to and including the first EOS, 0 after it; [N, T] int.

    The EOS itself counts: it is the model's decision to stop, and the reward may depend on it."""
    is_eos = (completion_ids == eos_id).int()
    eos_seen_before = torch.cumsum(is_eos, dim=1) - is_eos
    return (eos_seen_before == 0).int()


def truncated_rows(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """True for each completion that never produced EOS: it was cut at the token budget, [N] bool.

    RunConfig.mask_truncated leaves these out of the loss: their reward judges an unfinished
    answer, so it says little about the tokens that were sampled."""
    return ~(completion_ids == eos_id).any(dim=1)
