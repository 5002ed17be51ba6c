"""What is being checked: resolve a TARGET (parent process) and load it (child process).

`resolve_target` turns the command-line TARGET into a `CandidateSpec` without importing anything
(so a bad candidate cannot crash the parent): a `.py` file, a dotted module, a YAML file (stage
protocol section "Candidates with other names or conventions"), TRL (`trl`, or a TRL source tree)
or a user's GRPOTrainer subclass (`FILE.py:CLASS`, `module:CLASS`, or `trainer:` in YAML), with
the user's GRPOConfig (`--config FILE.py:NAME`, or `grpo_config:` in YAML).
`load_candidate` runs in the child: it imports the candidate and returns its protocol functions,
their source locations and the conventions it declares.

The `trl` kind loads `checker.adapters.trl_adapter` (another engineer's module) after putting the TRL source
tree first on `sys.path`. What this loader relies on from the adapter:

- module-level functions named as in the stage protocol (and the extension), each called with the
  protocol's arguments;
- optionally a `grpo_check_location = "path/to/grpo_trainer.py:LINE"` attribute on each function,
  reported as the location of a failure (a functions candidate may set it too: a shim around a
  third-party trainer points at the trainer's line, not at itself);
- optionally `CONVENTIONS: dict` (keyword defaults it implements, e.g. {"loss_type": "dapo"});
- optionally `SUPPORTED: dict`: either {keyword: collection of supported values}
  (e.g. {"loss_type": {"dapo", "grpo"}}) or {function name: collection of keyword names it takes}.
  A check that needs anything outside it is skipped, not failed.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from checker.adapters import trl_version
from reference_impl.protocol import (
    ALL_FUNCTIONS,
    CONVENTION_VALUES,
    DEFAULTS,
    PROTOCOL_FUNCTIONS,
    STAGES,
)

CONVENTION_ALIASES = {"epsilon": "epsilon_low"}  # TRL's GRPOConfig name for the lower clip range
# Other trainers' names for a convention this one calls otherwise: an unknown key names its match.
FOREIGN_KEYS = {
    "clip_ratio_c": "delta (dual-clip PPO's c caps the ratio of a negative advantage, as TRL's"
    " delta caps the unclipped ratio: the same bound)",
    "eps_clip_c": "delta (dual-clip PPO's c, as TRL's delta)",
    "c_clip": "delta (dual-clip PPO's c, as TRL's delta)",
    "dual_clip": "delta (dual-clip PPO's c, as TRL's delta)",
    "clip_ratio_low": "epsilon_low",
    "clip_ratio_high": "epsilon_high",
    "eps_clip": "epsilon_low",
    "eps_clip_high": "epsilon_high",
    "eps_clip_higher": "epsilon_high",
    "kl_coef": "beta",
    "kl_loss_coef": "beta",
    "kl_ctl": "beta (or kl_placement: reward for a KL in the reward)",
    "kl_loss_type": "kl_estimator",
    "kl_penalty": "kl_estimator",
    "kl_tau": "drift_penalty (a penalty towards the sampling policy) or beta",
}
YAML_KEYS = {
    "module",
    "path",
    "functions",
    "config",
    "supported",
    "findings",
    "custom",
    "trainer",
    "grpo_config",
}
# What a dataclass such as GRPOConfig raises for a field it does not have.
UNEXPECTED_KEYWORD = re.compile(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'")
# The keywords grpo-check passes a GRPOTrainer (subclass) when it builds one.
TRAINER_KEYWORDS = ("model", "reward_funcs", "args", "train_dataset", "processing_class")
KINDS = ("auto", "functions", "trl", "verl")


class TargetError(Exception):
    """Nothing can be checked; the message is one line naming the cause (exit status 2)."""


@dataclass
class CandidateSpec:
    """A resolved TARGET; plain data so it can be sent to the child as JSON."""

    target: str
    kind: str  # "functions", "trl" or "verl"
    module: str | None = None
    path: str | None = None
    renames: dict[str, str] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
    supported: dict[str, list] = field(default_factory=dict)
    trl_source: str | None = None
    cwd: str = field(default_factory=os.getcwd)
    # A GRPOTrainer subclass ("/abs/file.py:CLASS" or "module:CLASS") and the GRPOConfig it is
    # built with ("/abs/file.py:NAME", "module:NAME", or a mapping of GRPOConfig fields).
    trainer: str | None = None
    grpo_config: str | dict | None = None
    findings: list[str] = field(default_factory=list)  # `grpo-check profile`'s, from the YAML
    custom: dict[str, str] = field(default_factory=dict)  # stage -> why it is the user's own


@dataclass
class Candidate:
    """A loaded candidate: its protocol functions and what they implement."""

    spec: CandidateSpec
    functions: dict[str, object]
    locations: dict[str, str]
    config: dict[str, object]  # DEFAULTS overlaid with the declared conventions
    supported: dict[str, list]


def resolve_target(
    target: str, kind: str = "auto", grpo_config: str | None = None
) -> CandidateSpec:
    """Decide the kind of TARGET and read its YAML, without importing the candidate.

    `grpo_config` (`--config FILE.py:NAME`) names the GRPOConfig a trainer is checked with.
    """
    spec = _resolve(target, kind)
    if grpo_config is not None:
        if spec.kind != "trl":
            raise TargetError(
                f"--config {grpo_config}: a GRPOConfig is for a trainer (FILE.py:CLASS or trl), "
                f"not the {spec.kind} kind"
            )
        spec.grpo_config = _reference(grpo_config, "--config")
    return spec


def _resolve(target: str, kind: str) -> CandidateSpec:
    if kind not in KINDS:
        raise TargetError(f"unknown --kind {kind!r}; use {', '.join(KINDS)}")
    if _is_reference(target) and kind in ("auto", "trl"):
        return _resolve_trainer(target, _reference(target, target))
    if kind == "verl" or (kind == "auto" and target == "verl"):
        if target != "verl":
            raise TargetError(
                f"{target}: the verl kind checks the verl that Python imports; give `verl`"
            )
        return CandidateSpec(target, "verl")
    path = Path(target)
    tree_root = trl_version.package_root(path) if path.is_dir() else None
    if kind == "trl" or (kind == "auto" and (target == "trl" or tree_root is not None)):
        return _resolve_trl(target, tree_root)
    if target.endswith((".yaml", ".yml")):
        return _spec_from_yaml(target)
    if target.endswith(".py"):
        if not path.is_file():
            raise TargetError(f"{target}: no such file")
        return CandidateSpec(target, "functions", path=str(path.resolve()))
    if path.is_dir():
        raise TargetError(
            f"{target}: a folder; give a .py file or dotted module that defines the stage "
            "functions, or a YAML file that maps yours (`functions: {compute_loss: my_loss}`)"
        )
    if not all(part.isidentifier() for part in target.split(".")):
        raise TargetError(f"{target}: not a file, a dotted module name or `trl`")
    return CandidateSpec(target, "functions", module=target)


def _resolve_trl(target: str, tree_root: Path | None) -> CandidateSpec:
    """The TRL to check and its release, refused with one line when the adapter cannot drive it.

    `trl` means the TRL Python imports here, except in a folder holding a TRL tree at `./trl`
    (a vendored checkout `./trl/trl/...` or the package `./trl/trainer/...`): that tree is the one
    being worked on, so it is checked, and standard error says which TRL it shadows.
    """
    if target == "trl":
        tree_root = trl_version.package_root(Path("trl"))
        if tree_root is None:
            root = trl_version.installed_root()
            if root is None:
                raise TargetError("trl: no TRL here (pip install trl, or give a TRL source tree)")
            _refuse_unsupported("trl", root)
            return CandidateSpec(target, "trl")
        _refuse_unsupported("./trl", tree_root)  # refused in one line, never replaced
        installed = trl_version.installed_root()
        if installed is None or installed.resolve() != tree_root.resolve():
            shadowed = f"the TRL at {installed}" if installed else "no installed TRL"
            print(
                f"grpo-check: checking the TRL tree ./trl in this folder, not {shadowed}",
                file=sys.stderr,
            )
    elif tree_root is None:
        raise TargetError(
            f"{target}: not a TRL source tree (no trl/trainer/grpo_trainer.py or trainer/grpo_trainer.py)"
        )
    _refuse_unsupported(target, tree_root)
    return CandidateSpec(target, "trl", trl_source=str(tree_root.resolve()))


def _is_reference(text: str) -> bool:
    """`FILE.py:NAME` or `dotted.module:NAME`."""
    left, colon, name = text.rpartition(":")
    return bool(colon and left and name.isidentifier())


def _reference(text: str, source: str, base: Path | None = None) -> str:
    """`FILE.py:NAME` with the file made absolute (relative to `base`, else the current folder),
    or `dotted.module:NAME` as given; one line naming the problem otherwise."""
    left, _, name = text.rpartition(":")
    if not _is_reference(text):
        raise TargetError(f"{source}: {text!r} is not FILE.py:NAME or module:NAME")
    if left.endswith(".py"):
        path = (base or Path.cwd()) / left
        if not path.is_file():
            raise TargetError(f"{source}: {left}: no such file")
        return f"{path.resolve()}:{name}"
    if not all(part.isidentifier() for part in left.split(".")):
        raise TargetError(f"{source}: {left} is neither a .py file nor a dotted module name")
    return text


def _resolve_trainer(target: str, trainer: str) -> CandidateSpec:
    """A GRPOTrainer subclass, checked on the TRL that `grpo-check trl` would check here."""
    try:
        spec = _resolve_trl("trl", None)
    except TargetError as error:
        raise TargetError(f"{target}: {error}") from None
    spec.target, spec.trainer = target, trainer
    return spec


def _refuse_unsupported(target: str, root: Path) -> None:
    reason = trl_version.unsupported_reason(trl_version.version_of(root))
    if reason is not None:
        raise TargetError(f"{target}: {reason}")


def _spec_from_yaml(target: str) -> CandidateSpec:
    path = Path(target)
    if not path.is_file():
        raise TargetError(f"{target}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise TargetError(f"{target}: malformed YAML{where}") from None
    if not isinstance(data, dict):
        raise TargetError(f"{target}: expected a mapping with `module` or `path`")
    unknown = set(data) - YAML_KEYS
    if unknown:
        raise TargetError(
            f"{target}: unknown key(s) {sorted(unknown)}; allowed {sorted(YAML_KEYS)}"
        )
    if "trainer" in data:
        return _trainer_from_yaml(target, data, path.parent)
    if "grpo_config" in data:
        raise TargetError(f"{target}: `grpo_config` goes with `trainer`")
    if ("module" in data) == ("path" in data):
        raise TargetError(f"{target}: give exactly one of `module` or `path`")
    renames = data.get("functions") or {}
    if not isinstance(renames, dict) or not all(isinstance(v, str) for v in renames.values()):
        raise TargetError(f"{target}: `functions` must map protocol names to attribute names")
    bad = set(renames) - set(ALL_FUNCTIONS)
    if bad:
        raise TargetError(f"{target}: `functions` names unknown protocol function(s) {sorted(bad)}")
    config = normalise_config(data.get("config") or {}, target)
    supported = data.get("supported") or {}
    if not isinstance(supported, dict):
        raise TargetError(f"{target}: `supported` must be a mapping")
    spec = CandidateSpec(target, "functions", renames=renames, config=config, supported=supported)
    spec.findings = _findings(data, target)
    spec.custom = _custom(data, target)
    if "module" in data:
        spec.module = str(data["module"])
    else:
        file = (path.parent / str(data["path"])).resolve()
        if not file.is_file():
            raise TargetError(f"{target}: path {data['path']} does not exist")
        spec.path = str(file)
    return spec


def _trainer_from_yaml(target: str, data: dict, base: Path) -> CandidateSpec:
    """`trainer: FILE.py:CLASS` (relative to the YAML file), an optional `grpo_config` (a
    reference or a mapping of GRPOConfig fields), and `config` / `supported` as for functions."""
    extra = {"module", "path", "functions"} & set(data)
    if extra:
        raise TargetError(f"{target}: `trainer` cannot go with {sorted(extra)}")
    trainer = data["trainer"]
    if not isinstance(trainer, str):
        raise TargetError(f"{target}: `trainer` must be FILE.py:CLASS or module:CLASS")
    config = normalise_config(data.get("config") or {}, target, TRAINER_FIELDS_HINT)
    spec = _resolve_trainer(target, _reference(trainer, target, base))
    grpo_config = data.get("grpo_config")
    if isinstance(grpo_config, str):
        spec.grpo_config = _reference(grpo_config, target, base)
    elif isinstance(grpo_config, dict):
        spec.grpo_config = grpo_config
    elif grpo_config is not None:
        raise TargetError(f"{target}: `grpo_config` must be FILE.py:NAME or a mapping of fields")
    spec.config = config
    spec.supported = data.get("supported") or {}
    if not isinstance(spec.supported, dict):
        raise TargetError(f"{target}: `supported` must be a mapping")
    spec.findings = _findings(data, target)
    spec.custom = _custom(data, target)
    return spec


def _findings(data: dict, target: str) -> list[str]:
    """`findings:`: what `grpo-check profile --write` measured as known bugs (reported as failures)."""
    findings = data.get("findings") or []
    if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
        raise TargetError(f"{target}: `findings` must be a list of strings")
    return findings


def _custom(data: dict, target: str) -> dict[str, str]:
    """`custom:`: stage -> why the candidate computes that stage its own way, on purpose, in a
    way no declared convention describes (a reward gated on the answer, say). That stage's checks
    are skipped with the reason, so it is reported as not covered (`--strict` fails on it)."""
    custom = data.get("custom") or {}
    if not isinstance(custom, dict):
        raise TargetError(f"{target}: `custom` must map stages to the reason they are your own")
    for stage, reason in custom.items():
        if stage not in STAGES:
            raise TargetError(
                f"{target}: `custom` names unknown stage {stage!r}; stages: {', '.join(STAGES)}"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise TargetError(f"{target}: `custom: {stage}` needs the reason, as one line of text")
    return {stage: " ".join(reason.split()) for stage, reason in custom.items()}


# `config:` declares conventions; a trainer's own config fields (its GRPOConfig subclass's) are
# a different thing, and users reach for `config:` first.
TRAINER_FIELDS_HINT = (
    "; a field of the trainer's own config class goes into a config built with that class "
    "(`grpo_config: FILE.py:NAME`, --config FILE.py:NAME)"
)


def normalise_config(config: object, source: str, hint: str = "") -> dict[str, object]:
    """Declared conventions with TRL aliases resolved; an unknown key, or a value outside a
    convention's set, is a one-line error (`hint` appended to the first)."""
    if not isinstance(config, dict):
        raise TargetError(f"{source}: `config` must be a mapping")
    result = {}
    for key, value in config.items():
        key = CONVENTION_ALIASES.get(key, key)
        if key not in DEFAULTS:
            if key in FOREIGN_KEYS:
                raise TargetError(
                    f"{source}: unknown config key {key!r}: here it is {FOREIGN_KEYS[key]}{hint}"
                )
            known = sorted([*DEFAULTS, *CONVENTION_ALIASES])
            raise TargetError(f"{source}: unknown config key {key!r}; known: {known}{hint}")
        if key == "scale_rewards" and isinstance(value, bool):
            value = "group" if value else "none"  # TRL before 0.21 took a bool (True: group std)
        allowed = CONVENTION_VALUES.get(key)
        if allowed is not None and value not in allowed:
            shown = ", ".join("null" if v is None else str(v) for v in allowed)
            raise TargetError(f"{source}: config {key}: {value!r} is not one of {shown}")
        result[key] = value
    return result


# ---------------------------------------------------------------------------------------------
# Child side


def load_candidate(spec: CandidateSpec) -> Candidate:
    """Import the candidate and collect its protocol functions; TargetError if nothing usable."""
    if spec.kind == "trl":
        return _load_trl(spec)
    if spec.kind == "verl":
        return _load_verl(spec)
    module = _import_functions_module(spec)
    functions, locations = {}, {}
    for name in ALL_FUNCTIONS:
        attribute = spec.renames.get(name, name)
        fn = getattr(module, attribute, None)
        if fn is None:
            if name in spec.renames:
                raise TargetError(
                    f"{spec.target}: maps {name} to {attribute}, which {module.__name__} lacks"
                )
            continue
        if not callable(fn):
            continue
        functions[name] = fn
        locations[name] = function_location(fn, spec.cwd)
    if not functions:
        raise TargetError(
            f"{spec.target}: exposes none of the protocol functions "
            f"({', '.join(PROTOCOL_FUNCTIONS)}); a YAML file maps yours to them "
            "(`functions: {compute_loss: my_loss}`), or a small module of wrappers can"
        )
    config = {**DEFAULTS, **spec.config}
    return Candidate(spec, functions, locations, config, dict(spec.supported))


def _import_functions_module(spec: CandidateSpec):
    if spec.cwd not in sys.path:
        sys.path.insert(0, spec.cwd)  # dotted modules are importable from the current directory
    try:
        if spec.module:
            return importlib.import_module(spec.module)
        path = Path(spec.path)
        if path.name == "__init__.py":  # a package: import it by its folder name
            sys.path.insert(0, str(path.parent.parent))
            return importlib.import_module(path.parent.name)
        sys.path.insert(0, str(path.parent))  # so that the file's sibling imports work
        module_spec = importlib.util.spec_from_file_location(f"grpo_candidate_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
        return module
    except SystemExit as error:
        raise TargetError(f"{spec.target}: called sys.exit({error.code}) while importing") from None
    except SyntaxError as error:
        raise TargetError(
            f"{spec.target}: syntax error in {Path(error.filename or '?').name}:{error.lineno}: {error.msg}"
        ) from None
    except ModuleNotFoundError as error:
        raise TargetError(f"{spec.target}: cannot import: {error}") from None
    except TypeError as error:
        raise TargetError(
            f"{spec.target}: {_missing_config_field(error) or 'import failed: ' + _brief_error(error)}"
        ) from None
    except BaseException as error:  # noqa: BLE001 - any failure at import is the candidate's
        raise TargetError(
            f"{spec.target}: import failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
        ) from None


def _load_trl(spec: CandidateSpec) -> Candidate:
    if spec.trl_source:
        sys.path.insert(0, spec.trl_source)
    try:
        import trl  # noqa: F401 - resolve which TRL is first on the path before the adapter does
    except BaseException as error:  # noqa: BLE001 - a patched TRL may fail in any way
        raise TargetError(f"{spec.target}: cannot import TRL: {_brief_error(error)}") from None
    if spec.trainer or spec.grpo_config:
        _select_trainer(spec)
    try:
        adapter = importlib.import_module("checker.adapters.trl_adapter")
    except BaseException as error:  # noqa: BLE001 - a patched TRL may fail in any way
        raise TargetError(
            f"{spec.target}: cannot import TRL or its adapter: {_brief_error(error)}"
        ) from None
    if spec.trainer or spec.grpo_config:
        _build_eagerly(spec, adapter)
    functions, locations = {}, {}
    for name in ALL_FUNCTIONS:
        fn = getattr(adapter, name, None)
        if callable(fn):
            functions[name] = fn
            locations[name] = function_location(fn, spec.cwd)
    if not functions:
        raise TargetError(f"{spec.target}: the TRL adapter exposes none of the protocol functions")
    conventions = getattr(adapter, "CONVENTIONS", {}) or {}
    # Keywords of the protocol, and the release's named semantics that no keyword expresses
    # (e.g. `nan_rewards`), which checks read to skip what the release does differently.
    keywords = {k: v for k, v in conventions.items() if CONVENTION_ALIASES.get(k, k) in DEFAULTS}
    named = {k: v for k, v in conventions.items() if k not in keywords}
    config = {
        **DEFAULTS,
        **normalise_config(keywords, "checker.adapters.trl_adapter"),
        **named,
        **spec.config,  # conventions a subclass declares (`config:` beside `trainer:` in YAML)
    }
    supported = {k: list(v) for k, v in (getattr(adapter, "SUPPORTED", {}) or {}).items()}
    supported |= {k: list(v) for k, v in spec.supported.items()}
    return Candidate(spec, functions, locations, config, supported)


def _missing_config_field(error: TypeError) -> str | None:
    """The cause, in one line, when the candidate's file built a GRPOConfig (or a subclass) with a
    field the installed TRL release does not have: TRL refuses it at construction, so the user's
    own run on this release would fail the same way, and grpo-check does not guess a value."""
    match = UNEXPECTED_KEYWORD.fullmatch(str(error))
    trl = sys.modules.get("trl")
    if match is None or trl is None or error.__traceback__ is None:
        return None
    last = error.__traceback__
    while last.tb_next is not None:
        last = last.tb_next
    frame = last.tb_frame
    cls = frame.f_locals.get(match[1], frame.f_globals.get(match[1]))
    if not (isinstance(cls, type) and issubclass(cls, trl.GRPOConfig)):
        return None
    where = f"{Path(frame.f_code.co_filename).name}:{last.tb_lineno}"
    return f"{where}: {_no_such_fields([match[2]])}"


def _no_such_fields(names: list[str]) -> str:
    """What to say of GRPOConfig fields the installed TRL release lacks (removed or renamed
    between releases: `max_prompt_length` is gone from 0.28.0 on)."""
    import trl

    listed = ", ".join(repr(n) for n in names)
    return (
        f"TRL {trl.__version__}'s GRPOConfig has no field{'s' if len(names) > 1 else ''} {listed}: "
        f"remove {'them' if len(names) > 1 else 'it'}, check with the TRL release the config "
        "was written for, or, for a field of your own GRPOConfig subclass, pass a config built "
        "with it (`grpo_config: FILE.py:NAME`, --config FILE.py:NAME)"
    )


def _brief_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


def _select_trainer(spec: CandidateSpec) -> None:
    """Import the user's GRPOTrainer subclass and GRPOConfig and have the adapter build them.

    One line (exit 2) for what cannot be built: a class that is not a GRPOTrainer, an `__init__`
    with required arguments grpo-check cannot supply, a config that is not a GRPOConfig or a
    mapping of its fields.
    """
    from trl import GRPOConfig, GRPOTrainer

    from checker.adapters import trl_trainer

    cls = _import_reference(spec, spec.trainer) if spec.trainer else GRPOTrainer
    if not (isinstance(cls, type) and issubclass(cls, GRPOTrainer)):
        what = cls.__name__ if isinstance(cls, type) else type(cls).__name__
        bases = ", ".join(b.__name__ for b in getattr(cls, "__mro__", ())[1:3]) or what
        raise TargetError(
            f"{spec.target}: {what} is not a subclass of trl's GRPOTrainer (it derives from {bases})"
        )
    _refuse_unsuppliable(spec, cls)
    config_cls, values = GRPOConfig, {}
    if spec.grpo_config is not None:
        config_cls, values = _user_config(spec, GRPOConfig)
    trl_trainer.check_subclass(cls, config_cls, values, spec.config)


_IMPORTED: dict[str, object] = {}


def _import_reference(spec: CandidateSpec, reference: str) -> object:
    """The object `FILE.py:NAME` or `module:NAME` names, imported as a functions candidate is."""
    where, _, name = reference.rpartition(":")
    if where not in _IMPORTED:  # a trainer and its config in one file: one module, one class
        module_spec = CandidateSpec(spec.target, "functions", cwd=spec.cwd)
        if where.endswith(".py"):
            module_spec.path = where
        else:
            module_spec.module = where
        _IMPORTED[where] = _import_functions_module(module_spec)
    module = _IMPORTED[where]
    if not hasattr(module, name):
        raise TargetError(f"{spec.target}: {Path(where).name} has no {name}")
    return getattr(module, name)


def _refuse_unsuppliable(spec: CandidateSpec, cls: type) -> None:
    """Required `__init__` parameters other than those grpo-check passes cannot be supplied."""
    try:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return
    required = [
        p.name
        for p in parameters
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in TRAINER_KEYWORDS
    ]
    if required:
        raise TargetError(
            f"{spec.target}: {cls.__name__}.__init__ requires {', '.join(required)}, which "
            f"grpo-check cannot supply (it passes {', '.join(TRAINER_KEYWORDS)}); give "
            f"{'it a default' if len(required) == 1 else 'them defaults'}"
        )


def _user_config(spec: CandidateSpec, base: type) -> tuple[type, dict]:
    """The GRPOConfig class and field values `--config` names: a GRPOConfig (its class, maybe a
    subclass, and its values), a GRPOConfig subclass (at its defaults) or a mapping of GRPOConfig
    fields."""
    from dataclasses import fields

    config = spec.grpo_config
    if isinstance(config, str):
        config = _import_reference(spec, config)
    if isinstance(config, base):
        return type(config), {f.name: getattr(config, f.name) for f in fields(config) if f.init}
    if isinstance(config, type) and issubclass(config, base):
        return config, {}
    if not isinstance(config, dict):
        raise TargetError(
            f"{spec.target}: the config is a {type(config).__name__}, not a GRPOConfig or a dict"
        )
    known = {f.name for f in fields(base)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise TargetError(f"{spec.target}: {_no_such_fields(unknown)}")
    return base, dict(config)


def _build_eagerly(spec: CandidateSpec, adapter) -> None:
    """Build the user's trainer now, so that a constructor that fails is one line (exit 2)."""
    try:
        adapter.harness.trainer()
    except BaseException as error:  # noqa: BLE001 - the user's __init__ may raise anything
        cls = adapter.harness.checked_class().__name__
        raise TargetError(f"{spec.target}: building {cls} failed: {_brief_error(error)}") from None


def function_location(fn: object, cwd: str) -> str | None:
    """Where a failure of `fn` is reported: its `grpo_check_location` (a shim or an adapter
    points at the third-party line that computes the value), else its own definition."""
    where = getattr(fn, "grpo_check_location", None)
    return str(where) if where else source_location(fn, cwd)


def _load_verl(spec: CandidateSpec) -> Candidate:
    """verl's core_algos behind the protocol (checker.adapters.verl_adapter)."""
    try:
        adapter = importlib.import_module("checker.adapters.verl_adapter")
    except BaseException as error:  # noqa: BLE001 - a broken verl install may fail in any way
        raise TargetError(
            f"verl: cannot import verl's core_algos: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
        ) from None
    functions = {name: getattr(adapter, name) for name in ALL_FUNCTIONS if hasattr(adapter, name)}
    locations = {name: fn.grpo_check_location for name, fn in functions.items()}
    declared = normalise_config(adapter.CONVENTIONS, "checker.adapters.verl_adapter")
    supported = {k: list(v) for k, v in adapter.SUPPORTED.items()}
    return Candidate(spec, functions, locations, {**DEFAULTS, **declared}, supported)


def source_location(fn: object, cwd: str) -> str | None:
    """`path:line` of a function's definition, relative to `cwd` when inside it."""
    try:
        target = inspect.unwrap(fn)
        file = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return None
    if file is None:
        return None
    if Path(file).resolve().is_relative_to(Path(cwd).resolve()):
        file = os.path.relpath(file, cwd)
    return f"{file}:{line}"
