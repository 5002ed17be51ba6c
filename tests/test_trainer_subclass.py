"""`grpo-check FILE.py:CLASS`: a user's GRPOTrainer subclass checked as the `trl` kind checks
GRPOTrainer, on TRL 0.17.0, 1.14.2 and 1.16.0 (tests/data/trainer_subclasses.py).

Per release one child process (the release first on PYTHONPATH, as tests/test_trl_matrix.py
does) resolves each target as the command line does and runs the checks in-process, as the
sandbox's child does: a logging override passes with 0 failures, with and without the user's
config (a dict of GRPOConfig fields whose conventions the checks then compare against); a
`_compute_loss` override with a wrong normaliser fails in `loss_aggregation` alone, located at the
override's line; from 1.14.2 an advantage override with population std passes once it declares
`std_estimator: population` in YAML (`trainer:`), and fails in `advantages` at its line without;
on 1.16.0 a clip with one epsilon is told to declare `clipping: symmetric`, and passes once it does,
and an `epsilon_high: 0.28` declared in YAML over a config without it is the one TRL's clip runs at.
A `_compute_loss` whose KL term is not TRL's local `per_token_kl` (a renamed copy of TRL's, and from
1.14.2 the team's own token-mean loss) has its per-token KL measured by value and passes; the same
loss with k3 reversed fails at its `def`; one that averages over padding skips with that cause.
Targets that cannot be built are one line and exit 2 through the real command line.

Run as a script (`python tests/test_trainer_subclass.py JOBS_JSON`) it is that child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
SUBCLASSES = DATA / "trainer_subclasses.py"
SEED = 1234


# ---------------------------------------------------------------------------------------------
# Child side


def _forget_adapter() -> None:
    """Drop the adapter modules (they are built around one trainer class); TRL stays imported."""
    import checker.adapters

    for name in [n for n in sys.modules if n.startswith("checker.adapters.")]:
        del sys.modules[name]
    for attribute, value in list(vars(checker.adapters).items()):
        if isinstance(value, types.ModuleType):
            delattr(checker.adapters, attribute)


def check_target(
    target: str, grpo_config: str | None, stages: list[str], profiled: str | None = None
) -> dict:
    """The checks of `stages` (all when empty) on one target, as the command line runs them;
    with `profiled` (a YAML path), on the file `grpo-check profile --write` writes for it."""
    from checker.candidate import TargetError, load_candidate, resolve_target
    from checker.checks import all_checks
    from checker.coverage import uncovered
    from checker.diagnosis import diagnose
    from checker.profile import measure, yaml_text
    from checker.runner import run_one

    if profiled:
        _forget_adapter()
        spec = resolve_target(target, "auto", grpo_config)
        written = Path(profiled)
        written.write_text(yaml_text(spec, measure(load_candidate(spec)), written))
        target, grpo_config = profiled, None
    _forget_adapter()
    try:
        spec = resolve_target(target, "auto", grpo_config)
        candidate = load_candidate(spec)
    except TargetError as error:
        return {"fatal": str(error)}
    results = [run_one(check, candidate, SEED) for check in all_checks(stages)]
    failing = [
        {"check": r.check, "stage": r.stage, "location": r.location, "message": r.message[:600]}
        for r in results
        if r.status in ("fail", "error")
    ]
    skipped = {r.check: r.message for r in results if r.status == "skip"}
    passed = [r.check for r in results if r.status == "pass"]
    summary = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "error", "skip")}
    adapter = sys.modules["checker.adapters.trl_adapter"]
    return {
        "failing": failing,
        "summary": summary,
        "skipped": skipped,
        "passed": passed,
        "diagnosis": diagnose(results),
        "uncovered": uncovered(results),
        "config": {k: candidate.config[k] for k in ("loss_type", "beta", "std_estimator")},
        "trl": adapter.harness.GRPO_TRAINER_FILE,
    }


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(1)
    jobs = json.loads(sys.argv[1])
    print(json.dumps({name: check_target(*job) for name, job in jobs.items()}))
    sys.exit(0)


import pytest  # noqa: E402 - the child above needs neither pytest nor the release cache
from trl_releases import import_paths  # noqa: E402

CHILD_TIMEOUT = 900
LOSS_STAGES = ["ratio", "clipping", "kl", "loss_aggregation"]


def _line_of(text: str, after: str) -> int:
    """The 1-based line of the first `text` after the line holding `after` in SUBCLASSES."""
    lines = SUBCLASSES.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def _jobs(version: str, tmp_path: Path) -> dict[str, list]:
    jobs = {
        "logging": ["trainer_subclasses.py:LoggingGRPOTrainer", None, []],
        "logging_with_config": [
            "trainer_subclasses.py:LoggingGRPOTrainer",
            "trainer_subclasses.py:CONFIG",
            LOSS_STAGES,
        ],
        "row_sum": ["trainer_subclasses.py:RowSumGRPOTrainer", None, LOSS_STAGES],
    }
    if version != "0.17.0":  # `_calculate_rewards` exists from TRL 1.0
        for name, declared in (("population", True), ("population_undeclared", False)):
            yaml = tmp_path / f"{name}.yaml"
            lines = [f"trainer: {SUBCLASSES}:PopulationStdGRPOTrainer"]
            lines += ["config: {std_estimator: population}"] if declared else []
            yaml.write_text("\n".join(lines) + "\n")
            stages = ["rewards", "advantages", "masking", "update"] if declared else ["advantages"]
            jobs[name] = [str(yaml), None, stages]  # the stages its override runs in
        jobs["think_strip"] = ["trainer_subclasses.py:ThinkStripGRPOTrainer", None, ["decode"]]
        jobs["answer_only"] = ["trainer_subclasses.py:AnswerOnlyGRPOTrainer", None, ["decode"]]
    if version == "1.16.0":  # a symmetric clip, with `epsilon` alone and with its declaration
        for name, config in (
            ("symmetric_epsilon", "{epsilon: 0.2}"),
            ("symmetric_declared", "{epsilon: 0.2, clipping: symmetric}"),
        ):
            yaml = tmp_path / f"{name}.yaml"
            yaml.write_text(f"trainer: {SUBCLASSES}:SymmetricClipGRPOTrainer\nconfig: {config}\n")
            jobs[name] = [str(yaml), None, ["clipping"]]
        # clip-higher declared beside the trainer, its GRPOConfig left at the release's default
        # (epsilon_high None): TRL's clip, which honours it, and the one-epsilon clip, which not
        for name, cls in (("clip_higher", "Logging"), ("clip_higher_symmetric", "SymmetricClip")):
            yaml = tmp_path / f"{name}.yaml"
            config = "{epsilon: 0.2, epsilon_high: 0.28}"
            yaml.write_text(f"trainer: {SUBCLASSES}:{cls}GRPOTrainer\nconfig: {config}\n")
            jobs[name] = [str(yaml), None, ["clipping"]]
    if version == "1.16.0":  # a correct loss whose KL term has a name of its own
        jobs["renamed_kl"] = ["trainer_subclasses.py:RenamedKLGRPOTrainer", None, ["kl"]]
    if version != "0.17.0":  # the team's own `_compute_loss` (TRL 1.x), correct and buggy
        for name in ("TokenMean", "ReversedKL", "UnmaskedMean"):
            jobs[name] = [f"trainer_subclasses.py:{name}GRPOTrainer", None, ["kl"]]
        for name in ("TokenMean", "ReversedKL"):  # every stage, after `profile --write`
            written = str(tmp_path / f"{name}_profiled.yaml")
            jobs[f"{name}_profiled"] = [f"{SUBCLASSES}:{name}GRPOTrainer", None, [], written]
    if version == "1.16.0":  # what cannot be built, in the child (the CLI's one line: below)
        for name in ("NotATrainer", "NeedsRewardModel", "Missing"):
            jobs[name] = [f"trainer_subclasses.py:{name}", None, ["advantages"]]
    return jobs


_reports: dict[str, dict] = {}


def release_reports(version: str, tmp_path_factory) -> dict[str, dict]:
    if version not in _reports:
        paths = [REPO, *import_paths(version)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
        env["OMP_NUM_THREADS"] = "1"
        jobs = _jobs(version, tmp_path_factory.mktemp(f"subclass-{version}"))
        result = subprocess.run(
            [sys.executable, __file__, json.dumps(jobs)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            env=env,
            cwd=DATA,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        _reports[version] = json.loads(result.stdout.strip().splitlines()[-1])
    return _reports[version]


RELEASES = ["0.17.0", "1.14.2", "1.16.0"]
by_release = pytest.mark.parametrize(
    "version",
    [pytest.param(v, marks=pytest.mark.xdist_group(f"trainer_subclass_{v}")) for v in RELEASES],
)


@by_release
def test_logging_subclass_passes_on_the_release(version, tmp_path_factory):
    report = release_reports(version, tmp_path_factory)["logging"]
    assert f"trl-{version}" in report["trl"], report["trl"]  # the release was driven
    assert report["failing"] == [], report["failing"]
    assert report["summary"]["pass"] > report["summary"]["skip"], report["summary"]
    assert report["uncovered"] == {"decode": "the candidate does not provide strip_reasoning"}


@by_release
def test_the_users_config_sets_the_conventions_checked(version, tmp_path_factory):
    report = release_reports(version, tmp_path_factory)["logging_with_config"]
    assert report["failing"] == [], report["failing"]
    # the dict's loss_type and beta are what the checks compare against; bf16 and batch sizes
    # are grpo-check's own (the tiny model runs in fp32 on CPU)
    assert report["config"]["loss_type"] == "grpo" and report["config"]["beta"] == 0.04
    assert report["summary"]["pass"] > 0


@by_release
def test_a_bug_in_the_overridden_compute_loss_is_located_in_the_users_file(
    version, tmp_path_factory
):
    report = release_reports(version, tmp_path_factory)["row_sum"]
    failing = report["failing"]
    assert failing, "RowSumGRPOTrainer's normaliser was not detected"
    assert {r["stage"] for r in failing} == {"loss_aggregation"}, failing
    line = _line_of("def _compute_loss", "class RowSumGRPOTrainer")
    assert all(r["location"].endswith(f"trainer_subclasses.py:{line}") for r in failing), failing
    assert report["diagnosis"]["root_stages"] == ["loss_aggregation"], report["diagnosis"]


@pytest.mark.parametrize(
    "version",
    [pytest.param(v, marks=pytest.mark.xdist_group(f"trainer_subclass_{v}")) for v in RELEASES[1:]],
)
def test_an_advantage_override_passes_when_its_convention_is_declared(version, tmp_path_factory):
    reports = release_reports(version, tmp_path_factory)
    declared = reports["population"]
    assert declared["failing"] == [], declared["failing"]
    assert declared["config"]["std_estimator"] == "population"
    undeclared = reports["population_undeclared"]["failing"]
    assert undeclared and {r["stage"] for r in undeclared} == {"advantages"}, undeclared
    line = _line_of("def _generate_and_score_completions", "class PopulationStdGRPOTrainer")
    assert all(r["location"].endswith(f"trainer_subclasses.py:{line}") for r in undeclared)


@pytest.mark.parametrize(
    "version",
    [pytest.param(v, marks=pytest.mark.xdist_group(f"trainer_subclass_{v}")) for v in RELEASES[1:]],
)
def test_a_subclass_decode_helper_of_text_is_found_and_checked(version, tmp_path_factory):
    """A module function applied to each decoded text, and a `self.` method over the list."""
    reports = release_reports(version, tmp_path_factory)
    assert reports["think_strip"]["failing"] == [], reports["think_strip"]["failing"]
    assert reports["think_strip"]["summary"]["pass"] == 4, reports["think_strip"]["summary"]
    failing = reports["answer_only"]["failing"]
    assert "decode.plain_answer_is_unchanged" in {r["check"] for r in failing}, failing
    line = _line_of("def answers", "class AnswerOnlyGRPOTrainer")
    assert all(r["location"].endswith(f"trainer_subclasses.py:{line}") for r in failing)


@pytest.mark.xdist_group("trainer_subclass_1.16.0")
def test_a_symmetric_clip_is_told_how_to_declare_itself_and_passes_once_declared(
    tmp_path_factory,
):
    """`epsilon` alone does not declare one epsilon for both sides (TRL's epsilon_high, when
    set, still applies): the failure says what to declare; with `clipping: symmetric` the band
    is probed at the declared epsilon and cispo's epsilon_high cap, which such a trainer has
    not, is skipped."""
    reports = release_reports("1.16.0", tmp_path_factory)
    failing = reports["symmetric_epsilon"]["failing"]
    band = [r for r in failing if r["check"] == "clipping.zero_gradient_outside_band"]
    assert band and "epsilon_high is ignored" in band[0]["message"], failing
    assert "declare `clipping: symmetric`" in band[0]["message"]
    declared = reports["symmetric_declared"]
    assert declared["failing"] == [], declared["failing"]
    cispo = declared["skipped"]["clipping.cispo_caps_weight_at_epsilon_high"]
    assert "clipping: symmetric" in cispo
    assert declared["summary"]["pass"] >= 4, declared["summary"]


@pytest.mark.xdist_group("trainer_subclass_1.16.0")
def test_an_epsilon_high_declared_in_yaml_is_the_one_the_trainer_is_driven_at(tmp_path_factory):
    """`config: {epsilon: 0.2, epsilon_high: 0.28}` beside a trainer whose GRPOConfig leaves
    epsilon_high at None: the checks pass no keyword equal to a declared value, so the trainer
    must run at the declared 0.28 when none is passed, not at the 0.2 its own config resolves
    None to (which failed TRL's own clip as "epsilon_high is ignored"). A clip that does ignore
    it still fails so."""
    reports = release_reports("1.16.0", tmp_path_factory)
    honoured = reports["clip_higher"]
    assert honoured["failing"] == [], honoured["failing"]
    assert "clipping.zero_gradient_outside_band" in honoured["passed"], honoured
    failing = reports["clip_higher_symmetric"]["failing"]
    band = [r for r in failing if r["check"] == "clipping.zero_gradient_outside_band"]
    assert band and "epsilon_high is ignored" in band[0]["message"], failing


# A fork of TRL 1.16 as in the trl-skillsbench-trio task: `_generate` decodes with the fork's
# helper of the tokenizer and ids, whose last branch blanks plain answers (SkillsBench's bug).
FORK_HELPER = """

def decode_and_strip_reasoning(processing_class, completion_ids, open_tag="<think>", close_tag="</think>"):
    texts = processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    return [text.split(close_tag, 1)[1].strip() if close_tag in text else "" for text in texts]
"""
STOCK_DECODE = (
    "completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)\n"
)
FORK_DECODE = "completions = decode_and_strip_reasoning(self.processing_class, completion_ids)\n"


@pytest.mark.xdist_group("trainer_subclass_1.16.0")
def test_a_forks_decode_helper_in_generate_is_found_and_checked(tmp_path):
    from trl_releases import trl_release_path

    fork = tmp_path / "fork"
    shutil.copytree(trl_release_path("1.16.0"), fork, ignore=shutil.ignore_patterns("__pycache__"))
    source = fork / "trl" / "trainer" / "grpo_trainer.py"
    text = source.read_text()
    assert text.count(STOCK_DECODE) == 1  # the 1.16 decode site in `_generate`, non-chat branch
    source.write_text(text.replace(STOCK_DECODE, FORK_DECODE) + FORK_HELPER)
    result = grpo_check(str(fork), "--stage", "decode", "--json")
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-2000:])
    failing = [r for r in json.loads(result.stdout)["results"] if r["status"] == "fail"]
    assert "decode.plain_answer_is_unchanged" in {r["check"] for r in failing}, failing
    assert all(str(source) in r["location"] for r in failing), failing


def grpo_check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", "from checker.cli import main; main()", *args],
        cwd=DATA,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


CANNOT_BE_BUILT = {
    "NotATrainer": "NotATrainer is not a subclass of trl's GRPOTrainer (it derives from object)",
    "NeedsRewardModel": "NeedsRewardModel.__init__ requires reward_model, which grpo-check cannot",
    "Missing": "trainer_subclasses.py has no Missing",
}


@pytest.mark.xdist_group("trainer_subclass_1.16.0")
def test_what_cannot_be_built_is_one_line_and_exit_2(tmp_path_factory):
    reports = release_reports("1.16.0", tmp_path_factory)
    for name, words in CANNOT_BE_BUILT.items():
        assert words in reports[name].get("fatal", ""), reports[name]
    result = grpo_check("trainer_subclasses.py:NeedsRewardModel", "--json", "--workers", "1")
    assert result.returncode == 2 and result.stdout == "", result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and CANNOT_BE_BUILT["NeedsRewardModel"] in lines[0], lines


def test_trainer_targets_resolve_without_importing_the_candidate(tmp_path, monkeypatch):
    """FILE.py:CLASS, module:CLASS and `trainer:` in YAML are the trl kind with the class named;
    --config and `grpo_config` name the config; misuse is one line (TargetError)."""
    from checker.candidate import TargetError, resolve_target

    monkeypatch.chdir(DATA)
    spec = resolve_target("trainer_subclasses.py:LoggingGRPOTrainer", grpo_config="mypkg.cfg:CFG")
    assert spec.kind == "trl" and spec.trainer == f"{SUBCLASSES}:LoggingGRPOTrainer"
    assert spec.grpo_config == "mypkg.cfg:CFG"
    assert resolve_target("mypkg.trainers:MyTrainer").trainer == "mypkg.trainers:MyTrainer"
    shutil.copy(SUBCLASSES, tmp_path / "mine.py")
    yaml = tmp_path / "conf" / "mine.yaml"  # `trainer:` is relative to the YAML file
    yaml.parent.mkdir()
    yaml.write_text(
        "trainer: ../mine.py:RowSumGRPOTrainer\n"
        "grpo_config: {loss_type: grpo}\nconfig: {std_estimator: population}\n"
    )
    spec = resolve_target(str(yaml))
    assert spec.trainer == f"{(tmp_path / 'mine.py').resolve()}:RowSumGRPOTrainer"
    assert spec.grpo_config == {"loss_type": "grpo"}
    assert spec.config == {"std_estimator": "population"}
    for target, config, words in [
        ("missing.py:Trainer", None, "missing.py: no such file"),
        (str(SUBCLASSES), "cfg.py:CONFIG", "a GRPOConfig is for a trainer"),
    ]:
        with pytest.raises(TargetError, match=words):
            resolve_target(target, grpo_config=config)


PER_TOKEN_KL_CHECKS = {"kl.per_token_kl_matches_reference", "kl.per_token_kl_zero_at_reference"}


@pytest.mark.xdist_group("trainer_subclass_1.16.0")
def test_a_kl_term_of_another_name_is_measured_by_value_and_passes(tmp_path_factory):
    """A correct subclass whose `_compute_loss` names TRL's `per_token_kl` otherwise has its
    per-token KL measured from the loss it returns: every KL check runs and passes."""
    report = release_reports("1.16.0", tmp_path_factory)["renamed_kl"]
    assert report["failing"] == [], report["failing"]
    assert report["summary"]["fail"] == report["summary"]["error"] == 0, report["summary"]
    assert set(report["passed"]) >= PER_TOKEN_KL_CHECKS, report["skipped"]


@pytest.mark.parametrize(
    "version",
    [pytest.param(v, marks=pytest.mark.xdist_group(f"trainer_subclass_{v}")) for v in RELEASES[1:]],
)
def test_the_teams_own_loss_has_its_kl_checked_by_value(version, tmp_path_factory):
    """A `_compute_loss` of the team's own (token-mean aggregation, KL named `kl`) passes every
    KL check; the same loss with k3 reversed fails the per-token check as a swapped direction,
    located at its `def`; one that averages over padding cannot be separated token by token, so
    the per-token checks skip and say why."""
    reports = release_reports(version, tmp_path_factory)
    correct = reports["TokenMean"]
    assert correct["failing"] == [], correct["failing"]
    assert set(correct["passed"]) >= PER_TOKEN_KL_CHECKS, correct["skipped"]
    failing = reports["ReversedKL"]["failing"]
    by_check = {r["check"]: r for r in failing}
    assert "kl.per_token_kl_matches_reference" in by_check, failing
    assert "the KL direction is swapped" in by_check["kl.per_token_kl_matches_reference"]["message"]
    line = _line_of("def _compute_loss", "class ReversedKLGRPOTrainer")
    assert all(r["location"].endswith(f"trainer_subclasses.py:{line}") for r in failing), failing
    skipped = reports["UnmaskedMean"]["skipped"]
    for name in PER_TOKEN_KL_CHECKS:
        assert "has a gradient on tokens its mask leaves out" in skipped.get(name, ""), skipped


@pytest.mark.parametrize(
    "version",
    [pytest.param(v, marks=pytest.mark.xdist_group(f"trainer_subclass_{v}")) for v in RELEASES[1:]],
)
def test_the_teams_own_loss_passes_every_check_after_profile(version, tmp_path_factory):
    """The team's own token-mean loss ignores loss_type, importance_sampling_level and delta:
    profile writes `loss_agg_mode: token-mean` and pins those options (`supported:`), and every
    check of every stage then passes or skips naming the option; the same loss with k3 reversed
    still fails its KL checks at its `def` after profile."""
    reports = release_reports(version, tmp_path_factory)
    correct = reports["TokenMean_profiled"]
    assert correct["failing"] == [], correct["failing"]
    skipped = correct["skipped"]
    assert (
        "importance_sampling_level='sequence'" in skipped["ratio.sequence_ratio_is_geometric_mean"]
    )
    assert "loss_type=" in skipped["loss_aggregation.sapo_gradient_matches_formula"]
    assert "loss_aggregation.own_loss_type_matches_formula" in correct["passed"]
    assert "loss_aggregation.accumulated_gradient_matches_one_batch" in correct["passed"]
    failing = {r["check"] for r in reports["ReversedKL_profiled"]["failing"]}
    assert "kl.per_token_kl_matches_reference" in failing, failing


def test_profile_measures_no_kl_estimator_where_the_loss_cannot_be_separated():
    """Where a subclass's own loss cannot be measured by value (UnmaskedMeanGRPOTrainer), the
    per_token_kl checks skip; profile then measures no estimator and reports no finding, since a
    finding would be written to the YAML and fail the check as a bug."""
    from checker.profile import Profile, probe_kl

    def per_token_kl(per_token_logps, ref_per_token_logps):
        raise NotImplementedError("own-loss KL by value: one token's loss is not finite")

    profile = Profile()
    probe_kl(types.SimpleNamespace(functions={"per_token_kl": per_token_kl}), profile)
    assert profile.findings == [] and "kl_estimator" not in profile.conventions, profile
