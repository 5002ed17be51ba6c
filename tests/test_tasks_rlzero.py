"""rlzero, the reference family's independent trainer: it shares nothing with reference_impl, its
probes see every injected bug, and copying reference_impl in its place does not score."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from rlzero_harness import inputs_of, observe

from reference_impl.protocol import ALL_FUNCTIONS
from task_harness.build import TRAINERS, _independent_trainer, build_task
from task_harness.shortcuts import take
from task_harness.spec import load_tasks
from task_harness.verifier import judge, rlzero_probes

RZ_TASKS = [spec for spec in load_tasks() if spec.trainer == "rlzero"]
TRAINER_MODULES = sorted((TRAINERS / "rlzero" / "rlzero").glob("*.py"))


@pytest.fixture(scope="module")
def intended(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("intended") / "tree"
    _independent_trainer("rlzero", root)
    return root


def test_rlzero_is_written_apart_from_reference_impl():
    """No import of reference_impl and none of the stage protocol's function names, so neither a
    module copy nor a name-for-name copy of reference_impl drops in."""
    for module in TRAINER_MODULES:
        tree = ast.parse(module.read_text())
        imported = {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        }
        assert not any(name.startswith("reference_impl") for name in imported), module.name
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert not defined & set(ALL_FUNCTIONS), module.name


def test_the_suite_has_rlzero_tasks_with_three_bugs_and_decoys():
    assert len(RZ_TASKS) >= 5
    for spec in RZ_TASKS:
        bugs = [b for b in spec.bugs if b.kind == "bug"]
        decoys = [b for b in spec.bugs if b.kind == "decoy"]
        assert len(bugs) >= 3, spec.id
        assert sum(d.weight for d in decoys) >= 0.2 - 1e-9, spec.id


@pytest.fixture(scope="module")
def intended_by_stage(intended):
    """The intended trainer's observations, per stage, computed once."""
    stages = {stage for stage, _ in rlzero_probes.PROBES.values()}
    return {stage: observe(intended, [stage]) for stage in sorted(stages)}


def test_each_probe_gives_the_same_result_twice(intended, intended_by_stage):
    """The probes are deterministic, so a difference is the code's, never the seed's."""
    stages = sorted({stage for stage, _ in rlzero_probes.PROBES.values()})
    first = {name: v for seen in intended_by_stage.values() for name, v in seen.items()}
    second = observe(intended, stages)
    assert not [n for n, v in second.items() if isinstance(v, dict) and "error" in v]
    assert [n for n in first if not judge.same(second[n], first[n])] == []


# Each task's bugs with that task's conventions applied, as its workspace has them.
TASK_BUGS = [
    (spec, patch, next(b.stage for b in spec.bugs if b.id == patch.id))
    for spec in RZ_TASKS
    for patch in spec.patches
    if patch.kind == "bug"
]


def _trainer_with_setup(root: Path, spec) -> Path:
    _independent_trainer("rlzero", root)
    for setup in (p for p in spec.patches if p.kind == "setup"):
        setup.mutant.apply(root)
    return root


@pytest.fixture(scope="module")
def intended_tree(tmp_path_factory):
    """Each task's trainer without its bugs, built once."""
    trees: dict[str, Path] = {}

    def tree(spec) -> Path:
        if spec.id not in trees:
            trees[spec.id] = _trainer_with_setup(tmp_path_factory.mktemp(spec.id) / "tree", spec)
        return trees[spec.id]

    return tree


@pytest.fixture(scope="module")
def task_inputs(intended_tree):
    """The probes' inputs each task's verifier passes (its intended trainer's), computed once."""
    made: dict[str, dict] = {}

    def inputs(spec) -> dict:
        if spec.id not in made:
            made[spec.id] = inputs_of(intended_tree(spec))
        return made[spec.id]

    return inputs


@pytest.fixture(scope="module")
def intended_by_task(intended_tree):
    """The observations of each task's trainer without its bugs, per (task, stage), computed once."""
    seen: dict[tuple[str, str], dict] = {}

    def observed(spec, stage: str) -> dict:
        if (spec.id, stage) not in seen:
            seen[spec.id, stage] = observe(intended_tree(spec), [stage])
        return seen[spec.id, stage]

    return observed


@pytest.mark.parametrize(
    "spec, patch, stage", TASK_BUGS, ids=[f"{s.id}:{p.id}" for s, p, _ in TASK_BUGS]
)
def test_every_bug_is_seen_under_its_tasks_conventions(
    spec, patch, stage, intended_by_task, task_inputs, tmp_path
):
    """A bug alone in its own task's trainer (its conventions applied) changes what a probe of its
    stage sees. Not the base trainer: a convention may hide a bug there or show one only there (a
    KL mean per micro-batch equals a token-mean loss's share for one micro-batch; a per-micro-batch
    token count changes nothing under the base's dr_grpo), and the task scores its own trainer."""
    buggy = _trainer_with_setup(tmp_path / "buggy", spec)
    patch.mutant.apply(buggy)
    expected, seen = (
        intended_by_task(spec, stage),
        observe(buggy, [stage], None, task_inputs(spec)),
    )
    differing = [n for n in expected if not judge.same(seen[n], expected[n])]
    assert differing, f"{spec.id}: {patch.id} is seen by no probe of stage {stage}"


# Known couplings (task, the bug left in): with that bug left in and the others fixed, a probe of a
# fixed bug's stage still fails. The loop probes (`update.*`, `kl.*`, `ratio.second_pass`,
# `reference_model.learner`) and `advantages.rollout` run a one-prompt rollout (no row layout)
# whose counted tokens, reward-function scores and rows left out are the verifier's inputs (the
# intended trainer's, `rlzero_probes.loop_inputs`); the KL probes take one pass (the old policy
# across passes is the ratio stage's); `reference_model.learner` reads the reference itself, not
# the KL the objective logs; `logprobs.rollout` takes completions no masking rule cuts. So a
# masking, reward, layout, pass or objective bug left in no longer reaches a fixed stage. What
# remains runs in the fixed stage's own computation. strict: a pair that stops failing is taken
# out, and a new coupling fails the test.
COUPLED = {
    # The scorer is the update's own forward pass: a shifted or untempered scorer left in changes
    # the log-probs the update differentiates, so its loss and its step.
    ("rz-format-shift", "logit_shift_off_by_one"),
    ("rz-succ-temperature", "scoring_without_temperature"),
    # The loop's advantages are the learner's own (from the given scores): they carry the task's
    # conventions (the std's divisor and epsilon, task_harness/conventions.py), the one thing that
    # keeps a sibling task's fixed trainer from solving a task whose bug stages have none (given
    # advantages let three siblings' oracles score 1.0 on rz-eos-stop,
    # tests/test_tasks_conventions.py). So a bug in how the epsilon enters reaches the loop.
    ("rz-succ-temperature", "epsilon_after_division"),
}


def test_every_known_coupling_names_a_bug_of_its_task():
    known = {(spec.id, patch.id) for spec, patch, _ in TASK_BUGS}
    assert not COUPLED - known, COUPLED - known


@pytest.mark.parametrize(
    "spec, patch, stage",
    [
        pytest.param(
            *case,
            marks=pytest.mark.xfail(
                (case[0].id, case[1].id) in COUPLED, reason="a loop probe runs the bug", strict=True
            ),
        )
        for case in TASK_BUGS
    ],
    ids=[f"{s.id}:{p.id}" for s, p, _ in TASK_BUGS],
)
def test_the_bugs_fixed_score_whichever_one_is_left(
    spec, patch, stage, intended_by_task, task_inputs, tmp_path
):
    """A fix of every bug but one scores the fixed ones: with only `patch` left in, every probe of
    the other bugs' stages sees what the intended trainer gives. (rz-trust-region's blind agents
    fixed its update bug, left its clipping bug, and scored 0 on the update while the update
    probes ran off policy through the clipping; they now run on policy.)"""
    others = {b.stage for b in spec.bugs if b.kind == "bug" and b.id != patch.id} - {stage}
    left_in = _trainer_with_setup(tmp_path / "left-in", spec)
    patch.mutant.apply(left_in)
    seen = observe(left_in, sorted(others), None, task_inputs(spec))
    differing = [
        name
        for other in sorted(others)
        for name, expected in intended_by_task(spec, other).items()
        if not judge.same(seen[name], expected)
    ]
    assert not differing, f"{spec.id}: with {patch.id} left in, the fixed stages fail {differing}"


def test_reference_copy_loses_the_trainers_conventions(tmp_path, intended):
    """reference_impl under rlzero's names: the population std and the length-independent loss
    are gone, so the decoys that guard them fail."""
    (spec,) = [s for s in RZ_TASKS if s.id == "rz-format-stop"]
    built = build_task(spec, tmp_path)
    workspace = built / "environment" / "workspace"
    task = json.loads((built / "tests" / "task.json").read_text())
    protected = {rel: (workspace / rel).read_bytes() for rel in task["protected"]}
    replaced = take("reference-copy", workspace, task)
    assert "rlzero/advantages.py" in replaced and (workspace / "rlzero" / "_reference").is_dir()
    assert {rel: (workspace / rel).read_bytes() for rel in task["protected"]} == protected
    names = ["advantages.pairs", "loss_aggregation.lengths"]
    copied, own = observe(workspace, [], names), observe(intended, [], names)
    assert [n for n in names if not judge.same(copied[n], own[n])] == names


def test_a_fix_may_put_a_removed_parameter_back_anywhere(tmp_path, intended_by_stage):
    """`sampler_without_temperature` removes `sample_groups`'s temperature parameter; a blind agent
    put it back last, with a default, and its callers to match. The generation probes pass the
    arguments by name, so that fix sees what the intended trainer sees."""
    fixed = tmp_path / "fixed"
    _independent_trainer("rlzero", fixed)
    sampling = fixed / "rlzero" / "sampling.py"
    moved = sampling.read_text().replace(
        "    temperature: float,\n    eos_id: int,\n    pad_id: int,\n",
        "    eos_id: int,\n    pad_id: int,\n    temperature: float = 1.0,\n",
    )
    assert moved != sampling.read_text()
    sampling.write_text(moved)
    learner = fixed / "rlzero" / "learner.py"
    call = "            cfg.temperature,\n            tok.eos_token_id,\n            tok.pad_token_id,\n"
    assert call in learner.read_text()
    learner.write_text(
        learner.read_text().replace(
            call,
            "            tok.eos_token_id,\n            tok.pad_token_id,\n            cfg.temperature,\n",
        )
    )
    expected, seen = intended_by_stage["generation"], observe(fixed, ["generation"])
    assert [n for n in expected if not judge.same(seen[n], expected[n])] == []


def test_a_mask_fix_may_add_the_eos_beside_the_pad(tmp_path, intended_by_stage):
    """`pad_masks_eos` renames `completion_tokens_mask`'s `eos_id` to `pad_id`. Two blind agents
    (rz-format-stop, fourth round) fixed it by adding an `eos_id=None` after `pad_id`, passed by
    every caller, and kept the old rule when it is None. The masking probes name the EOS as the
    function's own callers do, so that fix sees what the intended trainer sees."""
    (spec,) = [s for s in RZ_TASKS if s.id == "rz-format-stop"]
    (bug,) = [p for p in spec.patches if p.id == "pad_masks_eos"]
    fixed = tmp_path / "fixed"
    _independent_trainer("rlzero", fixed)
    bug.mutant.apply(fixed)
    sampling = fixed / "rlzero" / "sampling.py"
    pad_rule = "    return (completion_ids != pad_id).int()\n"
    assert pad_rule in sampling.read_text()
    sampling.write_text(
        sampling.read_text()
        .replace(
            "def completion_tokens_mask(completion_ids: torch.Tensor, pad_id: int) -> torch.Tensor:",
            "def completion_tokens_mask(\n"
            "    completion_ids: torch.Tensor, pad_id: int, eos_id: int | None = None\n"
            ") -> torch.Tensor:",
        )
        .replace(
            pad_rule,
            "    if eos_id is None:\n"
            "        return (completion_ids != pad_id).int()\n"
            "    is_eos = (completion_ids == eos_id).int()\n"
            "    return ((torch.cumsum(is_eos, dim=1) - is_eos) == 0).int()\n",
        )
    )
    for module, tokenizer in (("learner.py", "tok"), ("evaluation.py", "tokenizer")):
        path = fixed / "rlzero" / module
        call = f"pad_id={tokenizer}.pad_token_id)"
        assert call in path.read_text()
        path.write_text(
            path.read_text().replace(
                call, f"pad_id={tokenizer}.pad_token_id, eos_id={tokenizer}.eos_token_id)"
            )
        )
    expected, seen = intended_by_stage["masking"], observe(fixed, ["masking"])
    assert [n for n in expected if not judge.same(seen[n], expected[n])] == []


# Right fixes written with other float arithmetic: each leaves the numbers equal to float rounding.
FLOAT_REWRITES = {
    # A trial agent's advantages (after grpo-check flagged adv_eps below fp32 rounding).
    "advantages_in_float64": (
        "advantages.py",
        "    return (centred / (std + eps)).reshape(-1)\n",
        "    return (centred.double() / (std.double() + eps)).float().reshape(-1)\n",
    ),
    "ratio_in_float64": (
        "objective.py",
        "    ratio = torch.exp(importance_log_ratio(logp, old_logp, mask, importance_level))\n",
        "    ratio = torch.exp(\n"
        "        importance_log_ratio(logp.double(), old_logp.double(), mask, importance_level)\n"
        "    ).float()\n",
    ),
}


@pytest.mark.parametrize("rewrite", sorted(FLOAT_REWRITES))
def test_a_fix_in_other_float_arithmetic_passes_the_loop_probes(
    rewrite, tmp_path, intended, intended_by_stage
):
    """The loop probes compare parameters after optimizer steps, so they step with SGD, whose
    step is proportional to the gradient: under the learner's AdamW, a gradient coordinate of
    rounding noise moved by the whole step size, and the float64 advantages above failed
    ratio.second_pass (64 parameters off by up to 1.3e-3)."""
    module, find, replace = FLOAT_REWRITES[rewrite]
    rewritten = tmp_path / "rewritten"
    _independent_trainer("rlzero", rewritten)
    path = rewritten / "rlzero" / module
    assert find in path.read_text()
    path.write_text(path.read_text().replace(find, replace))
    stages = ["ratio", "update", "kl", "reference_model"]
    seen = observe(rewritten, stages, None, inputs_of(intended))
    differing = [
        name
        for stage in stages
        for name, expected in intended_by_stage[stage].items()
        if not judge.same(seen[name], expected)
    ]
    assert differing == []


def test_the_loop_inputs_cross_to_the_child_as_plain_data(intended, tmp_path):
    """The verifier passes the loop probes' inputs in the job as JSON (verify.intended_inputs,
    rlzero_probes.main): what the child rebuilds from them gives the loop probes what the inputs
    themselves give."""
    from task_harness.verifier import plain

    inputs = inputs_of(intended)
    crossed = plain.decode(json.loads(json.dumps(plain.encode(inputs))))
    names = sorted(rlzero_probes.GIVEN)
    direct, child = observe(intended, [], names, inputs), observe(intended, [], names, crossed)
    assert [n for n in names if not judge.same(child[n], direct[n])] == []
    assert not [n for n, v in direct.items() if isinstance(v, dict) and "error" in v]


def test_a_failure_names_the_entry_that_differs_not_those_that_agree():
    """Two observations with the same keys: the log line shows the differing entry only, so a
    long entry that agrees does not push it out of the line."""
    agree = torch.tensor([False, True] * 4)
    expected = {"left_out": agree, "advantages": torch.tensor([0.5, -0.5])}
    seen = {"left_out": agree.clone(), "advantages": torch.tensor([0.25, -0.25])}
    line = judge.difference(expected, seen)
    assert (
        line
        == "expected {advantages: tensor(2,)[0.5, -0.5]}, got {advantages: tensor(2,)[0.25, -0.25]}"
    )
    assert "left_out" not in line
