"""The two-line pytest integration: passes quietly on a correct trainer, explains a buggy one."""

from pathlib import Path

import pytest

from checker.pytest_plugin import assert_grpo_check, grpo_check  # noqa: F401 - the fixture

LOOP = Path(__file__).resolve().parent / "alt_impls" / "loop_grpo.py"


def test_correct_trainer_passes(grpo_check):  # noqa: F811 - pytest injects the fixture
    results = grpo_check("tests/alt_impls/loop_grpo.py", stages=["decode"], isolated=False)
    assert {r.status for r in results} == {"pass"}


def test_buggy_trainer_raises_with_the_cause():
    with pytest.raises(AssertionError) as failure:
        assert_grpo_check("checker/examples/buggy_grpo.py", stages=["kl", "rewards"])
    text = str(failure.value)
    assert "diagnosis: fix kl first" in text
    assert "the KL term is subtracted" in text and "buggy_grpo.py:" in text


def _yaml(folder, **document) -> str:
    import yaml

    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump({"path": str(LOOP), **document}))
    return str(path)


def test_a_kept_profile_finding_fails_as_in_the_cli(tmp_path):
    """A YAML's `findings:` (what `profile --write` keeps) fail the plugin's run as the CLI's:
    a correct trainer whose file still lists a finding is not reported as passing."""
    finding = "decode: a latent limitation profile measured"
    target = _yaml(tmp_path, findings=[finding])
    with pytest.raises(AssertionError) as failure:
        assert_grpo_check(target, stages=["decode"], isolated=False)
    assert "FAIL decode.profile_finding" in str(failure.value) and finding in str(failure.value)


def test_on_policy_loss_clipping_skip_says_why(tmp_path):
    """Under `policy_loss: on_policy` the clipping checks are skipped because the loss has no old
    log-probs, and say so; they never call it the REINFORCE form."""
    target = _yaml(tmp_path, config={"policy_loss": "on_policy"})
    results = assert_grpo_check(target, stages=["clipping"], isolated=False)
    reasons = {r.message for r in results}
    assert {r.status for r in results} == {"skip"}
    assert reasons == {
        "policy_loss: on_policy (no old log-probs: the loss ignores old_per_token_logps, "
        "so it has no ratio to clip)"
    }, reasons
