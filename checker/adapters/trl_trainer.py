"""The machinery behind `checker.adapters.trl_adapter`: one GRPOTrainer, seams to feed it, and a way to read it.

Everything here serves one rule: the adapter never recomputes what TRL computes. It builds a real
`GRPOTrainer` (TRL 1.16, whichever copy `import trl` finds first on sys.path), replaces only the
inputs of the method under check (generation returns given ids, rewards return given values, the
policy forward returns given log-probs) and reads what TRL's own code made of them: a return value,
or a local variable of TRL's method read from its frame when the method does not return it.
"""

from __future__ import annotations

import atexit
import inspect
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import CodeType, SimpleNamespace
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_module
from datasets import Dataset
from transformers import PretrainedConfig, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from reference_impl.tiny import tiny_model_path

# The trainer is built with a non-unit temperature so that what TRL's __init__ does with it (the
# fused LM head's temperature, the GenerationConfig's temperature) can be told apart from "ignored".
BUILD_TEMPERATURE = 0.7
PROMPT_TEXT = "1 + 2 ="

GRPO_TRAINER_FILE = str(Path(inspect.getsourcefile(GRPOTrainer)).resolve())


# ---------------------------------------------------------------------------------------------
# Locations: which line of the imported (possibly patched) TRL source a function drives


def source_location(function: Callable, marker: str | None = None) -> str:
    """`file:line` of `marker`'s first occurrence in `function`'s source, else of its `def` line."""
    function = inspect.unwrap(function)
    path = str(Path(inspect.getsourcefile(function)).resolve())
    lines, first_line = inspect.getsourcelines(function)
    if marker is not None:
        for offset, line in enumerate(lines):
            if marker in line:
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
    after `advantages` is computed from them, before a logging block rebinds the name.
    """
    code: CodeType = inspect.unwrap(method).__code__
    seen: dict[str, Any] = {}
    if not names:
        yield seen
        return

    def read(frame) -> None:
        frame_locals = frame.f_locals
        seen.update({name: frame_locals[name] for name in names if name in frame_locals})

    def in_method(frame, event, arg):
        if seen:
            return None
        at_return = when_bound is None and event == "return"
        if at_return or (event == "line" and when_bound in frame.f_locals):
            read(frame)
        return in_method

    def on_call(frame, event, arg):
        return in_method if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield seen
    finally:
        sys.settrace(previous)


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


class TokenizerWithPad:
    """The trainer's tokenizer with another pad id (TRL reads `_tokenizer.pad_token_id`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, pad_token_id: int) -> None:
        self._tokenizer = tokenizer
        self.pad_token_id = pad_token_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


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
    """Record the arguments GRPOTrainer.__init__ passes to `add_fused_lm_head` (temperature, ...)."""
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
    """TRL's offline CPU recipe: fp32, no checkpointing, one process, GA = S = 1."""
    options = dict(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        temperature=BUILD_TEMPERATURE,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    options.update(overrides)
    return GRPOConfig(**options)


def scratch_dir() -> str:
    path = tempfile.mkdtemp(prefix="grpo-check-trl-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def build_trainer(model: str | Path, **overrides: Any) -> tuple[GRPOTrainer, list[dict]]:
    """A GRPOTrainer on a saved model folder, in train mode, and the fused-head calls of its init.

    The tokenizer is always the tiny model's: TRL needs one, and every id the adapter feeds TRL
    comes as ids, not text.
    """
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_model_path())
    fused_head_calls: list[dict] = []
    with _rng_untouched(), _recording_fused_head_calls(fused_head_calls):
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=[_unused_reward],
            args=grpo_config(scratch_dir(), **overrides),
            train_dataset=Dataset.from_dict({"prompt": [PROMPT_TEXT] * 2}),
            processing_class=tokenizer,
        )
    trainer.model.train()  # HF Trainer switches to train mode inside train(); _compute_loss reads it
    # P = GA = S = 1: TRL's normalisers equal the protocol's
    trainer.current_gradient_accumulation_steps = 1
    return trainer, fused_head_calls


@cache
def _built() -> tuple[GRPOTrainer, list[dict]]:
    return build_trainer(tiny_model_path())


def trainer() -> GRPOTrainer:
    """The process's one GRPOTrainer on the tiny model, built on first use."""
    return _built()[0]


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


def clear_logs(grpo: GRPOTrainer) -> None:
    """Drop the metrics and completion logs a driven call appended (they only grow otherwise)."""
    for mode in grpo._metrics.values():
        mode.clear()
    for log in grpo._logs.values():
        log.clear()


# ---------------------------------------------------------------------------------------------
# A causal-LM stand-in for scoring given logits through TRL's fused LM head


class LogitsAsHiddenStates(torch.nn.Module):
    """A causal LM whose last hidden states are given logits and whose LM head is the identity.

    Patched by `add_fused_lm_head`, it lets TRL's own scoring (label masking, the shift, the
    chunked log-softmax kernel) run on logits the caller chose: `h @ I = logits` exactly in fp32.
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

    def forward(self, input_ids=None, attention_mask=None, **_: Any) -> Any:
        raise RuntimeError("only the fused LM head path is used")
