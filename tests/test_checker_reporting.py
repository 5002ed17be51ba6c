"""What a user reads: short skip reasons, NotImplementedError as "not provided", locations a shim
chooses, and one cause reported once with its knock-on failures folded under it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from test_checker_cli import grpo_check

from checker.candidate import resolve_target
from checker.checks import all_checks
from checker.diagnosis import diagnose
from checker.sandbox import run_in_process

SEED = 1234


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "candidate.py"
    path.write_text(textwrap.dedent(source))
    return path


def _results(path: Path, stages: tuple[str, ...] = ()) -> dict:
    results = run_in_process(resolve_target(str(path)), all_checks(stages), SEED)
    return {r.check: r for r in results}


def test_not_implemented_for_a_positional_value_is_a_skip(tmp_path):
    """Two EOS ids are a positional argument, not a keyword: the candidate's NotImplementedError
    still means "not provided", never an error."""
    path = _write(
        tmp_path,
        """
        from reference_impl import completion_mask as _mask

        def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
            if len(eos_token_ids) > 1:
                raise NotImplementedError("one EOS id only")
            return _mask(completion_ids, eos_token_ids, mask_truncated_completions)
        """,
    )
    results = _results(path, ("masking",))
    several = results["masking.every_eos_id_counts"]
    assert several.status == "skip"
    assert several.message == "completion_mask does not implement this input (one EOS id only)"
    assert all(r.status in ("pass", "skip") for r in results.values())


def test_skip_reasons_are_short_and_never_print_tensors(tmp_path):
    """A loss that takes no optional keyword is skipped wherever a check needs one; each reason
    names the keyword in a few words, not the tensor that was to be passed."""
    path = _write(
        tmp_path,
        """
        from reference_impl import compute_loss as _loss

        def compute_loss(per_token_logps, advantages, completion_mask):
            return _loss(per_token_logps, advantages, completion_mask)
        """,
    )
    skips = [r.message for r in _results(path).values() if r.status == "skip"]
    assert any("old_per_token_logps=tensor[" in m for m in skips)
    assert all(len(m) <= 120 and "\n" not in m and "tensor([" not in m for m in skips), skips


def test_a_functions_candidate_chooses_where_its_failures_point(tmp_path):
    """A shim around a third-party trainer sets `grpo_check_location` to the trainer's line."""
    path = _write(
        tmp_path,
        """
        from reference_impl import compute_advantages as _advantages

        def compute_advantages(rewards, num_generations, scale_rewards="group"):
            return 2 * _advantages(rewards, num_generations, scale_rewards)

        compute_advantages.grpo_check_location = "their_trainer/core_algos.py:264"
        """,
    )
    result = _results(path, ("advantages",))["advantages.matches_reference"]
    assert result.status == "fail" and result.location == "their_trainer/core_algos.py:264"


BROKEN_EVERYWHERE = """
    def _missing(*args, **kwargs):
        raise AttributeError("'GRPOTrainer' object has no attribute 'add_fused_lm_head'")

    compute_advantages = compute_loss = selective_log_softmax = _missing
"""


def test_one_error_in_many_stages_is_one_cause(tmp_path):
    results = list(_results(_write(tmp_path, BROKEN_EVERYWHERE)).values())
    errors = [r for r in results if r.status == "error"]
    assert len({r.stage for r in errors}) >= 4
    diagnosis = diagnose(results)
    assert diagnosis["summary"].startswith(f"one error stops {len(errors)} checks in ")
    assert diagnosis["root_stages"] == ["advantages"]


def test_the_table_prints_one_cause_once_and_folds_the_rest(tmp_path):
    done = grpo_check(str(_write(tmp_path, BROKEN_EVERYWHERE)))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert sum(line.startswith("ERROR ") for line in lines) == 1, done.stdout
    assert sum(line.strip().startswith("folded: ") for line in lines) >= 3
    assert "more checks with this error" in done.stdout
