"""`grpo-check profile TARGET [--json] [--write PATH]` on a from-scratch trainer with non-TRL
conventions (tests/alt_impls/scratch_grpo.py), and on copies of it with a real bug.

The loop the README shows: `profile --write cfg.yaml` measures the conventions, `grpo-check
cfg.yaml` then checks the trainer against a reference configured the same way and reports only
real bugs. A value that is a known bug is a finding and is never written as a convention.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.xdist_group("profile")

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")
SCRATCH = Path(__file__).resolve().parent / "alt_impls" / "scratch_grpo.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([GRPO_CHECK, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def trainer_copy(folder: Path, old: str = "", new: str = "") -> Path:
    """scratch_grpo.py copied into `folder`, with `old` replaced by `new` (exactly once)."""
    target = folder / "scratch_grpo.py"
    text = SCRATCH.read_text()
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    target.write_text(text)
    return target


def failing(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["status"] in ("fail", "error")]


@pytest.fixture(scope="module")
def scratch_profile(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    folder = tmp_path_factory.mktemp("scratch")
    trainer_copy(folder)
    result = run("profile", "scratch_grpo.py", "--json", "--write", "cfg.yaml", cwd=folder)
    return result, folder


def test_profile_measures_the_scratch_conventions(scratch_profile):
    result, _ = scratch_profile
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    assert document["findings"] == []
    measured = document["conventions"]
    # what scratch_grpo.py implements (its docstring): np.std, 1e-6, REINFORCE, zero_grad last
    assert measured["std_estimator"] == "population"
    assert measured["advantage_epsilon"] == pytest.approx(1e-6)
    assert measured["advantage_epsilon_placement"] == "std"
    assert measured["policy_loss"] == "reinforce"
    assert measured["loss_type"] == "grpo"
    assert measured["zero_grad"] == "after_step"
    assert measured["nan_rewards"] == "never"


def test_written_yaml_checks_with_no_failure(scratch_profile):
    """profile --write cfg.yaml, then grpo-check cfg.yaml: every check that runs passes."""
    _, folder = scratch_profile
    written = yaml.safe_load((folder / "cfg.yaml").read_text())
    assert written["path"] == "scratch_grpo.py"
    result = run("cfg.yaml", "--json", cwd=folder)
    report = json.loads(result.stdout)
    assert result.returncode == 0 and failing(report) == [], failing(report)
    ran = {r["stage"] for r in report["results"] if r["status"] == "pass"}
    assert {"advantages", "masking", "loss_aggregation", "update"} <= ran, ran


def test_without_the_yaml_the_conventions_are_reported_as_failures(scratch_profile):
    """The same trainer against TRL's conventions fails: the measured YAML is what makes it pass."""
    _, folder = scratch_profile
    result = run("scratch_grpo.py", "--json", cwd=folder)
    assert result.returncode == 1
    assert {r["stage"] for r in failing(json.loads(result.stdout))} >= {"advantages"}


def test_known_bug_epsilon_is_a_finding_and_is_not_written(tmp_path):
    trainer_copy(tmp_path, "EPSILON = 1e-6", "EPSILON = 1e4")
    result = run("profile", "scratch_grpo.py", "--json", "--write", "cfg.yaml", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    document = json.loads(result.stdout)
    assert any("1e4" in finding for finding in document["findings"]), document["findings"]
    assert "advantage_epsilon" not in document["conventions"]
    config = yaml.safe_load((tmp_path / "cfg.yaml").read_text()).get("config", {})
    assert "advantage_epsilon" not in config, config
    check = run("cfg.yaml", "--json", cwd=tmp_path)  # the bug is still there to be found
    assert check.returncode == 1
    assert "advantages" in {r["stage"] for r in failing(json.loads(check.stdout))}


@pytest.mark.parametrize("epsilon, convention", [("1e-2", True), ("0.5", False)])
def test_an_epsilon_below_the_rewards_spread_is_a_convention(tmp_path, epsilon, convention):
    """A project's own 1e-2 (rlzero's rz-accum-kl declares it) is written as the convention;
    0.5, above the 0.33 spread of one success in 8 binary rewards, damps every advantage and is
    a finding (conventions.MAX_CONVENTIONAL_EPSILON)."""
    trainer_copy(tmp_path, "EPSILON = 1e-6", f"EPSILON = {epsilon}")
    result = run("profile", "scratch_grpo.py", "--json", cwd=tmp_path)
    document = json.loads(result.stdout)
    damped = [f for f in document["findings"] if "damps every advantage" in f]
    if convention:
        assert document["conventions"]["advantage_epsilon"] == pytest.approx(float(epsilon))
        assert damped == [], document["findings"]
    else:
        assert "advantage_epsilon" not in document["conventions"]
        assert damped and "epsilon 5e-1" in damped[0], document["findings"]


def test_mask_without_eos_is_a_finding(tmp_path):
    """A mask that drops the EOS token itself (a real bug: it gets no gradient) is a finding."""
    trainer_copy(
        tmp_path, "return (eos_before == 0).long()", "return (eos_before + is_eos == 0).long()"
    )
    result = run("profile", "scratch_grpo.py", "--json", cwd=tmp_path)
    assert result.returncode == 1
    findings = json.loads(result.stdout)["findings"]
    assert any(f.startswith("masking:") for f in findings), findings


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("profile", "missing.py"), "no such file"),
        (("profile", "trl", "--write", "cfg.yaml"), "--write"),
    ],
)
def test_profile_bad_input_is_one_line(args, fragment, tmp_path):
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr, lines
    assert not (tmp_path / "cfg.yaml").exists()


def test_profile_of_a_module_that_cannot_load_is_one_line(tmp_path):
    shutil.copy(SCRATCH, tmp_path / "broken.py")
    (tmp_path / "broken.py").write_text("import numpy_that_does_not_exist\n")
    result = run("profile", "broken.py", cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


SUBCLASSES = Path(__file__).resolve().parent / "data" / "trainer_subclasses.py"


def test_profile_takes_a_subclass_and_its_config_then_writes_a_trainer_yaml(tmp_path):
    """`profile FILE.py:CLASS --config FILE.py:NAME` builds the subclass with the user's config, as
    the check command does (CONFIG's loss_type grpo is what the loss measures, not the release's
    dapo), and `--write` gives a `trainer:` YAML that declares only what no GRPOConfig field
    states (the population std); `grpo-check` of that file passes the advantage checks."""
    folder = tmp_path / "cfg"
    folder.mkdir()
    shutil.copy(SUBCLASSES, tmp_path / "trainer_subclasses.py")
    target, config = (
        "trainer_subclasses.py:PopulationStdGRPOTrainer",
        "trainer_subclasses.py:CONFIG",
    )
    written = folder / "cfg.yaml"
    result = run(
        "profile", target, "--config", config, "--json", "--write", str(written), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    measured = json.loads(result.stdout)["conventions"]
    assert measured["loss_type"] == "grpo" and measured["std_estimator"] == "population", measured
    assert yaml.safe_load(written.read_text()) == {
        "trainer": "../trainer_subclasses.py:PopulationStdGRPOTrainer",
        "grpo_config": "../trainer_subclasses.py:CONFIG",
        "config": {"std_estimator": "population"},
    }
    checked = run("cfg/cfg.yaml", "--json", "--stage", "advantages", cwd=tmp_path)
    assert checked.returncode == 0, failing(json.loads(checked.stdout))


@pytest.mark.xdist_group("trl_matrix_0")  # the worker that fetches TRL 0.17
def test_profile_of_stock_trl_0_17_measures_its_own_loss_type(tmp_path):
    """TRL 0.17's default loss is bnpo (the local token count: num_items_in_batch changes
    nothing), and profile says so; stock TRL gets no finding, and nothing is pinned but the one
    option the release lacks (`use_bias_correction_kl`, whose checks skip there anyway)."""
    from trl_releases import import_environment

    done = subprocess.run(
        [GRPO_CHECK, "profile", "trl", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=import_environment("0.17.0"),
    )
    document = json.loads(done.stdout)
    assert done.returncode == 0, document
    assert document["conventions"]["loss_type"] == "bnpo", document
    assert document["supported"] == {"use_bias_correction_kl": [False]}, document


SCORERS = """
import torch

def selective_log_softmax(logits, index):
    return torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)

def completion_logps(logits, completion_ids, temperature=1.0):
    return selective_log_softmax(logits[:, :-1] / temperature, completion_ids)
"""


def test_the_temperature_row_names_which_scorer_takes_none(tmp_path):
    """A trainer whose low-level scorer takes no temperature but whose completion scorer does is
    not reported as scoring at T = 1 only (a blind user's nano-aha-moment profile said so)."""
    (tmp_path / "candidate.py").write_text(SCORERS)
    result = run("profile", "candidate.py", cwd=tmp_path)
    table = " ".join(result.stdout.replace("│", " ").split())
    assert "scoring at T = 1 only" not in table, table
    assert "not taken by selective_log_softmax" in table and "completion_logps takes it" in table
