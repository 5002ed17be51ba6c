"""What a blind user met profiling NeMo-RL and simple_GRPO: a loss whose own default is GSPO's
sequence-level ratio gets `importance_sampling_level: sequence` written (it got a bogus "no PPO
ratio band" finding instead), and a stage function that raises NotImplementedError for a probe is
not a finding."""

from __future__ import annotations

from candidate_support import json_report, profiled

GSPO = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 epsilon_low=0.2):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    # one ratio per completion: the geometric mean of its tokens' ratios (GSPO)
    log_ratio = ((per_token_logps - old) * mask).sum(1) / mask.sum(1).clamp(min=1)
    ratio = torch.exp(log_ratio).unsqueeze(1)
    a = advantages.unsqueeze(1)
    token = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * a)
    return ((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


def combine_rewards(rewards_per_func, reward_weights):
    raise NotImplementedError("rewards are summed in the rollout loop")
"""


def test_a_sequence_level_loss_is_profiled_as_such(tmp_path):
    (tmp_path / "candidate.py").write_text(GSPO)
    document = profiled(tmp_path)
    assert document["config"].get("importance_sampling_level") == "sequence", document
    assert not document.get("findings"), document["findings"]
    report = json_report(tmp_path, "cfg.yaml", "--stage", "ratio", "--stage", "clipping")
    bad = [r for r in report["results"] if r["status"] in ("fail", "error")]
    assert not bad, bad
