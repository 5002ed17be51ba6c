"""A trainer that takes one EOS id (the tokenizer's `eos_token_id`, as TRL did before 1.14.2,
rlzero, an RLOO loop) is right for a model with one end token and wrong for a chat model with
several. Undeclared, the two-id checks fail and name `eos_token_ids: first`; `profile` measures
it; declared, the masking check of two ids is skipped and the generation check runs with the one
id, so a mask or a sampler that is wrong in another way still fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from candidate_support import check_results, profiled

from checker.candidate import TargetError, resolve_target

ONE_ID = """
from reference_impl import *  # noqa: F401,F403  (every other stage: the reference's)
import reference_impl


def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
    ids = [eos_token_ids] if isinstance(eos_token_ids, int) else list(eos_token_ids)
    return reference_impl.completion_mask(completion_ids, ids[:1], mask_truncated_completions)
"""
# The same, and the EOS left out of the mask: a bug whatever the EOS policy.
EOS_DROPPED = ONE_ID.replace(
    "    return reference_impl.completion_mask(",
    "    is_eos = completion_ids == ids[0]\n"
    "    return reference_impl.completion_mask(completion_ids, ids[:1]) * (~is_eos).int()\n"
    "    return reference_impl.completion_mask(",
)


def _write(folder: Path, source: str = ONE_ID, config: str = "") -> Path:
    (folder / "candidate.py").write_text(source)
    (folder / "c.yaml").write_text("path: candidate.py\n" + config)
    return folder / "c.yaml"


def test_undeclared_the_two_id_check_fails_and_names_the_declaration(tmp_path):
    result = check_results(_write(tmp_path), ("masking",))["masking.every_eos_id_counts"]
    assert result.status == "fail", result.message
    assert "eos_token_ids: first" in result.message


def test_profile_measures_one_id_and_the_declared_checks_pass(tmp_path):
    _write(tmp_path)
    assert profiled(tmp_path)["config"]["eos_token_ids"] == "first"
    results = check_results(tmp_path / "cfg.yaml", ("masking", "generation"))
    skipped = results.pop("masking.every_eos_id_counts")
    assert skipped.status == "skip" and "eos_token_ids: first" in skipped.message
    assert {r.status for r in results.values()} == {"pass"}, {
        n: r.message for n, r in results.items() if r.status != "pass"
    }


def test_profile_leaves_a_mask_that_honours_every_id_undeclared(tmp_path):
    (tmp_path / "candidate.py").write_text("from reference_impl import *  # noqa: F403\n")
    assert "eos_token_ids" not in (profiled(tmp_path).get("config") or {})


def test_declared_a_mask_that_drops_the_eos_still_fails(tmp_path):
    config = "config:\n  eos_token_ids: first\n"
    results = check_results(_write(tmp_path, EOS_DROPPED, config), ("masking",))
    assert results["masking.matches_reference_random"].status == "fail"
    assert results["masking.every_eos_id_counts"].status == "skip"


def test_a_value_outside_the_set_is_a_one_line_error(tmp_path):
    _write(tmp_path, config="config:\n  eos_token_ids: last\n")
    with pytest.raises(TargetError, match="eos_token_ids: 'last' is not one of .*first"):
        resolve_target(str(tmp_path / "c.yaml"))
