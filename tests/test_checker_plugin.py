"""The two-line pytest integration: passes quietly on a correct trainer, explains a buggy one."""

import pytest

from checker.pytest_plugin import assert_grpo_check, grpo_check  # noqa: F401 - the fixture


def test_correct_trainer_passes(grpo_check):  # noqa: F811 - pytest injects the fixture
    results = grpo_check("tests/alt_impls/loop_grpo.py", stages=["decode"], isolated=False)
    assert {r.status for r in results} == {"pass"}


def test_buggy_trainer_raises_with_the_cause():
    with pytest.raises(AssertionError) as failure:
        assert_grpo_check("checker/examples/buggy_grpo.py", stages=["kl", "rewards"])
    text = str(failure.value)
    assert "diagnosis: fix kl first" in text
    assert "the KL term is subtracted" in text and "buggy_grpo.py:" in text
