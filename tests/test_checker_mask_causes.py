"""A completion mask built as `ids != EOS` (a pipeline that pads with EOS and masks `ids !=
pad_id`, as small from-scratch trainers do) is named as such, on completions with tokens after
the EOS as well as on rows padded with EOS."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results

MASK = """
def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
    if len(eos_token_ids) != 1:
        raise NotImplementedError("one EOS id only")
    return (completion_ids != eos_token_ids[0]).long()  # pad == EOS: mask every pad
"""


def test_a_mask_of_ids_not_eos_is_named(tmp_path: Path):
    (tmp_path / "candidate.py").write_text(MASK)
    results = check_results(tmp_path / "candidate.py", ("masking",))
    for name in ("matches_reference_random", "eos_at_first_and_last_position"):
        result = results[f"masking.{name}"]
        assert result.status == "fail", result.message
        assert "the mask is ids != EOS" in result.message, result.message
    skipped = results["masking.every_eos_id_counts"]
    assert skipped.message == "completion_mask does not implement this input (one EOS id only)"
