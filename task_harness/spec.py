"""A debug task as stored in the repository: `tasks/<id>/{task.toml, instruction.md, patches.yaml}`.

`task.toml` holds Harbor's fields plus our `[grpo]` table (family, stages, bugs with weights, the
training run the workspace script does). `patches.yaml` lists exact text replacements: `setup`
patches are the user's intended customisations (kept by the oracle), `bug` patches the injected
bugs (undone by the oracle). The build step (`build.py`) expands a spec into Harbor's layout.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from reference_impl.protocol import STAGES
from task_harness.installed import default_tasks_dir
from task_harness.mutants import Mutant, MutantError

TASKS_DIR = default_tasks_dir()
FAMILIES = ("reference", "trl", "user")
# The reference family's trainer: `rlzero`, an independent trainer with its own structure and
# conventions (task_harness/trainers/rlzero/), which copying reference_impl cannot stand in for.
# The user family's workspace is the user's own project (`mygrpo/`, trainers/mygrpo/: a
# GRPOTrainer subclass, its config, rewards and data) around a pristine, pip-installed TRL.
TRAINERS = {"reference": ("rlzero",), "trl": ("trl",), "user": ("mygrpo",)}
# The conditions a bug may show under (`condition` of a bug), each with what makes it hold in a
# task's run: its `[grpo.train]` settings, or the training script of its trainer. A bug's
# condition must hold in its own task, or the bug has no visible effect there.
TRL_REWARD_WEIGHTS = [1.0, 0.1]  # templates/train_trl.py.tmpl: answer and brevity rewards
EOS = "<eos>"  # the tiny tokenizer's EOS (reference_impl/tiny.py; not imported: it loads torch)


def _train(spec: TaskSpec, key: str, default: object) -> object:
    return spec.train.get(key, default)


CONDITIONS: dict[str, Callable[[TaskSpec], bool]] = {
    # rlzero's train.py sets pad_token = eos_token, as many chat models ship; a trl task's model
    # ships such a tokenizer when its [grpo.tokenizer] says so.
    "pad == EOS": lambda spec: (
        spec.trainer == "rlzero" or spec.toml["grpo"].get("tokenizer", {}).get("pad_token") == EOS
    ),
    "temperature != 1": lambda spec: _train(spec, "temperature", 1.0) != 1.0,
    # the user family's training script: 64 rows, 16 per prompt (trainers/mygrpo/)
    "several prompts per batch": lambda spec: spec.family == "user",
    "gradient_accumulation_steps > 1": lambda spec: (
        spec.family == "user" and _train(spec, "gradient_accumulation_steps", 1) > 1
    ),
    "passes > 1": lambda spec: spec.trainer == "rlzero" and _train(spec, "passes", 1) > 1,
    "num_iterations > 1": lambda spec: (
        spec.family in ("trl", "user") and _train(spec, "num_iterations", 1) > 1
    ),
    "kl_coef > 0": lambda spec: spec.trainer == "rlzero" and _train(spec, "kl_coef", 0.0) > 0,
    # rlzero syncs the reference only when it has one (kl_coef > 0).
    "reference synced (ref_sync_every > 0)": lambda spec: (
        spec.trainer == "rlzero"
        and _train(spec, "kl_coef", 0.0) > 0
        and _train(spec, "ref_sync_every", 0) > 0
    ),
    # A sequence-level ratio differs from 1 only after an update: from the second pass on.
    "sequence-level ratio over passes > 1": lambda spec: (
        spec.trainer == "rlzero"
        and _train(spec, "importance_level", "token") == "sequence"
        and _train(spec, "passes", 1) > 1
    ),
    "grad_accum_steps > 1": lambda spec: (
        spec.trainer == "rlzero" and _train(spec, "grad_accum_steps", 1) > 1
    ),
    "beta > 0": lambda spec: (
        (spec.family == "trl" and _train(spec, "beta", 0.0) > 0)
        or (spec.family == "user" and _train(spec, "beta", 0.04) > 0)
    ),
    "num_iterations == 1": lambda spec: (
        spec.family == "user" and _train(spec, "num_iterations", 1) == 1
    ),
    # rlzero samples prompts_per_step (default 8) distinct prompts per rollout.
    "several prompts per rollout": lambda spec: (
        spec.trainer == "rlzero" and _train(spec, "prompts_per_step", 8) > 1
    ),
    # rlzero's format task rewards "7" followed by the EOS.
    "a reward that needs the EOS": lambda spec: (
        spec.trainer == "rlzero" and _train(spec, "task", "") == "format"
    ),
    # The trl tasks' tiny model answers plainly: its completions never carry <think> tags.
    "completions without reasoning tags": lambda spec: spec.family == "trl",
    "several reward functions with unequal weights": lambda spec: (
        spec.family in ("trl", "user")
        and len(set(_train(spec, "reward_weights", TRL_REWARD_WEIGHTS))) > 1
    ),
}
TASK_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TRL_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


class TaskSpecError(ValueError):
    """A task folder that cannot be built; the message names the task and the cause."""


@dataclass(frozen=True)
class Bug:
    """One scored item: an injected bug, or a decoy (intended behaviour that guards a bug's fix)."""

    id: str
    stage: str
    weight: float
    kind: str = "bug"  # "bug" or "decoy"
    guards: str = ""  # decoy only: the bug whose fix must keep this behaviour
    # decoy: the observations that show the behaviour; trl bug: the rules (trl_judge.JUDGES) that
    # judge it instead of its stage's upstream check, i.e. the fork's intended semantics
    probes: tuple[str, ...] = ()
    # bug only: the condition of the task's run under which the bug shows and without which the
    # code reads as correct ("pad == EOS", "temperature != 1", "passes > 1"); "" for a bug that
    # reading the code against the formula reveals. At least half of a task's bug weight is on
    # bugs with a condition (tests/test_tasks_spec.py).
    condition: str = ""


@dataclass(frozen=True)
class Patch:
    """A `setup` (intended customisation) or `bug` replacement in one workspace source file."""

    id: str
    kind: str
    mutant: Mutant


@dataclass
class TaskSpec:
    id: str
    folder: Path
    toml: dict
    instruction: str
    patches: list[Patch]
    family: str = field(init=False)
    bugs: list[Bug] = field(init=False)

    def __post_init__(self) -> None:
        grpo = self.toml.get("grpo", {})
        self.family = grpo.get("family", "")
        self.bugs = [
            Bug(**{**b, "probes": tuple(b.get("probes", ()))}) for b in grpo.get("bugs", [])
        ]

    @property
    def trainer(self) -> str:
        """The workspace's trainer package: `[grpo] trainer`, else the family's first."""
        return self.toml["grpo"].get("trainer", TRAINERS.get(self.family, ("",))[0])

    @property
    def stages(self) -> list[str]:
        return list(self.toml["grpo"]["stages"])

    @property
    def trl_version(self) -> str | None:
        """The TRL release a trl-family fork is made from (`[grpo] trl_version`); None: the
        release installed here."""
        return self.toml["grpo"].get("trl_version")

    @property
    def train(self) -> dict:
        """Keyword arguments of the training run the workspace script performs."""
        return dict(self.toml["grpo"].get("train", {}))

    def summary(self) -> dict:
        return {
            "id": self.id,
            "family": self.family,
            "stages": self.stages,
            "bugs": [
                {"id": b.id, "stage": b.stage, "weight": b.weight, "kind": b.kind}
                for b in self.bugs
            ],
            "difficulty": self.toml.get("metadata", {}).get("difficulty", ""),
        }


def _validate(spec: TaskSpec) -> None:
    where = f"task {spec.id}"
    if not TASK_ID.match(spec.id):
        raise TaskSpecError(f"{where}: id must be lowercase-hyphenated")
    if spec.family not in FAMILIES:
        raise TaskSpecError(f"{where}: [grpo] family must be one of {FAMILIES}")
    if spec.trainer not in TRAINERS[spec.family]:
        raise TaskSpecError(
            f"{where}: [grpo] trainer must be one of {TRAINERS[spec.family]} for {spec.family}"
        )
    if not spec.bugs:
        raise TaskSpecError(f"{where}: [grpo] bugs is empty")
    version = spec.toml["grpo"].get("trl_version")
    if version is not None and (
        spec.family not in ("trl", "user") or not TRL_VERSION.match(str(version))
    ):
        raise TaskSpecError(f'{where}: [grpo] trl_version must be a release such as "0.17.0"')
    total = sum(b.weight for b in spec.bugs)
    if abs(total - 1.0) > 1e-9:
        raise TaskSpecError(f"{where}: bug weights sum to {total:.6g}, not 1")
    bug_ids = {b.id for b in spec.bugs if b.kind == "bug"}
    patch_bugs = {p.id for p in spec.patches if p.kind == "bug"}
    for bug in spec.bugs:
        if bug.stage not in STAGES:
            raise TaskSpecError(f"{where}: bug {bug.id} has unknown stage {bug.stage!r}")
        if bug.kind == "decoy" and bug.guards not in bug_ids:
            raise TaskSpecError(f"{where}: decoy {bug.id} guards unknown bug {bug.guards!r}")
        if bug.kind == "bug" and bug.id not in patch_bugs:
            raise TaskSpecError(f"{where}: bug {bug.id} has no patch in patches.yaml")
        if bug.condition and bug.condition not in CONDITIONS:
            raise TaskSpecError(
                f"{where}: bug {bug.id} has unknown condition {bug.condition!r}; "
                f"known: {', '.join(CONDITIONS)}"
            )
        if bug.condition and not CONDITIONS[bug.condition](spec):
            raise TaskSpecError(
                f"{where}: bug {bug.id} shows when {bug.condition}, which its run does not have"
            )
    stages = {b.stage for b in spec.bugs if b.kind == "bug"}
    if len(stages) != len(bug_ids):
        raise TaskSpecError(
            f"{where}: two bugs share a stage, so their checks could not be told apart"
        )
    if set(spec.stages) != stages:
        raise TaskSpecError(
            f"{where}: [grpo] stages {spec.stages} != the bugs' stages {sorted(stages)}"
        )


def load_task(folder: Path) -> TaskSpec:
    """Read and validate one task folder."""
    try:
        toml = tomllib.loads((folder / "task.toml").read_text())
        instruction = (folder / "instruction.md").read_text()
        entries = yaml.safe_load((folder / "patches.yaml").read_text()) or []
    except (OSError, tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise TaskSpecError(f"task {folder.name}: {error}") from None
    patches = []
    for entry in entries:
        entry = dict(entry)
        kind = entry.pop("kind", "bug")
        entry.setdefault("stage", "decode")
        entry.setdefault("description", "")
        entry["hunks"] = tuple(entry.get("hunks", ()))
        try:
            patches.append(Patch(entry["id"], kind, Mutant(**entry)))
        except (TypeError, KeyError) as error:
            raise TaskSpecError(f"task {folder.name}: malformed patch {entry!r}: {error}") from None
    spec = TaskSpec(folder.name, folder, toml, instruction, patches)
    _validate(spec)
    return spec


def load_tasks(tasks_dir: Path = TASKS_DIR, ids: list[str] | None = None) -> list[TaskSpec]:
    """Every task of `tasks_dir` (or only `ids`, in that order)."""
    folders = sorted(p.parent for p in tasks_dir.glob("*/task.toml"))
    by_id = {folder.name: folder for folder in folders}
    if ids:
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise TaskSpecError(f"unknown task {', '.join(unknown)}; see `grpo-check tasks list`")
        folders = [by_id[i] for i in ids]
    return [load_task(folder) for folder in folders]


__all__ = ["Bug", "MutantError", "Patch", "TaskSpec", "TaskSpecError", "load_task", "load_tasks"]
