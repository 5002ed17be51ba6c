"""grpo-check's own proof: every single-spot mutant of reference_impl is detected and localised.

Each mutant is applied to a private copy of reference_impl (never the repository) and checked in
this process (the engine, not the sandbox, is under test here; tests/test_checker_cli.py covers
isolation). A mutant is LOCALISED when every failing check is in the mutated stage, or when the
only other failing checks declare a dependency on the mutated stage and the diagnosis names the
mutated stage as the single root.
"""

from __future__ import annotations

import pytest
from checker_mutant_support import check_package, mutated_package

from checker.checks import all_checks
from task_harness.mutants import load_corpus

MUTANTS = load_corpus("reference")

_UPDATE = "grpo_step runs the candidate's own stage functions, so the update checks see the bug too"
_RATIO = "the clipping, KL-gradient and sapo probes read the ratio through the loss's gradient"
_CLIP = "the SGD-direction check (ratio stage) needs the clip to pass A > 0 tokens at r = 1"
# Mutants whose failures spill outside their stage, and why; the diagnosis must name their stage.
NEEDS_DIAGNOSIS = {
    "adv_epsilon_1e4": _UPDATE,
    "adv_batch_mean": _UPDATE,
    "adv_no_std_division": _UPDATE,
    "adv_group_uses_batch_std": _UPDATE,
    "adv_interleaved_groups": _UPDATE,
    "logprob_sign_flip": _UPDATE,
    "logprob_model_off_by_one": _UPDATE,
    "mask_eos_excluded": _UPDATE,
    "mask_from_pad_id": _UPDATE,
    "mask_no_eos_rows_dropped": _UPDATE,
    "mask_one_token_late": _UPDATE,
    "ratio_inverted": f"{_RATIO}; {_UPDATE}",
    "ratio_detached": f"{_RATIO}; {_UPDATE}",
    "ratio_ignores_old": f"{_RATIO}; {_UPDATE}",
    "ratio_no_exp": f"{_RATIO}; {_UPDATE}",
    "clip_bounds_swapped": f"{_CLIP}; {_UPDATE}",
    "clip_max_not_min": _UPDATE,
    "clip_disabled": _UPDATE,
    "agg_dapo_as_grpo": _UPDATE,
}


def test_corpus_covers_every_stage_with_60_mutants():
    stages = {m.stage for m in MUTANTS}
    assert len(MUTANTS) >= 60
    assert stages == {c.stage for c in all_checks()}
    assert {"adv_epsilon_1e4", "logprob_sign_flip", "strip_reasoning_blanks_plain"} <= {
        m.id for m in MUTANTS
    }
    assert set(NEEDS_DIAGNOSIS) <= {m.id for m in MUTANTS}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_mutant_is_detected_and_localised(mutant, tmp_path):
    results, diagnosis = check_package(mutated_package(mutant, tmp_path))
    failing = [r for r in results if r.status in ("fail", "error")]
    assert failing, f"{mutant.id} ({mutant.description}) was not detected"
    assert any(r.stage == mutant.stage for r in failing), [r.check for r in failing]
    outside = [r for r in failing if r.stage != mutant.stage]
    assert all(mutant.stage in r.depends_on for r in outside), [r.check for r in outside]
    assert diagnosis["root_stages"] == [mutant.stage], diagnosis
    assert bool(outside) == (mutant.id in NEEDS_DIAGNOSIS), [r.check for r in outside]
