"""Friction agents reported with `grpo-check FILE.py:CLASS` (issue 20): a user config with a field
the installed TRL release lacks is one line naming the field and the release; a cause text that
would hold for a symmetric clip says how to declare one; a target that fails many checks across
stages is pointed at `grpo-check profile --write` first.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import trl
from click.testing import CliRunner

from checker import check_cli
from checker.candidate import CandidateSpec, TargetError, load_candidate, resolve_target
from checker.check_cli import check_hint, profile_hint
from checker.checks import CheckResult

# TRL removed `max_prompt_length` from GRPOConfig in 0.28.0; a config written for an older
# release still sets it.
TEAM = """
from trl import GRPOConfig, GRPOTrainer


class TeamTrainer(GRPOTrainer):
    \"\"\"Nothing overridden.\"\"\"


CONFIG = GRPOConfig(output_dir="out", max_prompt_length=64, beta=0.0)
"""


def _refusal(target: str, grpo_config: str | None = None) -> str:
    with pytest.raises(TargetError) as refused:
        load_candidate(resolve_target(target, "auto", grpo_config))
    return str(refused.value)


def test_a_config_field_the_release_lacks_is_named_with_the_release(tmp_path, monkeypatch):
    """Built in the user's file: TRL's own TypeError at import, reported as the field, the
    release and the line that sets it, not as a failed import of the trainer."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.py").write_text(textwrap.dedent(TEAM))
    message = _refusal("team.py:TeamTrainer", "team.py:CONFIG")
    assert "\n" not in message
    assert f"TRL {trl.__version__}'s GRPOConfig has no field 'max_prompt_length'" in message
    assert "team.py:9:" in message and "import failed" not in message


def test_a_config_mapping_with_such_a_field_names_the_release_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.py").write_text(textwrap.dedent(TEAM).split("CONFIG =")[0])
    (tmp_path / "team.yaml").write_text(
        "trainer: team.py:TeamTrainer\ngrpo_config:\n  beta: 0.0\n  max_prompt_length: 64\n"
    )
    message = _refusal("team.yaml")
    assert f"TRL {trl.__version__}'s GRPOConfig has no field 'max_prompt_length'" in message


def test_any_other_type_error_at_import_is_still_an_import_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def f(a):\n    pass\n\n\nf(b=1)\n")
    message = _refusal("broken.py")
    assert "import failed: TypeError" in message and "GRPOConfig" not in message


# --- many failures across stages: declare the team's conventions first -----------------------


def _failing(per_stage: dict[str, int]) -> list[CheckResult]:
    return [
        CheckResult(f"{stage}.check_{k}", stage, "fail", "expected 1, saw 2")
        for stage, count in per_stage.items()
        for k in range(count)
    ] + [CheckResult("ratio.passes", "ratio", "pass")]


def _subclass_spec(target: str = "team.py:TeamTrainer") -> CandidateSpec:
    return CandidateSpec(target, "trl", trainer=f"/abs/{target}")


def test_a_subclass_failing_many_checks_across_stages_is_pointed_at_profile():
    hint = profile_hint(
        _subclass_spec(), "team.py:CONFIG", _failing({"advantages": 2, "kl": 2, "clipping": 1})
    )
    assert hint is not None and hint.startswith("5 checks fail across 3 stages")
    assert hint.endswith(
        "grpo-check profile team.py:TeamTrainer --config team.py:CONFIG --write team.yaml"
        " && grpo-check team.yaml"
    )
    dotted = profile_hint(
        _subclass_spec("mygrpo.trainer:Team"), None, _failing({"a": 3, "b": 1, "c": 1})
    )
    assert dotted is not None and "--write trainer.yaml" in dotted


def test_no_hint_below_the_threshold_or_where_conventions_are_declared():
    few_stages = _failing({"advantages": 4, "kl": 4})
    few_checks = _failing({"advantages": 2, "kl": 1, "clipping": 1})
    many = _failing({"advantages": 2, "kl": 2, "clipping": 2})
    assert profile_hint(_subclass_spec(), None, few_stages) is None
    assert profile_hint(_subclass_spec(), None, few_checks) is None
    yaml = CandidateSpec("team.yaml", "trl", trainer="/abs/team.py:TeamTrainer")
    assert profile_hint(yaml, None, many) is None  # its YAML is where conventions go
    assert profile_hint(CandidateSpec("trl", "trl"), None, many) is None  # TRL itself
    assert profile_hint(CandidateSpec("loop.py", "functions"), None, many) is None


def test_the_summary_prints_the_hint_after_the_verdict(monkeypatch, tmp_path):
    results = _failing({"advantages": 2, "kl": 2, "clipping": 1})
    monkeypatch.setattr(
        check_cli, "run_check", lambda *args, **kwargs: (_subclass_spec(), results, None)
    )
    done = CliRunner().invoke(check_cli.check, ["team.py:TeamTrainer"])
    assert done.exit_code == 1
    lines = done.output.strip().splitlines()
    assert lines[-2].endswith("FAILED")
    assert lines[-1].startswith("hint: 5 checks fail across 3 stages")
    assert "grpo-check profile team.py:TeamTrainer --write team.yaml" in lines[-1]


# --- a trainer that reads its own config class's fields ----------------------------------------

OWN_FIELD_ERROR = (
    "compute_loss raised AttributeError: 'GRPOConfig' object has no attribute 'dual_clip'"
)


def test_a_field_of_the_teams_config_class_points_at_config():
    errors = [CheckResult("clipping.far", "clipping", "error", OWN_FIELD_ERROR)]
    hint = check_hint(_subclass_spec(), None, errors)
    assert hint is not None and hint.startswith("the trainer reads args.dual_clip")
    assert "--config FILE.py:CLASS" in hint
    assert check_hint(_subclass_spec(), "team.py:TeamConfig", errors) is None  # config given


OWN_CONFIG = """
from dataclasses import dataclass, field

from trl import GRPOConfig


@dataclass
class TeamConfig(GRPOConfig):
    dual_clip: float = field(default=3.0, metadata={"help": "the team's own field"})
"""


def test_a_config_class_is_taken_at_its_defaults(tmp_path, monkeypatch):
    """`--config FILE.py:CLASS` names a GRPOConfig subclass: the trainer is built with it."""
    from checker.candidate import _user_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.py").write_text(textwrap.dedent(TEAM).split("CONFIG =")[0] + OWN_CONFIG)
    spec = resolve_target("team.py:TeamTrainer", "auto", "team.py:TeamConfig")
    cls, values = _user_config(spec, trl.GRPOConfig)
    assert cls.__name__ == "TeamConfig" and values == {}
    assert cls(output_dir="out", use_cpu=True, bf16=False).dual_clip == 3.0


# -- the user family's team trainer: its own advantages and loss, profiled ----------------------

REWARD_GATE = {"rewards.weighted_sum_matches_reference", "rewards.nan_entry_adds_nothing"}


def _team_workspace(tmp_path, fixed: bool):
    """user-flat-grad's workspace (TRL 1.16 untouched, `mygrpo/` the team's code), with its
    oracle's files over it when `fixed`."""
    import shutil

    from task_harness.build import build_task
    from task_harness.spec import TASKS_DIR, load_task

    built = build_task(load_task(TASKS_DIR / "user-flat-grad"), tmp_path / "built")
    workspace = built / "environment" / "workspace"
    if fixed:
        shutil.copytree(built / "solution" / "files", workspace, dirs_exist_ok=True)
    return workspace


@pytest.mark.xdist_group("profile")
@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "buggy"])
def test_the_user_familys_team_trainer_after_profile(fixed, tmp_path):
    """The team's Dr. GRPO trainer (no std, a row-times-length normaliser, k3 without bias
    correction, a None reward scored 0) is profiled into those conventions, and the options its
    overrides take and ignore are pinned: fixed, the written file then fails only the two checks
    of its reward gate (style rewards count only when the answer is right: not a weighted sum,
    which no convention declares, so `custom:` declares it); with its bugs in, the ratio still
    fails."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    grpo_check = str(Path(sys.executable).parent / "grpo-check")
    workspace = _team_workspace(tmp_path, fixed)
    target = ["mygrpo/trainer.py:TeamGRPOTrainer", "--config", "mygrpo/config.py:TRAINING"]
    subprocess.run(
        [grpo_check, "profile", *target, "--write", "cfg.yaml"],
        cwd=workspace,
        capture_output=True,
        timeout=600,
    )
    written = yaml.safe_load((workspace / "cfg.yaml").read_text())
    checked = subprocess.run(
        [grpo_check, "cfg.yaml", "--json"], cwd=workspace, capture_output=True, timeout=600
    )
    report = json.loads(checked.stdout)
    failing = {r["check"] for r in report["results"] if r["status"] in ("fail", "error")}
    if fixed:
        assert written["config"] == {
            "nan_rewards": "zero",
            "scale_rewards": "none",
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "use_bias_correction_kl": False,
        }, written
        assert written["supported"]["scale_rewards"] == ["none"], written
        assert failing == REWARD_GATE, failing
        # The gate is the team's own: declared `custom`, the rewards stage skips with that
        # reason and is not covered, so the check passes and only --strict fails.
        reason = "style rewards count only where the answer is right (style_gate)"
        with (workspace / "cfg.yaml").open("a") as handle:
            handle.write(f"custom:\n  rewards: {reason}\n")
        declared = subprocess.run(
            [grpo_check, "cfg.yaml", "--json"], cwd=workspace, capture_output=True, timeout=600
        )
        assert declared.returncode == 0, declared.stdout[-2000:]
        rewards = [r for r in json.loads(declared.stdout)["results"] if r["stage"] == "rewards"]
        assert rewards and all(
            r["status"] == "skip" and r["message"] == f"declared custom: {reason}" for r in rewards
        ), rewards
        strict = subprocess.run(
            [grpo_check, "cfg.yaml", "--strict", "--stage", "rewards"],
            cwd=workspace,
            capture_output=True,
            timeout=600,
        )
        assert strict.returncode == 1, strict.stdout[-2000:]
    else:
        assert {
            "ratio.on_policy_gradient_flows",
            "ratio.sgd_step_follows_advantage_sign",
        } <= failing


@pytest.mark.parametrize(
    ("custom", "cause"),
    [
        ("[rewards]", "`custom` must map stages to the reason they are your own"),
        ("{reward: gated}", "`custom` names unknown stage 'reward'"),
        ("{rewards: ''}", "`custom: rewards` needs the reason, as one line of text"),
    ],
)
def test_a_malformed_custom_declaration_is_one_line(custom, cause, tmp_path):
    (tmp_path / "team.py").write_text("")
    (tmp_path / "team.yaml").write_text(f"trainer: team.py:TeamTrainer\ncustom: {custom}\n")
    with pytest.raises(TargetError, match=re.escape(cause)):
        resolve_target(str(tmp_path / "team.yaml"))
