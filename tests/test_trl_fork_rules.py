"""The trl tasks' fork rules (`trl_judge.py`): each one a bug or decoy of a trl task is judged by
passes on the task's intended fork and fails on upstream TRL, so restoring upstream files loses it.

For every trl task, the rules its task.toml names are observed in a child on two workspaces: the
built task with the oracle's files (the intended fork) and the same workspace with upstream TRL
(the installed release, which the fork was made from) in place of the fork.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from task_harness.build import build_task, installed_trl
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e-trl")

VERIFIER = Path(__file__).resolve().parents[1] / "task_harness" / "verifier"
sys.path.insert(0, str(VERIFIER))

import plain  # noqa: E402
import trl_judge  # noqa: E402

# The forks of the TRL installed here (a task on an older release is judged by its conventions)
TRL_SPECS = [s for s in load_tasks() if s.family == "trl" and s.trl_version is None]
UPSTREAM_STAGE_RULES = set(trl_judge.JUDGES) - {
    name for name in trl_judge.JUDGES if "." in name or name == "decode_reasoning"
}


def _fork_rules(spec) -> list[str]:
    """The rules of `spec` that judge fork semantics (not a stage's upstream check)."""
    rules = {rule for b in spec.bugs for rule in b.probes}
    return sorted(rule for rule in rules if rule not in UPSTREAM_STAGE_RULES)


def _observe(workspace: Path, tests: Path, jobs: list[tuple[list[str], dict]]) -> list[dict]:
    """What the probes see of `workspace`'s TRL for each (rules, conventions), in one child."""
    outs = [workspace.parent / f"{workspace.name}-seen-{i}.json" for i in range(len(jobs))]
    payload = json.dumps(
        [
            trl_judge.make_job([], rules, conventions) | {"out": str(out)}
            for (rules, conventions), out in zip(jobs, outs, strict=True)
        ]
    )
    code = (
        f"import json, sys; sys.path[1:1] = [{str(tests)!r}, 'trl']; import trl_probes; "
        f"[trl_probes.main(job) for job in json.loads({payload!r})]"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [plain.load(out) for out in outs]


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """{task id: (rules, conventions, seen on the intended fork, seen on upstream TRL)}.

    Each fork is observed in a child of its own; upstream TRL, the same for every task, in one
    child for all of them (the probes take the tiny model and its tokenizer from the job, not
    from the workspace)."""
    intended_seen, jobs = {}, {}
    for spec in TRL_SPECS:
        root = build_task(spec, tmp_path_factory.mktemp(spec.id))
        workspace = root / "environment" / "workspace"
        intended = root / "intended"
        shutil.copytree(workspace, intended, symlinks=True)
        shutil.copytree(root / "solution" / "files", intended, dirs_exist_ok=True)
        tests = root / "tests"
        conventions = json.loads((tests / "task.json").read_text()).get("conventions") or {}
        jobs[spec.id] = (_fork_rules(spec), conventions)
        (intended_seen[spec.id],) = _observe(intended, tests, [jobs[spec.id]])
    upstream = tmp_path_factory.mktemp("upstream") / "workspace"
    shutil.copytree(installed_trl(), upstream / "trl" / "trl")
    upstream_seen = _observe(upstream, tests, list(jobs.values()))
    return {
        task_id: (*jobs[task_id], intended_seen[task_id], seen)
        for task_id, seen in zip(jobs, upstream_seen, strict=True)
    }


def test_every_trl_task_judges_fork_semantics_and_scores_decoys():
    for spec in TRL_SPECS:
        decoys = [b for b in spec.bugs if b.kind == "decoy"]
        assert sum(b.weight for b in decoys) >= 0.2 - 1e-9, spec.id
        assert _fork_rules(spec), spec.id
        for rule in {r for b in spec.bugs for r in b.probes}:
            assert rule.startswith("defaults.") or rule in trl_judge.JUDGES, (spec.id, rule)


@pytest.mark.parametrize("task_id", [s.id for s in TRL_SPECS])
def test_the_intended_fork_passes_each_rule_and_upstream_fails_it(observed, task_id):
    rules, conventions, intended, upstream = observed[task_id]
    for rule in rules:
        assert trl_judge.judge(intended, rule, conventions) == [], (task_id, rule)
        assert trl_judge.judge(upstream, rule, conventions), (task_id, rule, "upstream passes")


def test_fork_loss_is_trl_loss_without_the_fork_terms():
    """`_fork_loss` with no extra term is reference_impl's TRL 1.16 loss (grpo and dapo, KL on)."""
    from reference_impl import compute_loss

    g = torch.Generator().manual_seed(3)
    mask = (torch.rand(6, 5, generator=g) > 0.3).int()
    mask[:, 0] = 1
    logps = -torch.rand(6, 5, generator=g) * 3
    old = logps - (torch.rand(6, 5, generator=g) - 0.5)
    ref = logps + (torch.rand(6, 5, generator=g) - 0.5)
    advantages = torch.randn(6, generator=g)
    for loss_type in ("grpo", "dapo"):
        kwargs = dict(loss_type=loss_type, epsilon_high=0.28, beta=0.04)
        ours = trl_judge._fork_loss(logps, advantages, mask, old, ref, mask.sum(), **kwargs)
        theirs = compute_loss(
            logps,
            advantages,
            mask,
            old_per_token_logps=old,
            ref_per_token_logps=ref,
            num_items_in_batch=mask.sum(),
            **kwargs,
        )
        assert torch.allclose(ours, theirs, atol=1e-6), loss_type


def test_a_defaults_rule_reads_json_or_a_bare_string():
    seen = {"defaults": {"beta": 0.04, "loss_type": "grpo", "mask_truncated_completions": True}}
    assert trl_judge.judge(seen, "defaults.beta=0.04") == []
    assert trl_judge.judge(seen, "defaults.loss_type=grpo") == []
    assert trl_judge.judge(seen, "defaults.mask_truncated_completions=true") == []
    assert trl_judge.judge(seen, "defaults.beta=0.0")
    assert trl_judge.judge(seen, "defaults.mask_truncated_completions=1")
    assert trl_judge.judge(seen, "defaults.kl_clamp=10.0")  # a field upstream lacks


def test_a_report_on_inputs_other_than_the_verifiers_fails():
    """Degenerate inputs that any rule computed from the child's own report would agree with
    (equal rewards and zero advantages, zero advantages with a zero loss) fail: the rules judge
    from the verifier's inputs and first check that the child reports them."""
    rows = trl_judge.ROWS
    seen = {
        f"advantages.{scale}": (torch.ones(rows, 1), torch.zeros(rows))
        for scale in ("group", "batch", "none")
    }
    problems = trl_judge.judge(seen, "advantages")
    assert len(problems) == 3 and all("the reward functions returned" in p for p in problems)
    given = trl_judge.loss_inputs()
    case = {
        "loss": torch.tensor(0.0),
        "grad": torch.zeros(rows, trl_judge.COMPLETION_LENGTH),
        "logps": -torch.rand(rows, trl_judge.COMPLETION_LENGTH),
        "mask": given["mask"],
        "advantages": torch.zeros(rows),
        "old": None,
        "ref": None,
        "num_items_in_batch": None,
    }
    seen = {name: dict(case) for name in trl_judge.LOSS_CASES}
    problems = trl_judge.judge(seen, "loss_aggregation")
    assert len(problems) == 4
    assert all("the advantages the loss was given are not the verifier's" in p for p in problems)
    seen = {name: dict(case, advantages=given["advantages"]) for name in trl_judge.LOSS_CASES}
    problems = trl_judge.judge(seen, "loss_aggregation")  # the verifier's inputs: 0 is wrong
    assert len(problems) == 4 and all(" loss: expected " in p for p in problems), problems
