"""`tasks generate --seed N --bugs K`: a fresh reference-family task drawn from the mutant corpus.

K mutants of `task_harness/corpus/reference.yaml` in K distinct stages (at most one inside
`compute_loss`, whose stages share code paths), a symptom-only instruction made of their
symptoms, the hidden verifier and the oracle. Unless told not to, the task is built and the nop
agent scored: a drawn bug the verifier cannot see (nop scores it) is replaced by another draw.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import yaml

from task_harness.mutants import Mutant, load_corpus
from task_harness.spec import load_task

LOSS_STAGES = {"ratio", "clipping", "kl", "loss_aggregation"}
MAX_REDRAWS = 6


class GenerateError(RuntimeError):
    """The corpus cannot supply the requested task."""


def draw(
    corpus: list[Mutant], rng: random.Random, count: int, exclude: set[str], kept=()
) -> list[Mutant]:
    """`count` mutants in stages distinct from each other and from `kept`'s, at most one of all
    of them in compute_loss's stages."""
    pool = [m for m in corpus if m.id not in exclude]
    rng.shuffle(pool)
    chosen: list[Mutant] = []
    for mutant in pool:
        stages = {m.stage for m in (*kept, *chosen)}
        if mutant.stage in stages or (mutant.stage in LOSS_STAGES and stages & LOSS_STAGES):
            continue
        chosen.append(mutant)
        if len(chosen) == count:
            return [*kept, *chosen]
    raise GenerateError(f"the corpus has no {count} mutants in distinct stages")


def _train_config(stages: set[str]) -> dict:
    """A training run in which every drawn stage is exercised."""
    config: dict = {"task": "succ", "max_steps": 60}
    if stages & {"kl", "reference_model"}:
        config["beta"] = 0.04
    if stages & {"ratio", "clipping"}:
        config["num_iterations"] = 2
    if "logprobs" in stages:
        config["temperature"] = 0.7
    return config


def _toml(task_id: str, bugs: list[Mutant], weights: list[float], train: dict) -> str:
    lines = [
        'version = "1.0"',
        "",
        "[metadata]",
        'author_name = "grpo-check tasks generate"',
        f'difficulty = "{"medium" if len(bugs) == 1 else "hard"}"',
        'category = "debugging"',
        'tags = ["grpo", "from-scratch", "generated"]',
        "",
        "[verifier]\ntimeout_sec = 900\n\n[agent]\ntimeout_sec = 2700\n",
        "[environment]\ncpus = 2\nmemory_mb = 4096\nstorage_mb = 10240\n",
        "[grpo]",
        'family = "reference"',
        f"stages = {[m.stage for m in bugs]!r}".replace("'", '"'),
        "notes = \"minigrpo is our from-scratch GRPO trainer. It follows TRL 1.16's GRPOTrainer "
        '(one process, no gradient accumulation)."',
        "bugs = [",
    ]
    lines += [
        f'  {{ id = "{m.id}", stage = "{m.stage}", weight = {w!r} }},'
        for m, w in zip(bugs, weights, strict=True)
    ]
    lines += ["]", "", "[grpo.train]"]
    lines += [
        f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}".replace(
            "'", '"'
        )
        for key, value in train.items()
    ]
    return "\n".join(lines) + "\n"


def _instruction(bugs: list[Mutant]) -> str:
    symptoms = [m.symptom.rstrip(".") for m in bugs if m.symptom] or ["the reward does not improve"]
    listed = "\n".join(f"- {s[0].upper() + s[1:]}." for s in symptoms)
    return (
        "Our from-scratch GRPO trainer (`minigrpo`, run with `python train.py`) misbehaves. What we\n"
        f"see:\n\n{listed}\n\nFind what is wrong in the trainer and fix it. Do not modify `train.py`,\n"
        "`minigrpo/toy_tasks.py` or `minigrpo/tiny.py`.\n"
    )


def write_task(folder: Path, bugs: list[Mutant]) -> Path:
    share = round(1 / len(bugs), 4)
    weights = [share] * (len(bugs) - 1) + [round(1 - share * (len(bugs) - 1), 4)]
    folder.mkdir(parents=True, exist_ok=True)
    train = _train_config({m.stage for m in bugs})
    (folder / "task.toml").write_text(_toml(folder.name, bugs, weights, train))
    (folder / "instruction.md").write_text(_instruction(bugs))
    patches = [
        {
            "id": m.id,
            "kind": "bug",
            "stage": m.stage,
            "file": m.file,
            "find": m.find,
            "replace": m.replace,
            "description": m.description,
            "source": m.source,
        }
        for m in bugs
    ]
    (folder / "patches.yaml").write_text(yaml.safe_dump(patches, sort_keys=False, width=100))
    return folder


def generate_task(seed: int, num_bugs: int, out: Path, verify: bool = True) -> Path:
    """Write `out/gen-s<seed>-k<K>/` and return it."""
    from task_harness.build import build_task
    from task_harness.runner import run_trial

    if num_bugs < 1:
        raise GenerateError("--bugs must be at least 1")
    corpus = load_corpus("reference")
    rng = random.Random(seed)
    folder = out / f"gen-s{seed}-k{num_bugs}"
    rejected: set[str] = set()
    bugs = draw(corpus, rng, num_bugs, rejected)
    for _ in range(MAX_REDRAWS):
        write_task(folder, bugs)
        if not verify:
            return folder
        with tempfile.TemporaryDirectory() as scratch:
            built = build_task(load_task(folder), Path(scratch))
            nop = run_trial(built, "nop")
        unseen = {m.id for m in bugs if nop.bugs.get(m.id, 1.0) != 0.0}
        if nop.status == "ok" and not unseen:
            return folder
        rejected |= unseen
        kept = [m for m in bugs if m.id not in unseen]
        bugs = kept + draw(
            [m for m in corpus if m.stage not in {k.stage for k in kept}],
            rng,
            len(unseen),
            rejected,
        )
    raise GenerateError(f"no drawable bugs the verifier detects after {MAX_REDRAWS} draws")
