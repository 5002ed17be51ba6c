"""The machinery behind `checker.adapters.trl_adapter`: one GRPOTrainer, seams to feed it, and a way to read it.

Everything here serves one rule: the adapter never recomputes what TRL computes. It builds a real
`GRPOTrainer` (any release from 0.17 to 1.16, whichever copy `import trl` finds first on sys.path),
replaces only the inputs of the method under check (generation returns given ids, reward functions
return given values, the policy forward returns given log-probs) and reads what TRL's own code made
of them: a return value, or a local variable of TRL's method read from its frame when the method
does not return it. What differs between releases lives in `trl_shims`.

The trainer is TRL's `GRPOTrainer`, or a user's subclass of it (`grpo-check FILE.py:CLASS`), built
with the user's `GRPOConfig` where one is given (`check_subclass`, called before the adapter is
imported): every method the subclass overrides then runs where upstream's would.
"""

from __future__ import annotations

import atexit
import copy
import inspect
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import CodeType, SimpleNamespace
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_module
from transformers import BatchEncoding, PretrainedConfig
from trl import GRPOConfig, GRPOTrainer

from checker.adapters.trl_shims import FUSED_LM_HEAD
from reference_impl import trl_driver
from reference_impl.tiny import tiny_model_path
from reference_impl.trl_semantics import CONVENTION_FIELDS

# The trainer is built with a non-unit temperature so that what TRL's __init__ does with it (the
# fused LM head's temperature, the GenerationConfig's temperature) can be told apart from "ignored".
BUILD_TEMPERATURE = 0.7
PROMPT_TEXT = "1 + 2 ="

GRPO_TRAINER_FILE = str(Path(inspect.getsourcefile(GRPOTrainer)).resolve())

# ---------------------------------------------------------------------------------------------
# The class under check: TRL's GRPOTrainer, or a user's subclass of it with the user's config


@dataclass
class CheckedTrainer:
    """What is built: the trainer class, its config class and the user's config values, and the
    conventions declared beside the trainer (YAML `config:`, the protocol's names)."""

    cls: type = GRPOTrainer
    config_cls: type = GRPOConfig
    values: dict[str, Any] = field(default_factory=dict)
    conventions: dict[str, Any] = field(default_factory=dict)


_CHECKED = CheckedTrainer()


def check_subclass(
    cls: type,
    config_cls: type = GRPOConfig,
    values: dict | None = None,
    conventions: dict | None = None,
) -> None:
    """Build `cls` (a GRPOTrainer subclass) with `values` of `config_cls` from now on, and drive
    it at the declared `conventions` where a check passes no value of its own."""
    global _CHECKED
    _CHECKED = CheckedTrainer(cls, config_cls, dict(values or {}), dict(conventions or {}))
    _built.cache_clear()


def checked_class() -> type:
    """The trainer class the adapter drives (GRPOTrainer unless a subclass is checked)."""
    return _CHECKED.cls


def declared_config() -> dict[str, Any]:
    """The user's values of the GRPOConfig fields the checks compare against."""
    return {k: v for k, v in _CHECKED.values.items() if k in CONVENTION_FIELDS}


def declared_conventions() -> dict[str, Any]:
    """The conventions declared beside the trainer (YAML `config:`), by the protocol's names."""
    return dict(_CHECKED.conventions)


def chosen_config() -> dict[str, Any]:
    """The user's values of those fields that differ from their config class's defaults: what
    the user chose (a GRPOConfig instance carries every field; one left at its default is the
    release's, not a choice)."""
    defaults = trl_driver.config_defaults(_CHECKED.config_cls)
    return {k: v for k, v in declared_config().items() if k not in defaults or defaults[k] != v}


def _kept_config() -> dict[str, Any]:
    """The user's config values a build keeps: the GRPOConfig fields whose values the checks
    compare against (`CONVENTION_FIELDS`, in `trl_conventions`) and the subclass's own fields.
    Every other GRPOConfig field (device, precision, batch sizes, vLLM, logging, ...) is the
    offline recipe's or the release's default: each stage is driven on given inputs."""
    upstream = trl_driver.config_fields(GRPOConfig)
    return {k: v for k, v in _CHECKED.values.items() if k in CONVENTION_FIELDS or k not in upstream}


def overridden(*names: str) -> Callable | None:
    """The checked subclass's own implementation of the first of `names` it overrides, if any."""
    for name in names:
        for klass in _CHECKED.cls.__mro__:
            if klass is GRPOTrainer:
                break
            if name in vars(klass):
                return vars(klass)[name]
    return None


# ---------------------------------------------------------------------------------------------
# Locations: which line of the imported (possibly patched) TRL source a function drives


def source_location(function: Callable, *markers: str | tuple[str, ...]) -> str:
    """`file:line` of the first line of `function`'s source holding one of `markers` (all of a
    tuple's parts), else of its `def` line."""
    function = inspect.unwrap(function)
    path = str(Path(inspect.getsourcefile(function)).resolve())
    lines, first_line = inspect.getsourcelines(function)
    for marker in markers:
        parts = (marker,) if isinstance(marker, str) else marker
        for offset, line in enumerate(lines):
            if all(part in line for part in parts):
                return f"{path}:{first_line + offset}"
    for offset, line in enumerate(lines):  # skip decorators
        if line.lstrip().startswith("def "):
            return f"{path}:{first_line + offset}"
    return f"{path}:{first_line}"


# ---------------------------------------------------------------------------------------------
# Reading a local variable of a TRL method while it runs


@contextmanager
def reading_locals(
    method: Callable, names: tuple[str, ...], when_bound: str | None = None
) -> Iterator[dict[str, Any]]:
    """Yield a dict that receives `names` from the frame of `method` while it runs.

    Without `when_bound` the values are read when the method returns. With it, they are read on
    the first line at which the local `when_bound` exists: e.g. TRL's combined `rewards` right
    after `advantages` is computed from them, before a logging block rebinds the name. An
    implementation that never binds `when_bound` (a subclass that names its advantages its own
    way) has `names` read when it returns, so its own value still wins over its base's.
    """
    codes = _implementations(method)
    seen: dict[str, Any] = {}
    if not names:
        yield seen
        return
    by_code: dict[CodeType, dict[str, Any]] = {}

    def in_method(frame, event, arg):
        found = by_code.setdefault(frame.f_code, {})
        if found:  # read once per implementation (the first call: GA = 2 runs it twice)
            return None
        if event == "return" or (event == "line" and when_bound in frame.f_locals):
            frame_locals = frame.f_locals
            found.update({name: frame_locals[name] for name in names if name in frame_locals})
        return in_method

    def on_call(frame, event, arg):
        return in_method if frame.f_code in codes else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield seen
    finally:
        sys.settrace(previous)
        for code in codes:  # base class first: the subclass's own value of a name wins
            seen.update(by_code.get(code, {}))


def _implementations(method: Callable) -> list[CodeType]:
    """The code of `method` and of every implementation of its name along the checked class's
    MRO, base first: a subclass that overrides the method and calls super() runs both, and a
    local is read from whichever binds it (the subclass's when both do)."""
    name = inspect.unwrap(method).__name__
    codes = []
    for klass in reversed(_CHECKED.cls.__mro__):
        function = vars(klass).get(name)
        if inspect.isfunction(function):
            code = inspect.unwrap(function).__code__
            if code not in codes:
                codes.append(code)
    own = inspect.unwrap(method).__code__  # a method found on no class of the MRO (patched in)
    return codes if own in codes else [own, *codes]


@contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Set `owner.name = value` for the duration, then put back what was there (or nothing)."""
    had_own = name in vars(owner)
    previous = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had_own:
            setattr(owner, name, previous)
        else:
            delattr(owner, name)


def tokenizer_with_ids(
    tokenizer: Any, eos_token_id: int, pad_token_id: int, prompts: list[list[int]] | None = None
) -> Any:
    """A copy of `tokenizer` whose `eos_token_id` and `pad_token_id` are the given ids.

    TRL reads them from the tokenizer (`processing_class` before 1.3, `_tokenizer` after); the copy
    is still an instance of the tokenizer's class, so TRL's isinstance tests see a tokenizer. With
    `prompts`, calling it on texts (TRL tokenizing the prompts before 0.29.1) gives those ids,
    left-padded with the pad id.
    """
    cls = type(tokenizer)
    members: dict[str, Any] = {
        "eos_token_id": property(lambda self: eos_token_id),
        "pad_token_id": property(lambda self: pad_token_id),
    }
    if prompts is not None:

        def tokenize(self, text=None, *args: Any, return_tensors=None, **kwargs: Any):
            if text is None or len(text) != len(prompts):
                return cls.__call__(self, text, *args, return_tensors=return_tensors, **kwargs)
            width = max(len(ids) for ids in prompts)
            ids = [[pad_token_id] * (width - len(row)) + row for row in prompts]
            mask = [[0] * (width - len(row)) + [1] * len(row) for row in prompts]
            return BatchEncoding(
                {"input_ids": ids, "attention_mask": mask}, tensor_type=return_tensors
            )

        members["__call__"] = tokenize
    with_ids = type(cls.__name__, (cls,), members)
    clone = copy.copy(tokenizer)
    clone.__class__ = with_ids
    return clone


# ---------------------------------------------------------------------------------------------
# The trainer


@contextmanager
def _rng_untouched() -> Iterator[None]:
    """GRPOTrainer.__init__ reseeds every RNG (set_seed); the caller's random streams must not see it."""
    import numpy as np

    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng():
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)


@contextmanager
def _recording_fused_head_calls(calls: list[dict]) -> Iterator[None]:
    """Record the arguments GRPOTrainer.__init__ passes to `add_fused_lm_head` (temperature, ...).

    Only TRL >= 1.15 has the fused LM head; before, nothing is recorded.
    """
    if not FUSED_LM_HEAD:
        yield
        return
    original = grpo_module.add_fused_lm_head

    def recording(model, **kwargs):
        calls.append({"model": model, **kwargs})
        return original(model, **kwargs)

    grpo_module.add_fused_lm_head = recording
    try:
        yield
    finally:
        grpo_module.add_fused_lm_head = original


def _unused_reward(completions, **_) -> list[float]:
    """Placeholder reward function: every call site that would reach it is given rewards instead."""
    raise RuntimeError("the adapter supplies rewards; this reward function must never run")


def grpo_config(output_dir: str, **overrides: Any) -> GRPOConfig:
    """TRL's offline CPU recipe: fp32, no checkpointing, one process, GA = S = 1, no KL, over the
    user's convention fields and own fields (`_kept_config`), in the user's config class.

    beta is 0 whatever the release's default (0.04 before 0.19.1), so that no reference model is
    loaded; the loss stages set beta per call. Options a release does not have are left out.
    """
    options = _kept_config()
    options.update(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        temperature=BUILD_TEMPERATURE,
        beta=0.0,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    options.update(overrides)
    known = trl_driver.config_fields(_CHECKED.config_cls)
    return _CHECKED.config_cls(**{k: v for k, v in options.items() if k in known})


def scratch_dir() -> str:
    path = tempfile.mkdtemp(prefix="grpo-check-trl-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def build_trainer(model: str | Path, **overrides: Any) -> tuple[GRPOTrainer, list[dict]]:
    """A GRPOTrainer on a saved model folder, in train mode, and the fused-head calls of its init.

    The tokenizer is always the tiny model's: TRL needs one, and every id the adapter feeds TRL
    comes as ids, not text. P = GA = S = 1: TRL's normalisers equal the protocol's.
    """
    tokenizer = trl_driver.offline_tokenizer(tiny_model_path())
    fused_head_calls: list[dict] = []
    with _rng_untouched(), _recording_fused_head_calls(fused_head_calls):
        trainer = trl_driver.build(
            _CHECKED.cls,
            model,
            grpo_config(scratch_dir(), **overrides),
            [_unused_reward],
            [PROMPT_TEXT] * 2,
            tokenizer,
        )
    trainer.model.train()  # HF Trainer switches to train mode inside train(); _compute_loss reads it
    return trainer, fused_head_calls


# Moved to the driver the task verifier shares; this name stays for importers.
clear_logs = trl_driver.clear_logs


@cache
def _built() -> tuple[GRPOTrainer, list[dict]]:
    return build_trainer(tiny_model_path())


def trainer() -> GRPOTrainer:
    """The process's one GRPOTrainer on the tiny model, built on first use."""
    return _built()[0]


@cache
def built_eos_token_id() -> int:
    """The EOS id the trainer was built with (`eos_token_ids[0]` from 1.14.2, else the tokenizer's)."""
    return trl_driver.eos_token_ids(trainer())[0]


@cache
def built_pad_token_id() -> int:
    """The tokenizer's pad id (a real token id: padded rows go through the model in training)."""
    return int(trainer().processing_class.pad_token_id)


@cache
def built_temperature() -> float:
    """What __init__ made of BUILD_TEMPERATURE for scoring (`self.temperature`, before 1.15)."""
    return float(trainer().temperature)


@cache
def scales_for_accumulation() -> bool:
    """True when `_compute_loss` scales the loss for gradient accumulation itself (0.23+): it
    divides by `current_gradient_accumulation_steps`. 0.23-1.14 also give HF's Trainer a
    `compute_loss_func` so that its `training_step` does not; 1.16's own `_BaseTrainer` has no
    such scaling, so the source is what tells, not that attribute."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    return "current_gradient_accumulation_steps" in source


@cache
def scoring_result_sample() -> Any:
    """One real return of the scoring method (a tensor before 0.20, then a 2- or 3-tuple)."""
    grpo = trainer()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        return trl_driver.score(
            grpo, grpo.model, ids, torch.ones_like(ids), 1, compute_entropy=True
        )


def policy_fused_head_kwargs() -> dict[str, Any]:
    """The keyword arguments GRPOTrainer.__init__ gave `add_fused_lm_head` for the policy."""
    built, calls = _built()
    for call in calls:
        if call["model"] is built.model:
            return {k: v for k, v in call.items() if k != "model"}
    raise RuntimeError("GRPOTrainer.__init__ did not patch the policy with add_fused_lm_head")


def trl_temperature(requested: float, used_at_build: float | None) -> float:
    """The temperature TRL would use for `requested`, given what it used for BUILD_TEMPERATURE.

    TRL turns `args.temperature` into the fused head's and the GenerationConfig's temperature in
    __init__; we saw what it made of BUILD_TEMPERATURE and carry the same factor over (1 when TRL
    passes the temperature through, 1 / 0.7 when it drops it and the default 1.0 applies).
    """
    factor = (1.0 if used_at_build is None else used_at_build) / BUILD_TEMPERATURE
    return requested * factor


# ---------------------------------------------------------------------------------------------
# A causal-LM stand-in for scoring given logits through TRL's scoring code


class LogitsAsHiddenStates(torch.nn.Module):
    """A causal LM whose logits, and last hidden states, are given logits; its LM head is the identity.

    Before TRL 1.15 its forward returns the logits; patched by `add_fused_lm_head` (1.15+), TRL's
    own scoring (label masking, the shift, the chunked log-softmax kernel) runs on the hidden
    states: `h @ I = logits` exactly in fp32.
    """

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.config = PretrainedConfig()
        vocab = logits.size(-1)
        self.lm_head = torch.nn.Linear(vocab, vocab, bias=False, dtype=logits.dtype)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(vocab, dtype=logits.dtype))
        self.lm_head.weight.requires_grad_(False)
        self._logits = logits

    def base_model(self, input_ids=None, attention_mask=None, **_: Any) -> SimpleNamespace:
        return SimpleNamespace(last_hidden_state=self._logits)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, logits_to_keep=0, **_: Any) -> Any:
        """Before TRL 1.15 scoring calls the model and reads `.logits` (a copy: 1.0-1.8 divide it
        by the temperature in place); the fused head replaces this forward from 1.15.

        `logits_to_keep` keeps the last positions only, as a transformers causal LM does (0: all):
        0.18-0.19 rely on it and slice nothing themselves (0.17 slices again, which is harmless).
        """
        logits = self._logits[:, -logits_to_keep:] if logits_to_keep else self._logits
        return SimpleNamespace(logits=logits.clone())
