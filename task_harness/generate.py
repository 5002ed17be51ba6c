"""`tasks generate --seed N --bugs K`: a fresh rlzero task, its bugs drawn and their symptoms measured.

The corpus is the bugs of the shipped rlzero tasks (`tasks/rz-*/patches.yaml`, each with its
stage and its `condition` from task.toml) and their decoys. A draw takes K bugs in distinct
stages (at most one inside `surrogate_loss`, whose stages share a line of code), at least half
of them with a condition, and one decoy; the training run is configured so that every condition
holds (a temperature below 1 for "temperature != 1", several passes for "passes > 1", ...). The
task's own conventions (eps, std estimator, trust region, loss normaliser) are drawn too
(`task_harness/conventions.py`), so that no other task's fixed trainer is this one's.

A draw whose patches together leave a name unused that the fixed trainer uses (an import, a
helper, a parameter: `task_harness/traces.py`) is redrawn: a generated workspace carries no more
trace of its bugs than a shipped one. Then the task is measured (`task_harness/symptoms.py`): its `train.py` runs fixed, with every bug
and with each bug alone. A bug whose run a user could not tell from the fixed one is redrawn, and
the instruction reports what the run with every bug shows against the fixed run: outcomes, never
the mechanism. Unless told not to (`verify=False`), the task is then verified as `tasks verify`
does: a bug nop scores (the verifier cannot see it) is redrawn, as are the bugs copying
reference_impl fixes when that copy scores more than the baselines may; and its difficulty is
measured and recorded (`task_harness/difficulty.py`). Without verification the label stays
"hard", unmeasured.
"""

from __future__ import annotations

import json
import random
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from task_harness import conventions, symptoms, traces
from task_harness.build import TRAINERS
from task_harness.mutants import Mutant, MutantError
from task_harness.spec import TASKS_DIR, Bug, load_task, load_tasks

LOSS_STAGES = {"ratio", "clipping", "kl", "loss_aggregation"}
RLZERO = TRAINERS / "rlzero"
MAX_REDRAWS = 6
BUG_WEIGHT, DECOY_WEIGHT = 0.8, 0.2
TARGET = 0.9  # rlzero's RunConfig.target: the fixed run stops there
TOY_TASKS = {
    "succ": 'the successor task ("d =" answered with the next digit)',
    "format": 'the format task ("A =" answered with "7", then the end of the completion)',
}


class GenerateError(RuntimeError):
    """The corpus cannot supply the requested task."""


@dataclass(frozen=True)
class Drawable:
    """One bug of the corpus: its patch and its entry in a task's bug list."""

    mutant: Mutant
    bug: Bug


@dataclass(frozen=True)
class Corpus:
    bugs: list[Drawable]
    decoys: list[Bug]


def load_corpus(tasks_dir: Path = TASKS_DIR) -> Corpus:
    """The bugs and the decoys of the shipped rlzero tasks, each once."""
    bugs: dict[str, Drawable] = {}
    decoys: dict[str, Bug] = {}
    for spec in load_tasks(tasks_dir):
        if spec.trainer != "rlzero":
            continue
        patches = {p.id: p.mutant for p in spec.patches if p.kind == "bug"}
        for bug in spec.bugs:
            if bug.kind == "decoy":
                decoys.setdefault(bug.id, bug)
            elif bug.id not in bugs:
                bugs[bug.id] = Drawable(patches[bug.id], bug)
    if not bugs:
        raise GenerateError(f"no rlzero task in {tasks_dir} to draw bugs from")
    return Corpus(
        sorted(bugs.values(), key=lambda d: d.bug.id),
        sorted(decoys.values(), key=lambda d: d.id),
    )


def apply_together(mutants: list[Mutant]) -> bool:
    """Whether `mutants` apply one after another to rlzero's sources: two bugs of different stages
    may rewrite the same text (the sampler's and the scorer's temperature bugs both rewrite the
    config's help for `temperature`), and such a pair cannot share a task."""
    texts: dict[str, str] = {}
    for mutant in mutants:
        edits = [(mutant.file, mutant.find, mutant.replace)]
        edits += [(h["file"], h["find"], h["replace"]) for h in mutant.hunks]
        for file, find, replace in edits:
            text = texts.get(file)
            if text is None:
                text = (RLZERO / file).read_text()
            if text.count(find) != 1:
                return False
            texts[file] = text.replace(find, replace)
    return True


def draw(
    corpus: list[Drawable], rng: random.Random, count: int, exclude: set[str], kept=()
) -> list[Drawable]:
    """`kept` plus bugs up to `count` in all, in distinct stages (at most one of them in
    surrogate_loss's), at least half of them with a condition."""
    pool = [d for d in corpus if d.bug.id not in exclude and d not in kept]
    for _ in range(200):
        rng.shuffle(pool)
        chosen = list(kept)
        for item in pool if len(chosen) < count else ():
            stages = {d.bug.stage for d in chosen}
            stage = item.bug.stage
            if stage in stages or (stage in LOSS_STAGES and stages & LOSS_STAGES):
                continue
            if not apply_together([d.mutant for d in (*chosen, item)]):
                continue
            chosen.append(item)
            if len(chosen) == count:
                break
        conditioned = sum(1 for d in chosen if d.bug.condition)
        if len(chosen) == count and 2 * conditioned >= count:
            return chosen
    raise GenerateError(
        f"the corpus has no {count} bugs in distinct stages, half of them needing a measurement"
    )


def train_config(bugs: list[Drawable]) -> dict:
    """A run of `train.py` under which every drawn bug's condition holds and its stage runs."""
    conditions = {d.bug.condition for d in bugs}
    stages = {d.bug.stage for d in bugs}
    needs_format = "pad == EOS" in conditions or "a reward that needs the EOS" in conditions
    config: dict = {"task": "format" if needs_format or "masking" in stages else "succ"}
    if "temperature != 1" in conditions or stages & {"logprobs", "generation"}:
        config["temperature"] = 0.7
    if "kl_coef > 0" in conditions or stages & {"kl", "reference_model"}:
        config["kl_coef"] = 0.04
    if "reference synced (ref_sync_every > 0)" in conditions:
        config["kl_coef"] = 0.04
        config["ref_sync_every"] = 5
    if "grad_accum_steps > 1" in conditions:
        config["grad_accum_steps"] = 2
    if "passes > 1" in conditions or stages & {"ratio", "clipping"}:
        config["passes"] = 4 if "clipping" in stages else 2
    if "sequence-level ratio over passes > 1" in conditions:
        config["importance_level"] = "sequence"
        config["passes"] = config.get("passes", 2)
    config["steps"] = 150
    return config


def _bug_line(bug: Bug, weight: float) -> str:
    fields = [f'id = "{bug.id}"', f'stage = "{bug.stage}"', f"weight = {weight!r}"]
    if bug.kind == "decoy":
        fields += ['kind = "decoy"', f'guards = "{bug.guards}"']
        fields.append("probes = [" + ", ".join(f'"{p}"' for p in bug.probes) + "]")
    elif bug.condition:
        fields.append(f'condition = "{bug.condition}"')
    return "  { " + ", ".join(fields) + " },"


def _toml(bugs: list[Drawable], decoy: Bug, train: dict, notes: str) -> str:
    share = round(BUG_WEIGHT / len(bugs), 4)
    weights = [share] * (len(bugs) - 1) + [round(BUG_WEIGHT - share * (len(bugs) - 1), 4)]
    lines = [
        'version = "1.0"',
        "",
        "[metadata]",
        'author_name = "grpo-check tasks generate"',
        'difficulty = "hard"',
        'category = "debugging"',
        'tags = ["grpo", "from-scratch", "generated"]',
        "",
        "[verifier]\ntimeout_sec = 900\n\n[agent]\ntimeout_sec = 2700\n",
        "[environment]\ncpus = 2\nmemory_mb = 4096\nstorage_mb = 10240\n",
        "[grpo]",
        'family = "reference"',
        'trainer = "rlzero"',
        "notes = " + json.dumps(notes),
        "stages = [" + ", ".join(f'"{d.bug.stage}"' for d in bugs) + "]",
        "bugs = [",
        *(_bug_line(d.bug, w) for d, w in zip(bugs, weights, strict=True)),
        _bug_line(decoy, DECOY_WEIGHT),
        "]",
        "",
        "[grpo.train]",
        *(f"{k} = " + (f'"{v}"' if isinstance(v, str) else repr(v)) for k, v in train.items()),
    ]
    return "\n".join(lines) + "\n"


def write_task(
    folder: Path,
    bugs: list[Drawable],
    decoy: Bug,
    train: dict,
    sentences: list[str],
    drawn: conventions.Conventions | None = None,
) -> Path:
    """Write the task's spec; `decoy` guards the first bug (scored once that bug is fixed);
    `drawn` are the task's conventions (default: the pristine trainer's)."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn = drawn or conventions.Conventions()
    decoy = Bug(**{**decoy.__dict__, "guards": bugs[0].bug.id})
    (folder / "task.toml").write_text(_toml(bugs, decoy, train, drawn.notes()))
    (folder / "instruction.md").write_text(instruction(train, sentences))
    patches = conventions.setup_patches(drawn) + [
        {
            "id": d.mutant.id,
            "kind": "bug",
            "stage": d.mutant.stage,
            "file": d.mutant.file,
            "find": d.mutant.find,
            "replace": d.mutant.replace,
            "source": d.mutant.source,
        }
        | ({"hunks": [dict(h) for h in d.mutant.hunks]} if d.mutant.hunks else {})
        for d in bugs
    ]
    (folder / "patches.yaml").write_text(yaml.safe_dump(patches, sort_keys=False, width=100))
    return folder


def instruction(train: dict, sentences: list[str]) -> str:
    settings = []
    if "temperature" in train:
        settings.append(f"sampling at temperature {train['temperature']}")
    if "kl_coef" in train:
        settings.append(f"with `kl_coef = {train['kl_coef']}`")
    passes = train.get("passes", 1)
    settings.append(f"{passes} optimizer pass{'es' if passes > 1 else ''} over each rollout")
    how = ", ".join(settings[:-1]) + (" and " if len(settings) > 1 else "") + settings[-1]
    observed = " ".join(sentences) or "Now it does not learn as it used to."
    report = (
        f"Our trainer `rlzero` (run with `python train.py`) trains the tiny model on "
        f"{TOY_TASKS[train['task']]}, {how}. {observed}"
    )
    ask = (
        "Find what is wrong in the trainer and fix it, keeping the project's conventions "
        "described in NOTES.md. Do not modify `train.py`, `rlzero/toy_tasks.py` or "
        "`rlzero/tiny.py`."
    )
    return textwrap.fill(report, 99) + "\n\n" + textwrap.fill(ask, 99) + "\n"


def leaves_traces(folder: Path, bugs: list[Drawable]) -> list[str]:
    """The drawn bugs to redraw because together they leave a name unused that the fixed trainer
    uses (`traces.spec_traces`): those whose patches touch a file the finding names, else all;
    or, when one bug's patch no longer applies after another's, the later of the two."""
    try:
        found = traces.spec_traces(load_task(folder))
    except MutantError as error:
        return [d.bug.id for d in bugs if d.bug.id in str(error)] or [d.bug.id for d in bugs]
    if not found:
        return []
    named = [d.bug.id for d in bugs if any(f in line for f in d.mutant.files for line in found)]
    return named or [d.bug.id for d in bugs]


def measure(folder: Path, bugs: list[Drawable]) -> tuple[list[str], list[str]]:
    """Run the task in `folder` fixed, with every bug and with each alone: the sentences that
    describe the run with every bug, and the bugs whose own run looks like the fixed one."""
    runs = symptoms.measure_task(load_task(folder))
    fixed, everything = runs["fixed"], runs["all bugs"]
    if fixed.crash or not fixed.steps:
        raise GenerateError(f"the fixed trainer's run failed: {fixed.crash or 'no log lines'}")
    invisible = [d.bug.id for d in bugs if not symptoms.differences(runs[d.bug.id], fixed, TARGET)]
    if not symptoms.differences(everything, fixed, TARGET):
        invisible = [d.bug.id for d in bugs]
    return symptoms.describe(everything, fixed, TARGET), invisible


def _verify(folder: Path, bugs: list[Drawable]) -> tuple[list[str], str]:
    """Score nop and reference-copy on the task and measure its difficulty: the drawn bugs to
    redraw (nop scores them: the verifier does not see them; or copying reference_impl fixes
    them and with them more than `BASELINE_MAX` of the task), and the measured difficulty."""
    from task_harness import difficulty
    from task_harness.baselines import BASELINE_MAX
    from task_harness.build import build_task
    from task_harness.runner import run_trial

    ids = [d.bug.id for d in bugs]
    with tempfile.TemporaryDirectory(prefix="grpo-generate-") as scratch:
        spec = load_task(folder)
        built = build_task(spec, Path(scratch))
        nop = run_trial(built, "nop")
        if nop.status != "ok":
            return ids, ""
        unseen = [b for b in ids if nop.bugs.get(b, 1.0) != 0.0]
        if unseen:
            return unseen, ""
        copied = run_trial(built, "reference-copy")
        fixed_by_copy = [b for b in ids if copied.bugs.get(b, 0.0) == 1.0]
        if copied.reward > BASELINE_MAX or len(fixed_by_copy) == len(ids):
            return fixed_by_copy, ""
        measured = difficulty.measure(spec, built, {"reference-copy": copied.reward})
    difficulty.write(spec, measured)
    return [], measured.difficulty


def generate_task(seed: int, num_bugs: int, out: Path, verify: bool = True) -> Path:
    """Write `out/gen-s<seed>-k<K>/` and return it."""
    if num_bugs < 1:
        raise GenerateError("--bugs must be at least 1")
    corpus = load_corpus()
    rng = random.Random(seed)
    folder = out / f"gen-s{seed}-k{num_bugs}"
    rejected: set[str] = set()
    bugs = draw(corpus.bugs, rng, num_bugs, rejected)
    for _ in range(MAX_REDRAWS):
        decoy = rng.choice(corpus.decoys)
        drawn = conventions.draw(rng, decoy.id)
        train = train_config(bugs)
        write_task(folder, bugs, decoy, train, [], drawn)
        unseen = leaves_traces(folder, bugs)
        if unseen:
            sentences = []
        else:
            sentences, unseen = measure(folder, bugs)
        if not unseen:
            write_task(folder, bugs, decoy, train, sentences, drawn)
            if not verify:
                return folder
            unseen, _ = _verify(folder, bugs)
        if not unseen:
            return folder
        rejected |= set(unseen)
        kept = [d for d in bugs if d.bug.id not in unseen]
        bugs = draw(corpus.bugs, rng, num_bugs, rejected, kept)
    raise GenerateError(f"no drawable bugs with a visible effect after {MAX_REDRAWS} draws")
