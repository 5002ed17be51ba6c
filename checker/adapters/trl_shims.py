"""What differs between TRL releases 0.17 to 1.16 for the adapter, one small function per concern.

Driving a release's GRPOTrainer (its scoring method, EOS ids, config fields) is
`reference_impl.trl_driver`'s, shared with the task verifier's probes; what a release computes
differently is decided by its number (`RELEASE`) in `reference_impl.trl_semantics`. What is left
here is the adapter's own: where a release computes log-probs (the fused LM head from 1.15) and
how a fork or subclass decodes completions. The facts behind each one are in the TRL releases'
own `grpo_trainer.py` and `grpo_config.py`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
import trl
import trl.trainer.grpo_trainer as grpo_module
from trl import GRPOTrainer

from checker.adapters import trl_version
from reference_impl import trl_driver
from reference_impl.trl_driver import logps_of, score, scoring_method
from reference_impl.trl_semantics import parse, value

RELEASE_TEXT = trl_version.version_of(Path(trl.__file__).resolve().parent.parent) or "unknown"
RELEASE = parse(RELEASE_TEXT)

# 1.15+: GRPOTrainer scores through a fused LM head (`add_fused_lm_head`) whose arithmetic is in
# `trl/kernels/chunked_logprob.py`; before, through `trl.trainer.utils.selective_log_softmax`.
FUSED_LM_HEAD = hasattr(grpo_module, "add_fused_lm_head")

# Moved to the driver the task verifier shares; these names stay for importers.
config_fields = trl_driver.config_fields
config_defaults = trl_driver.config_defaults
scale_rewards_setting = trl_driver.scale_rewards_setting

# The scoring method's name (`reference_impl.trl_driver.SCORING_METHODS`).
LOGPS_METHOD = scoring_method(GRPOTrainer)

# A list of EOS ids (`self.eos_token_ids`, matched with torch.isin) only from 1.14.2; before, the
# mask ends at the tokenizer's one `eos_token_id`.
EOS_ID_LIST = value("eos_token_ids", RELEASE) == "all"


# ---------------------------------------------------------------------------------------------
# scoring


def call_logps(
    grpo: GRPOTrainer, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int
) -> torch.Tensor:
    """The release's scoring method on `model`: the per-token log-probs of the last `keep` tokens."""
    return logps_of(score(grpo, model, input_ids, attention_mask, keep, compute_entropy=True))


def logps_result(logps: torch.Tensor, like: tuple | torch.Tensor) -> tuple | torch.Tensor:
    """`logps` in the form the release's scoring method returns (`like` is one real return)."""
    if isinstance(like, torch.Tensor):
        return logps
    rest = (torch.zeros_like(logps.detach()),) + (None,) * (len(like) - 2)
    return (logps, *rest)[: len(like)]


def logprob_arithmetic() -> tuple[Callable, str]:
    """The function, and a marker of its line, where the release computes log p = z - logsumexp z."""
    if FUSED_LM_HEAD:
        from trl.kernels.chunked_logprob import ChunkedLogProbFunction

        return ChunkedLogProbFunction.forward, "logprobs = "
    # The fp32 branch's first assignment (the bf16 fallback comes after it).
    return grpo_module.selective_log_softmax, "per_token_logps = "


# ---------------------------------------------------------------------------------------------
# decode: a fork's or a subclass's own helper between the decoded completions and the rewards

_TOKENIZER_ATTRIBUTES = {"processing_class", "tokenizer", "_tokenizer"}
# Where a trainer turns completion ids into the text its reward functions score: TRL decodes in
# `_generate_and_score_completions` (to 0.2x) or `_generate` (1.x); a subclass also strips in
# `_calculate_rewards` before calling super().
DECODE_METHODS = ("_generate_and_score_completions", "_generate", "_calculate_rewards")
# The names TRL's releases give the decoded completions.
DECODED = {"completions", "completions_text", "contents"}


@dataclass(frozen=True)
class DecodeHelper:
    """A decode helper found in a trainer, and how the trainer calls it.

    `form`: "ids" (the helper decodes: it takes `completion_ids` and the tokenizer), "text" (it
    takes one decoded text, in a comprehension over the decoded completions) or "texts" (it takes
    the list of decoded texts). `method`: it is called as `self.<name>(...)`.
    """

    function: Callable
    call: ast.Call
    form: str
    method: bool = False
    variable: str | None = None  # the comprehension's variable (form "text")


@cache
def decode_helper(trainer_class: type = GRPOTrainer) -> DecodeHelper | None:
    """The helper the trainer decodes completions with, if it is not TRL's own batch_decode.

    Stock TRL decodes with `self.processing_class.batch_decode(completion_ids, ...)` and hands the
    text to the reward functions. A fork may call its own helper there instead (SkillsBench's
    `completions_text = decode_and_strip_padding(completion_ids, self.processing_class)`), and a
    subclass may strip the decoded text in an override (`completions = [strip_think(c) for c in
    completions]`). Found by reading DECODE_METHODS, the subclass's own first: an assignment to
    a DECODED name from a call of a plain name or of a `self.` method that takes `completion_ids`
    (and the tokenizer), or that takes the decoded text, one at a time or as a list. A helper of
    text is taken only when it looks like a reasoning strip (see `_strips_reasoning`), so an
    answer extractor is not judged as one.
    """
    for klass in trainer_class.__mro__:
        for name in DECODE_METHODS:
            function = vars(klass).get(name)
            if inspect.isfunction(function):
                found = _helper_in(inspect.unwrap(function), trainer_class)
                if found is not None:
                    return found
    return None


def _helper_in(method: Callable, trainer_class: type) -> DecodeHelper | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        if not {t.id for t in node.targets if isinstance(t, ast.Name)} & DECODED:
            continue
        found = _helper_call(node.value, method, trainer_class)
        if found is not None:
            return found
    return None


def _helper_call(value: ast.expr, method: Callable, trainer_class: type) -> DecodeHelper | None:
    """The helper `value` calls, in one of the three forms, if it is one."""
    variable = None
    if isinstance(value, ast.ListComp) and len(value.generators) == 1:
        generator = value.generators[0]
        iterates_text = isinstance(generator.iter, ast.Name) and generator.iter.id in DECODED
        if not (iterates_text and isinstance(generator.target, ast.Name)):
            return None
        variable, value = generator.target.id, value.elt
    if not isinstance(value, ast.Call):
        return None
    function, is_method = _callee(value.func, method, trainer_class)
    if function is None:
        return None
    arguments = [*value.args, *(k.value for k in value.keywords)]
    names = {a.id for a in arguments if isinstance(a, ast.Name)}
    if variable is not None:
        form, passed = "text", {variable}
    elif "completion_ids" in names:
        form, passed = "ids", {"completion_ids"}
    else:
        form, passed = "texts", names & DECODED
    if not passed <= names or not all(_drivable(a, passed) for a in arguments):
        return None
    if form != "ids" and not _strips_reasoning(function):
        return None
    return DecodeHelper(function, value, form, is_method, variable)


def _callee(func: ast.expr, method: Callable, trainer_class: type) -> tuple[Callable | None, bool]:
    """A plain name from the method's module, or `self.<name>` from the trainer class."""
    if isinstance(func, ast.Name):
        function = method.__globals__.get(func.id)
        return (function, False) if inspect.isfunction(function) else (None, False)
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
    ):
        function = inspect.getattr_static(trainer_class, func.attr, None)
        if isinstance(function, staticmethod):
            return function.__func__, False
        return (function, True) if inspect.isfunction(function) else (None, False)
    return None, False


def _strips_reasoning(function: Callable) -> bool:
    """A text helper is a reasoning strip when it takes tag arguments or its name or source speaks
    of reasoning (`think`, `reason`): an answer extractor (`#### 42`) is not one."""
    parameters = set(inspect.signature(function).parameters)
    if {"open_tag", "close_tag"} <= parameters:
        return True
    try:
        source = inspect.getsource(function).lower()
    except (OSError, TypeError):
        source = function.__name__.lower()
    return "think" in source or "reason" in source


def _drivable(node: ast.expr, passed: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in passed
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.attr in _TOKENIZER_ATTRIBUTES
    return isinstance(node, ast.Constant)


def call_decode_helper(
    helper: DecodeHelper, text: str, tokenizer: Any, trainer: Any, **tags: str
) -> Any:
    """What the helper makes of one completion whose decoded text is `text`, called as the trainer
    calls it: `tokenizer` decodes any ids to `text`; a `self.` helper is bound to `trainer`."""
    ids = torch.zeros(1, 1, dtype=torch.long)

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return {"ids": ids, "text": text, "texts": [text]}[helper.form]
        if isinstance(node, ast.Attribute):
            return tokenizer
        return node.value

    function = helper.function
    if helper.method:
        function = function.__get__(trainer)
    keywords = {k.arg: value(k.value) for k in helper.call.keywords if k.arg is not None}
    out = function(*(value(a) for a in helper.call.args), **keywords, **tags)
    return out if helper.form == "text" else out[0]
