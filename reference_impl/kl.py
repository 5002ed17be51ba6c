"""Stage `kl`: the per-token KL penalty towards the frozen reference policy."""

from __future__ import annotations

import torch


def per_token_kl(per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(pi_theta || pi_ref) per token (TRL 1.16 gt:L3101).

    With d = log pi_ref - log pi_theta:  k3 = exp(d) - d - 1 >= 0, and 0 exactly when d = 0.
    Unbiased for the reverse KL under samples from pi_theta (http://joschu.net/blog/kl-approx.html).
    """
    log_ratio = ref_per_token_logps - per_token_logps
    return torch.exp(log_ratio) - log_ratio - 1
