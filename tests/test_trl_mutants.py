"""The `trl` kind catches single-spot bugs in TRL itself and names the stage they are in.

Each mutant of `tests/mutants/trl.yaml` is applied to a fresh copy of the installed TRL package in a
temporary folder; a child process puts that copy first on sys.path, imports `checker.trl_adapter`
(which drives the copy's GRPOTrainer) and runs one probe per stage that compares the adapter with
`reference_impl`. The stage named is the first failing probe in pipeline order, the way a root
cause is named when a wrong upstream value also spoils downstream stages. Stock TRL must fail none.

The probes are built so that a bug in another stage cannot make them fail: the ratio, clipping
and kl probes compare gradient directions under bnpo/cispo (their normaliser is one scalar, which
cancels), the ratio probe stays inside the clip band with positive advantages, the kl probe uses
A = 0, and the aggregation probe runs on policy (ratio 1 in value).

Run as a script (`python tests/test_trl_mutants.py TRL_PARENT_DIR`) it is the child: it prints
one JSON object with the failing stages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PIPELINE = (
    "rewards",
    "advantages",
    "masking",
    "logprobs",
    "ratio",
    "clipping",
    "kl",
    "loss_aggregation",
    "generation",
    "reference_model",
    "update",
)
CHILD_TIMEOUT = 240


# ---------------------------------------------------------------------------------------------
# Child side: probes, one per stage (imports happen here, after the TRL copy is on sys.path)


def _close(ours, expected, atol: float) -> bool:
    import torch

    if ours.shape != expected.shape:
        return False
    return bool(torch.allclose(ours.float(), expected.float(), atol=atol, rtol=0, equal_nan=True))


def _direction(gradient):
    return gradient / gradient.abs().sum().clamp(min=1e-30)


def _loss_gradient(compute_loss, logps, advantages, mask, **options):
    import torch

    logps = logps.clone().requires_grad_()
    loss = compute_loss(logps, advantages, mask, **options)
    (gradient,) = torch.autograd.grad(loss, logps)
    return loss.detach(), gradient


def _fixtures() -> dict:
    import torch

    generator = torch.Generator().manual_seed(0)
    logps = -torch.rand(6, 8, generator=generator) * 3
    mask = torch.ones(6, 8, dtype=torch.long)
    mask[0, 5:] = 0
    mask[1, 2:] = 0
    mask[4, 6:] = 0
    return {
        "logps": logps,
        "mask": mask,
        "advantages": torch.randn(6, generator=generator),
        "near": logps + 0.08 * (2 * torch.rand(6, 8, generator=generator) - 1),
        "far": logps + 0.5 * torch.randn(6, 8, generator=generator),
        "ref": logps + 0.3 * torch.randn(6, 8, generator=generator),
    }


def probe_rewards(adapter, reference, data) -> bool:
    import torch

    per_func = torch.tensor([[1.0, 0.5, 2.0], [float("nan"), 1.0, 0.0], [float("nan")] * 3] * 2)
    weights = [1.0, 0.5, 2.0]
    return _close(
        adapter.combine_rewards(per_func, weights),
        reference.combine_rewards(per_func, weights),
        1e-6,
    )


def probe_advantages(adapter, reference, data) -> bool:
    import torch

    rewards = torch.tensor([0.0, 1.0, 1.0, 0.5, 0.2, float("nan"), 0.9, 0.4] + [0.35] * 4)
    rewards = torch.cat([rewards, torch.tensor([float("nan")] * 3 + [1.0])])
    return all(
        _close(
            adapter.compute_advantages(rewards, 4, scale),
            reference.compute_advantages(rewards, 4, scale),
            1e-6,
        )
        for scale in ("group", "batch", "none")
    )


def probe_masking(adapter, reference, data) -> bool:
    import torch

    ids = torch.tensor(
        [[5, 6, 1, 0, 0], [5, 6, 7, 8, 9], [1, 1, 1, 1, 1], [5, 2, 6, 1, 7], [5, 6, 7, 8, 1]]
    )
    return all(
        torch.equal(
            adapter.completion_mask(ids, eos, truncated).int(),
            reference.completion_mask(ids, eos, truncated).int(),
        )
        for eos in ([1], [1, 2])
        for truncated in (False, True)
    )


def probe_logprobs(adapter, reference, data) -> bool:
    import torch

    from reference_impl.tiny import load_tiny

    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 7, 17, generator=generator) * 3
    input_ids = torch.randint(3, 17, (3, 7), generator=generator)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    model, _ = load_tiny()
    attention = torch.ones_like(input_ids)
    attention[0, :2] = 0
    return (
        _close(
            adapter.selective_log_softmax(logits, input_ids, 0.7),
            reference.selective_log_softmax(logits, input_ids, 0.7),
            1e-5,
        )
        and _close(
            adapter.completion_logps(logits, input_ids, mask, 0.7),
            reference.completion_logps(logits, input_ids, mask, 0.7),
            1e-5,
        )
        and _close(
            adapter.get_per_token_logps(model, input_ids, attention, 4, 0.7),
            reference.get_per_token_logps(model, input_ids, attention, 4, 0.7),
            1e-5,
        )
    )


def _same_direction(adapter, reference, data, old, advantages, **options) -> bool:
    _, ours = _loss_gradient(
        adapter.compute_loss,
        data["logps"],
        advantages,
        data["mask"],
        old_per_token_logps=old,
        **options,
    )
    _, expected = _loss_gradient(
        reference.compute_loss,
        data["logps"],
        advantages,
        data["mask"],
        old_per_token_logps=old,
        **options,
    )
    return _close(_direction(ours), _direction(expected), 1e-6)


def probe_ratio(adapter, reference, data) -> bool:
    advantages = data["advantages"].abs() + 0.1  # A > 0 and ratios within 1 +- 0.09: no clipping
    return all(
        _same_direction(
            adapter,
            reference,
            data,
            data["near"],
            advantages,
            loss_type="bnpo",
            importance_sampling_level=level,
        )
        for level in ("token", "sequence")
    )


def probe_clipping(adapter, reference, data) -> bool:
    cases = [
        {"loss_type": "bnpo", "epsilon_high": 0.28},
        {"loss_type": "bnpo", "delta": 1.3},
        {"loss_type": "cispo", "epsilon_high": 1.2},
    ]
    return all(
        _same_direction(adapter, reference, data, data["far"], data["advantages"], **case)
        for case in cases
    )


def probe_kl(adapter, reference, data) -> bool:
    import torch

    zero = torch.zeros(6)
    return _close(
        adapter.per_token_kl(data["logps"], data["ref"]),
        reference.per_token_kl(data["logps"], data["ref"]),
        1e-6,
    ) and all(
        _same_direction(
            adapter,
            reference,
            data,
            data["far"],
            zero,
            loss_type="bnpo",
            beta=0.1,
            ref_per_token_logps=data["ref"],
            use_bias_correction_kl=corrected,
        )
        for corrected in (True, False)
    )


def probe_loss_aggregation(adapter, reference, data) -> bool:
    cases = [{"loss_type": t} for t in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")]
    cases += [
        {"loss_type": "dr_grpo", "max_completion_length": 12},
        {"loss_type": "dapo", "num_items_in_batch": 50},
    ]
    for case in cases:
        args = (data["logps"], data["advantages"], data["mask"])
        loss, gradient = _loss_gradient(adapter.compute_loss, *args, **case)
        expected_loss, expected_gradient = _loss_gradient(reference.compute_loss, *args, **case)
        if not (_close(loss, expected_loss, 1e-6) and _close(gradient, expected_gradient, 1e-7)):
            return False
    return True


def probe_generation(adapter, reference, data) -> bool:
    import torch

    from reference_impl import train
    from reference_impl.tiny import load_tiny

    model, _ = load_tiny()
    prompts = torch.tensor([[3, 14, 4, 12], [5, 14, 6, 12]])
    options = dict(num_generations=4, max_completion_length=6, eos_token_ids=[1], pad_token_id=0)
    samples = []
    for generate in (adapter.generate_completions, train.generate_completions):
        torch.manual_seed(3)
        samples.append(
            generate(model, prompts, torch.ones_like(prompts), temperature=0.7, **options)
        )
    width = max(sample.size(1) for sample in samples)
    ours, expected = (torch.nn.functional.pad(s, (0, width - s.size(1))) for s in samples)
    return torch.equal(ours, expected)


def probe_reference_model(adapter, reference, data) -> bool:
    import torch

    from reference_impl.tiny import load_tiny

    policy, _ = load_tiny()
    frozen = adapter.make_reference_model(policy)
    input_ids = torch.randint(3, 17, (2, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        return _close(frozen(input_ids).logits, policy(input_ids).logits, 1e-6)


def probe_update(adapter, reference, data) -> bool:
    import torch

    from reference_impl import train
    from reference_impl.tiny import load_tiny

    prompts = torch.tensor([[3, 14, 4, 12], [5, 14, 6, 12]]).repeat_interleave(4, dim=0)
    completions = torch.randint(3, 17, (8, 5), generator=torch.Generator().manual_seed(5))
    completions[1, 2], completions[1, 3:] = 1, 0
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.25, 1.0])
    weights = []
    for grpo_step in (adapter.grpo_step, train.grpo_step):
        torch.manual_seed(6)
        policy, _ = load_tiny()
        frozen = train.make_reference_model(policy)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
        grpo_step(
            policy,
            optimizer,
            prompts,
            torch.ones_like(prompts),
            completions,
            rewards,
            num_generations=4,
            eos_token_ids=[1],
            reference=frozen,
            temperature=0.7,
            num_iterations=3,
            beta=0.04,
            loss_type="grpo",
        )
        weights.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    return _close(weights[0], weights[1], 1e-6)


PROBES: dict[str, Callable] = {stage: globals()[f"probe_{stage}"] for stage in PIPELINE}


def _import_adapter_from(tree: str):
    """Import `checker.trl_adapter` driving the TRL package under `tree`, dropping any TRL,
    adapter and harness imported before (torch and transformers stay: that is the slow part)."""
    import importlib

    import checker

    for name in [n for n in sys.modules if n == "trl" or n.startswith(("trl.", "checker.trl_"))]:
        del sys.modules[name]
    for attribute in ("trl_adapter", "trl_adapter_harness"):  # `from checker import x` reads these
        if hasattr(checker, attribute):
            delattr(checker, attribute)
    sys.path.insert(0, tree)
    try:
        return importlib.import_module("checker.trl_adapter")
    finally:
        sys.path.remove(tree)


def run_probes(tree: str) -> dict:
    """Every stage's probe on the TRL under `tree`; a probe that raises counts as failing."""
    import torch

    import reference_impl

    adapter = _import_adapter_from(tree)
    data = _fixtures()
    failed, errors = [], {}
    for stage, probe in PROBES.items():
        try:
            passed = probe(adapter, reference_impl, data)
        except Exception as error:  # noqa: BLE001 - a mutant may break TRL in any way
            passed, errors[stage] = False, f"{type(error).__name__}: {error}"[:300]
        if not passed:
            failed.append(stage)
    torch.manual_seed(0)
    return {"failed": failed, "errors": errors, "trl": adapter.harness.GRPO_TRAINER_FILE}


# ---------------------------------------------------------------------------------------------
# Parent side: the tests. Mutants run in two batches, one child process each (one per xdist
# worker): the child imports torch and transformers once and re-imports only TRL per mutant.


def installed_trl() -> Path:
    return Path(importlib.util.find_spec("trl").submodule_search_locations[0])


def mutated_copy(mutant, parent: Path) -> Path:
    """A copy of the installed `trl` package under `parent`, with `mutant` applied (None: stock)."""
    shutil.copytree(installed_trl(), parent / "trl", ignore=shutil.ignore_patterns("__pycache__"))
    if mutant is not None:
        mutant.apply(parent)
    return parent


def probe_trees(trees: list[Path]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, __file__, *map(str, trees)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    import torch

    torch.set_num_threads(1)
    print(json.dumps([run_probes(tree) for tree in sys.argv[1:]]))
    sys.exit(0)


import pytest  # noqa: E402 - the child above needs neither pytest nor the corpus

from checker.mutants import load_corpus  # noqa: E402

MUTANTS = load_corpus("trl")
NUM_BATCHES = 2
STOCK = None  # the unmutated copy, probed in batch 0


def batch_of(index: int) -> int:
    return index % NUM_BATCHES


_reports: dict[int, dict] = {}


def batch_reports(batch: int, tmp_path_factory) -> dict:
    """Reports of one batch by mutant id ("stock" for the unmutated copy), computed once."""
    if batch not in _reports:
        members = [m for i, m in enumerate(MUTANTS) if batch_of(i) == batch]
        if batch == 0:
            members.insert(0, STOCK)
        trees = [mutated_copy(m, tmp_path_factory.mktemp(m.id if m else "stock")) for m in members]
        reports = probe_trees(trees)
        _reports[batch] = {
            (m.id if m else "stock"): r for m, r in zip(members, reports, strict=True)
        }
    return _reports[batch]


def test_corpus_covers_the_stages_trl_has():
    stages = {mutant.stage for mutant in MUTANTS}
    assert len(MUTANTS) >= 15
    assert stages == set(PIPELINE), set(PIPELINE) - stages


def test_every_mutant_applies_to_the_installed_trl():
    root = installed_trl().parent
    for mutant in MUTANTS:
        mutant.apply_to_text((root / mutant.file).read_text())  # raises unless `find` occurs once


@pytest.mark.xdist_group("trl_mutants_0")
def test_stock_trl_passes_every_probe(tmp_path_factory):
    report = batch_reports(0, tmp_path_factory)["stock"]
    assert report["failed"] == [], report
    assert "/stock" in report["trl"]  # the copy on sys.path was the TRL driven


@pytest.mark.parametrize(
    "mutant",
    [
        pytest.param(m, id=m.id, marks=pytest.mark.xdist_group(f"trl_mutants_{batch_of(i)}"))
        for i, m in enumerate(MUTANTS)
    ],
)
def test_mutant_is_detected_in_its_stage(mutant, tmp_path_factory):
    batch = batch_of(MUTANTS.index(mutant))
    report = batch_reports(batch, tmp_path_factory)[mutant.id]
    assert report["failed"], f"{mutant.id} was not detected"
    assert report["failed"][0] == mutant.stage, (mutant.id, report)
