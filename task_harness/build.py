"""Expand a task spec into Harbor's layout: environment/ (what the agent sees), tests/, solution/.

reference family: the workspace holds the trainer package with the task's setup patches
(intended customisations) and bug patches, and a training script: `rlzero/`, an independent
trainer (`trainers/rlzero/`) with its own structure and conventions, whose experiment modules
(toy tasks, tiny model) are reference_impl's.
trl family: the workspace holds `trl/`, a copy of the TRL package installed here (never stored
in the repository) with the task's patches, a training script, a reward file and the tiny model.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
import tomllib
from pathlib import Path

from task_harness.installed import package_dir
from task_harness.spec import TaskSpec, TaskSpecError
from task_harness.verifier.digest import sha256, tree_digest

TEMPLATES = Path(__file__).resolve().parent / "templates"
TRAINERS = Path(__file__).resolve().parent / "trainers"
VERIFIER = Path(__file__).resolve().parent / "verifier"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")
VERIFIER_FILES = (
    "verify.py",
    "digest.py",
    "judge.py",
    "jail.py",
    "plain.py",
    "rlzero_probes.py",
    "trl_probes.py",
    "trl_judge.py",
    "user_probes.py",
    "user_judge.py",
)
# grpo-check's subclass driver, shipped in a user-family task's tests/ for its children
# (`user_probes.py`): it builds the user's trainer class and drives each stage method.
DRIVER_MODULES = (
    "__init__.py",
    "trl_adapter.py",
    "trl_trainer.py",
    "trl_shims.py",
    "trl_version.py",
    "trl_conventions.py",
)
# Files that define the experiment; the verifier scores 0 if any of them changes.
PROTECTED = {
    "rlzero": ["train.py", "rlzero/toy_tasks.py", "rlzero/tiny.py"],
    "trl": ["train_grpo.py", "reward_fn.py", "model/config.json", "model/model.safetensors"],
    "mygrpo": ["train_grpo.py", "model/config.json", "model/model.safetensors"],
}
# The user family's trainer: which class, config and reward functions of the workspace's package
# the verifier drives (task.json "user").
USER_TRAINER = {
    "class": "mygrpo.trainer:TeamGRPOTrainer",
    "config_class": "mygrpo.config:TeamConfig",
    "config_values": "mygrpo.config:TRAINING",
    "reward_functions": ["mygrpo.rewards:answer_reward", "mygrpo.rewards:brevity_reward"],
}
# The experiment modules an independent trainer takes from reference_impl, renamed.
EXPERIMENT_MODULES = ("toy_tasks.py", "tiny.py")


# The short training run the verifier requires for a full score, per (trainer, toy task): the mean
# reward over the last `window` of the first `steps` steps must reach `threshold`. Measured with
# the script's fixed seed (the run is deterministic), mean reward over the window, fixed / buggy:
# rlzero succ 0.65-0.96 / below 0.2 or a crash (steps 31-40), rlzero format 0.95-0.99 / 0.00
# (steps 21-30). The thresholds leave a factor of 2 either side. The copy task and the TRL family
# learn too slowly for a short run on 2 cores: no rule, the probes alone decide. A task's
# `[grpo.learning]` table adds rules for bugs that leave the reward rising in a short run but show
# elsewhere in the log: `min_loss`, `min_kl` and `max_kl` bound the window's mean loss and KL.
LEARNING_RULES = {
    ("rlzero", "succ"): {"steps": 40, "window": 10, "threshold": 0.3},
    ("rlzero", "format"): {"steps": 30, "window": 10, "threshold": 0.5},
}


def learning_rule(spec: TaskSpec) -> dict | None:
    """The short-run rule of `spec`: its trainer and toy task's, extended by `[grpo.learning]`."""
    rule = LEARNING_RULES.get((spec.trainer, spec.train.get("task")))
    extra = spec.toml["grpo"].get("learning")
    if extra is None:
        return rule
    return {**(rule or {}), **extra}


def installed_trl() -> Path:
    spec = importlib.util.find_spec("trl")
    return Path(spec.submodule_search_locations[0])


def fork_source(spec: TaskSpec) -> Path:
    """The `trl` package a trl-family task forks: the release its spec names (`[grpo]
    trl_version`, from the registry, cached), else the one installed here."""
    if spec.trl_version is None:
        return installed_trl()
    from task_harness.releases import trl_release_path

    return trl_release_path(spec.trl_version) / "trl"


def fork_version(spec: TaskSpec) -> str | None:
    """The TRL release of a trl fork, or the one a user-family workspace installs."""
    if spec.family not in ("trl", "user"):
        return None
    return spec.trl_version or importlib.metadata.version("trl")


def trl_conventions(spec: TaskSpec) -> dict:
    """The semantics the verifier judges the fork against: its release's, then the fork's own
    intended customisations (`[grpo.intended]`)."""
    from reference_impl.trl_semantics import semantics

    return semantics(fork_version(spec)) | dict(spec.toml["grpo"].get("intended", {}))


def _apply(root: Path, spec: TaskSpec, kinds: tuple[str, ...]) -> set[str]:
    """Apply the patches of `kinds` under `root`; the files they touched."""
    touched = set()
    for patch in spec.patches:
        if patch.kind in kinds:
            patch.mutant.apply(root)
            touched.update(patch.mutant.files)
    return touched


def _notes(spec: TaskSpec) -> str:
    """The project notes the agent sees: the intended customisations, in the user's words."""
    lines = [spec.toml["grpo"].get("notes", "").strip()]
    setups = [
        p.mutant.description for p in spec.patches if p.kind == "setup" and p.mutant.description
    ]
    if setups:
        lines += ["", "Intended project-specific behaviour (keep it):", ""]
        lines += [f"- {text}" for text in setups]
    return "\n".join(lines).strip() + "\n"


def _independent_trainer(name: str, root: Path) -> None:
    """Write trainer `name` (package and training-script template) under `root`, with the
    experiment modules from reference_impl importing the trainer's package."""
    shutil.copytree(TRAINERS / name, root, ignore=IGNORE)
    for module in EXPERIMENT_MODULES:
        text = (package_dir("reference_impl") / module).read_text()
        (root / name / module).write_text(text.replace("reference_impl", name))


def _build_independent(spec: TaskSpec, scratch: Path, workspace: Path, tests: Path, files: Path):
    name = spec.trainer
    intended, buggy = scratch / "intended", scratch / "buggy"
    for root in (intended, buggy):
        _independent_trainer(name, root)
    _apply(intended, spec, ("setup",))
    _apply(buggy, spec, ("setup", "bug"))
    shutil.copytree(buggy / name, workspace / name)
    shutil.copytree(intended / name, tests / "expected" / name)
    for relative in {f for p in spec.patches if p.kind == "bug" for f in p.mutant.files}:
        target = files / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(intended / relative, target)
    script = (buggy / "train.py.tmpl").read_text()
    (workspace / "train.py").write_text(script.replace("{run_kwargs}", repr(spec.train)))


def _build_trl(spec: TaskSpec, scratch: Path, workspace: Path, tests: Path, files: Path):
    from reference_impl.tiny import TinySpec, tiny_model_path

    source = workspace / "trl"
    shutil.copytree(fork_source(spec), source / "trl", ignore=IGNORE)
    intended = scratch / "intended"
    for patch in spec.patches:
        for relative in patch.mutant.files:
            target = intended / relative
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source / relative, target)
    _apply(intended, spec, ("setup",))
    _apply(source, spec, ("setup", "bug"))
    for relative in {f for p in spec.patches if p.kind == "bug" for f in p.mutant.files}:
        target = files / "trl" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(intended / relative, target)
    script = (TEMPLATES / "train_trl.py.tmpl").read_text()
    (workspace / "train_grpo.py").write_text(script.replace("{train_kwargs}", repr(spec.train)))
    shutil.copy(TEMPLATES / "reward_fn.py", workspace / "reward_fn.py")
    model = tiny_model_path(TinySpec())
    shutil.copytree(model, workspace / "model")
    _tokenizer_for_release(workspace / "model", fork_version(spec))
    _tokenizer_settings(workspace / "model", spec.toml["grpo"].get("tokenizer", {}))


def _build_user(spec: TaskSpec, scratch: Path, workspace: Path, tests: Path, files: Path):
    """The user's project (`trainers/mygrpo/`: a GRPOTrainer subclass, its config, rewards and
    data, a training script) around a pristine TRL; `tests/` gets the intended project, the
    release the children import and grpo-check's subclass driver."""
    from reference_impl.tiny import TinySpec, tiny_model_path
    from task_harness.releases import trl_release_path

    name = spec.trainer
    intended, buggy = scratch / "intended", scratch / "buggy"
    for root in (intended, buggy):
        shutil.copytree(TRAINERS / name, root, ignore=IGNORE)
    _apply(intended, spec, ("setup",))
    _apply(buggy, spec, ("setup", "bug"))
    shutil.copytree(buggy / name, workspace / name)
    shutil.copytree(intended / name, tests / "expected" / name)
    for relative in {f for p in spec.patches if p.kind == "bug" for f in p.mutant.files}:
        target = files / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(intended / relative, target)
    script = (buggy / "train_grpo.py.tmpl").read_text()
    (workspace / "train_grpo.py").write_text(script.replace("{run_kwargs}", repr(spec.train)))
    shutil.copytree(tiny_model_path(TinySpec()), workspace / "model")
    _tokenizer_for_release(workspace / "model", fork_version(spec))
    _tokenizer_settings(workspace / "model", spec.toml["grpo"].get("tokenizer", {}))
    release = trl_release_path(fork_version(spec))
    for entry in release.iterdir():
        if entry.name == "trl" or entry.name.endswith(".dist-info"):
            shutil.copytree(entry, tests / "release" / entry.name, ignore=IGNORE)
    driver = tests / "driver" / "checker"
    (driver / "adapters").mkdir(parents=True)
    (driver / "__init__.py").write_text('"""grpo-check\'s subclass driver."""\n')
    for module in DRIVER_MODULES:
        shutil.copy(package_dir("checker") / "adapters" / module, driver / "adapters" / module)


def _tokenizer_for_release(model: Path, version: str) -> None:
    """TRL 0.21-0.26 pass every tokenizer output to `generate`, which in transformers 4 refuses
    `token_type_ids`: the tokenizer of a fork that runs on transformers 4 returns none."""
    from reference_impl.trl_semantics import needs_transformers4

    if needs_transformers4(version):
        path = model / "tokenizer_config.json"
        config = json.loads(path.read_text())
        config["model_input_names"] = ["input_ids", "attention_mask"]
        path.write_text(json.dumps(config, indent=2) + "\n")


def _tokenizer_settings(model: Path, settings: dict) -> None:
    """A trl task's `[grpo.tokenizer]` entries written into the model folder's
    tokenizer_config.json: the tokenizer the task's model ships (e.g. `pad_token = "<eos>"`, a
    pad token that is the EOS, as many chat models have)."""
    if settings:
        path = model / "tokenizer_config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | settings, indent=2) + "\n")


def protected_files(spec: TaskSpec) -> list[str]:
    """The workspace files that define the experiment (PROTECTED), and the tokenizer's settings
    where the task sets them (`[grpo.tokenizer]`)."""
    files = list(PROTECTED[spec.trainer])
    if spec.family in ("trl", "user") and spec.toml["grpo"].get("tokenizer"):
        files.append("model/tokenizer_config.json")
    return files


def stamp(root: Path, when: float) -> None:
    """Give every file and folder under `root` (itself included) the modification time `when`,
    so that no file a patch rewrote is newer than the rest."""
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            path = Path(folder) / name
            if not path.is_symlink():
                os.utime(path, (when, when))
    os.utime(root, (when, when))


def build_task(spec: TaskSpec, out: Path, skill: bool = False) -> Path:
    """Write the task `spec` fully expanded to `out/<id>/`; returns that folder."""
    root = out / spec.id
    if root.exists():
        shutil.rmtree(root)
    environment, tests, solution = root / "environment", root / "tests", root / "solution"
    workspace = environment / "workspace"
    for folder in (workspace, tests, solution / "files"):
        folder.mkdir(parents=True)
    scratch = root / ".scratch"
    if spec.family == "reference":
        _build_independent(spec, scratch, workspace, tests, solution / "files")
    elif spec.family == "user":
        _build_user(spec, scratch, workspace, tests, solution / "files")
    else:
        _build_trl(spec, scratch, workspace, tests, solution / "files")
    shutil.rmtree(scratch, ignore_errors=True)
    (workspace / "NOTES.md").write_text(_notes(spec))

    (root / "task.toml").write_text(harbor_toml(spec))
    (root / "instruction.md").write_text(spec.instruction)
    for name in VERIFIER_FILES:
        shutil.copy(VERIFIER / name, tests / name)
    shutil.copytree(package_dir("reference_impl"), tests / "reference_impl", ignore=IGNORE)
    shutil.copy(TEMPLATES / "test.sh", tests / "test.sh")
    shutil.copy(TEMPLATES / "solve.sh", solution / "solve.sh")
    for script in (tests / "test.sh", solution / "solve.sh"):
        script.chmod(0o755)
    task = {
        "id": spec.id,
        "family": spec.family,
        "package": spec.trainer,
        "trainer": spec.trainer,
        "bugs": [b.__dict__ | {"probes": list(b.probes)} for b in spec.bugs if b.kind == "bug"],
        "decoys": [b.__dict__ | {"probes": list(b.probes)} for b in spec.bugs if b.kind == "decoy"],
        "protected": {rel: sha256(workspace / rel) for rel in protected_files(spec)},
        "installed": {"trl": tree_digest(installed_trl())},
        # The release the trl family's fork was made from (its package reads the version from
        # installed metadata, so the tree does not say): what upstream-restore downloads.
        "fork_version": fork_version(spec),
        "learning": learning_rule(spec),
    }
    if spec.family == "trl":
        task["conventions"] = trl_conventions(spec)
    if spec.family == "user":
        task["user"] = USER_TRAINER
    (tests / "task.json").write_text(json.dumps(task, indent=2))
    (environment / "Dockerfile").write_text(dockerfile(skill, spec.family, task["fork_version"]))
    if skill:  # the --skill condition: our installer, into the workspace's agent folders
        from skill_installer import install_skill

        install_skill(workspace)
    # One modification time for every file: the patched ones must not be the newest (the fork's
    # copy keeps the installed release's times, each patch writes its file anew).
    stamp(root, int(time.time()))
    return root


def dockerfile(skill: bool, family: str, fork_version: str | None = None) -> str:
    """The image of a condition and family: the third-party stack with no GRPO library, grpo-skill
    only for --skill (the no-skill image holds nothing of this project), the fork installed as
    `trl` only for the trl family."""
    text = (TEMPLATES / "Dockerfile").read_text()
    if not skill:
        text = _without_block(text, "skill condition only")
    if family != "trl":
        text = _without_block(text, "trl family only")
    if family != "user":
        text = _without_block(text, "user family only")
    if family in ("trl", "user") and fork_version:
        text = _release_stack(text, fork_version)
    return text.replace("{fork_version}", fork_version or "")


def _release_stack(text: str, version: str) -> str:
    """The image's `pip install trl==... && pip uninstall -y trl` line for a fork of release
    `version`: that release's dependencies, with the packages an old release needs in other
    versions (transformers 4.57.6 for TRL 0.17-0.26) pinned as the agent's local env has them."""
    from task_harness.releases import dependency_paths, distributions, normalise

    start = text.index(" && pip install trl==") + len(" && pip install ")
    end = text.index(" \\\n && pip uninstall -y trl", start)
    pins = {normalise(p.split("==")[0]): p for p in text[start:end].split() if "==" in p}
    pins["trl"] = f"trl=={version}"
    for folder in dependency_paths(version):
        for name, release in sorted(distributions(folder).items()):
            pins[name] = f"{name.replace('_', '-')}=={release}"
    text = text[:start] + " ".join(pins.values()) + text[end:]
    return text.replace("TRL 1.16.0's dependencies", f"TRL {version}'s dependencies", 1)


def _without_block(text: str, name: str) -> str:
    head, _, rest = text.partition(f"# >>> {name}")
    return head + rest.partition(f"# <<< {name}\n")[2]


def harbor_toml(spec: TaskSpec) -> str:
    """The spec's task.toml as `harbor lint` accepts it.

    Our `[grpo]` table moves under `[metadata]` (Harbor's free-form table), and the verifier runs
    in a separate, fresh copy of the environment that receives the agent's /app as an artifact:
    nothing the agent installs or edits outside /app can reach the verifier.
    """
    text = (spec.folder / "task.toml").read_text()
    text = text.replace("\n[grpo.", "\n[metadata.grpo.").replace("\n[grpo]", "\n[metadata.grpo]")
    text = text.replace("\n[verifier]\n", '\n[verifier]\nenvironment_mode = "separate"\n', 1)
    first_table = text.index("\n[")
    text = text[:first_table] + '\nartifacts = ["/app"]\n' + text[first_table:]
    parsed = tomllib.loads(text)
    if parsed["metadata"]["grpo"] != spec.toml["grpo"]:
        raise TaskSpecError(
            f"task {spec.id}: its [grpo] table reads differently under [metadata] (task.toml "
            "edited since it was loaded, or a line inside a string that begins with '[grpo')"
        )
    return text
