"""What a blind user met checking nano-aha-moment: an exception names the candidate's line that
raised it (not only the shim's), an empty batch that raises ZeroDivisionError is the same finding
as a NaN and names its declaration, and the masked-entry check runs on a REINFORCE-form loss
that takes no old log-probs."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results, profiled

HELPER = """
import torch

def _advantages_of(rewards):
    return rewards[..., 1:] * torch.ones(3)  # a shape error, two frames below the protocol


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    return _advantages_of(rewards)
"""

# -A * logp summed over the batch and divided by a Python int count, as nano-aha-moment does.
REINFORCE = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask):
    mask = completion_mask.float()
    count = int(mask.sum().item())
    return -(advantages.unsqueeze(1) * per_token_logps * MASKED).sum() / count
"""


def test_an_exception_names_the_line_that_raised_it(tmp_path: Path):
    (tmp_path / "candidate.py").write_text(HELPER)
    results = check_results(tmp_path / "candidate.py", ("advantages",))
    errors = [r for r in results.values() if r.status == "error"]
    assert errors
    assert all(r.message.endswith("candidate.py:5)") for r in errors), errors[0].message


def test_a_zero_division_on_an_empty_batch_names_its_declaration(tmp_path: Path):
    (tmp_path / "candidate.py").write_text(REINFORCE.replace("MASKED", "mask"))
    findings = profiled(tmp_path).get("findings", [])
    assert any(
        "ZeroDivisionError" in f and f.endswith("declare empty_batch_normaliser: unclamped")
        for f in findings
    ), findings


def test_masked_entries_are_checked_on_a_loss_without_old_log_probs(tmp_path: Path):
    (tmp_path / "candidate.py").write_text(REINFORCE.replace("MASKED", "mask"))
    (tmp_path / "c.yaml").write_text("path: candidate.py\nconfig:\n  policy_loss: reinforce\n")
    result = check_results(tmp_path / "c.yaml", ("loss_aggregation",))
    assert result["loss_aggregation.masked_entries_are_ignored"].status == "pass"
    (tmp_path / "candidate.py").write_text(REINFORCE.replace("MASKED", "1.0"))
    result = check_results(tmp_path / "c.yaml", ("loss_aggregation",))
    assert result["loss_aggregation.masked_entries_are_ignored"].status == "fail"
