"""grpo-check's `trl` kind: the stage protocol, computed by the imported TRL release's own GRPOTrainer code.

`grpo-check trl` (or a path to a TRL tree, put first on sys.path) imports this module in the child
process and checks it like any functions candidate. Every TRL release from 0.17 to 1.16 is driven;
what moved between releases is handled by `trl_shims`, and each release is compared with its own
defaults and semantics (`trl_conventions`). Each function below drives the GRPOTrainer method that
computes its stage, on one trainer built once per process (the tiny model, fp32, CPU), with only
that method's inputs supplied by the adapter (line numbers: TRL 1.16.0 `grpo_trainer.py`):

| function | what runs | inputs the adapter supplies |
| --- | --- | --- |
| `combine_rewards` | `_generate_and_score_completions`, reward block (gt:L2759-2764) | one reward function per column, returning the given values (None for NaN); TRL's combined `rewards` is read from the method's frame |
| `compute_advantages` | `_generate_and_score_completions`, advantage block (gt:L2766-2810) | rewards (one reward function); its returned `advantages` |
| `completion_mask` | the EOS mask (gt:L1880) + truncation mask (gt:L2490) of `_generate_and_score_completions` | `model.generate` returns the given ids; the returned `completion_mask`, right-padded to T |
| `get_per_token_logps` | the scoring method (`_get_per_token_logps[_and_entropies]`, gt:L1419); from 1.15 with `add_fused_lm_head` as `__init__` patches the policy | the model |
| `completion_logps`, `selective_log_softmax` | the same method on a stand-in model whose logits (hidden states, LM head the identity, from 1.15) are the given logits | logits |
| `compute_loss` | `_compute_loss` (gt:L3020) | the scoring method returns the given log-probs (graph kept); protocol kwargs set on the trainer and its args |
| `per_token_kl` | `_compute_loss` with beta = 1, A = 0, no bias correction; TRL's `per_token_kl` read from the frame, or, for a subclass's own loss without that local, measured by value one token at a time (`_kl_by_value`) | log-probs, reference log-probs |
| `strip_reasoning` | a fork's or subclass's own decode helper (of ids and tokenizer, or of text), where the trainer decodes or scores (`trl_shims.decode_helper`) | a tokenizer whose decode returns the given text, or the text |
| `generate_completions` | `_generate_and_score_completions`'s generation with the trainer's GenerationConfig | the model, prompts repeated G times as TRL's sampler does |
| `make_reference_model` | `GRPOTrainer.__init__` with beta != 0 (reloads from `config._name_or_path`, gt:L984-1003) | the policy, saved to a folder first |
| `grpo_step` | `training_step` (gt:L1510) -> `_prepare_inputs` -> `_generate_and_score_completions` -> `_compute_loss` -> backward, `num_iterations` times | the policy, reference and optimizer; completions and rewards as above; clip + optimizer step as HF's loop does them |

Stock TRL has no reasoning-strip function (reward functions receive the raw decoded text), so
`strip_reasoning` exists only for a fork that has one.

Conventions: one process, S = 1 and train mode (gt:L3153-3183). `compute_loss` runs one micro-batch
at GA = 1, or, where the release scales the loss for accumulation itself (0.23+), the same
micro-batch twice at GA = 2 as HF's loop accumulates it, with num_items_in_batch counted over both
(see `_accumulated`). Given `gradient_accumulation_steps` (and `steps_per_generation`), it runs one
micro-step of such a window instead, so that a check can sum the micro-steps of different
micro-batches itself. Each function's `grpo_check_location` is the line of the imported, possibly
patched, TRL source that computes its value.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from trl import GRPOConfig

from checker.adapters import trl_conventions, trl_shims
from checker.adapters import trl_trainer as harness
from checker.adapters.trl_trainer import (
    PROMPT_TEXT,
    LogitsAsHiddenStates,
    checked_class,
    reading_locals,
    replaced,
    source_location,
    tokenizer_with_ids,
    trainer,
    trl_temperature,
)
from reference_impl import trl_driver

# TRL's GRPOTrainer, or the user's subclass of it (`grpo-check FILE.py:CLASS`): each method
# named below is then the subclass's override where it has one, and its failures are located there.
GRPOTrainer = checked_class()
CONVENTIONS: dict[str, Any] = trl_conventions.with_declared(
    trl_conventions.conventions(GRPOConfig, harness.declared_config()),
    harness.declared_conventions(),
)
SUPPORTED: dict[str, list] = trl_conventions.supported(GRPOConfig)
TRL_VERSION = trl_shims.RELEASE_TEXT
_BOOL_SCALE_REWARDS = "scale_rewards" in SUPPORTED


def _located(function, *markers, also_runs: tuple[str, ...] = ()):
    """Decorator: tag an adapter function with the TRL line it drives.

    `also_runs` (`grpo_check_depends_on`) names other stages whose TRL code the function cannot
    avoid running, so that a bug there may also show here: e.g. TRL's advantage block starts from
    its own reward combination, and its generation output is cut by its completion mask.
    """

    def tag(adapter_function):
        adapter_function.grpo_check_location = source_location(function, *markers)
        adapter_function.grpo_check_depends_on = also_runs
        return adapter_function

    return tag


@contextmanager
def _settings(owner: Any, **values: Any):
    """Set several attributes of `owner` for the duration of one driven call."""
    with ExitStack() as stack:
        for name, value in values.items():
            stack.enter_context(replaced(owner, name, value))
        yield


@contextmanager
def _token_ids(grpo: GRPOTrainer, eos_token_ids: Sequence[int], pad_token_id: int):
    """The EOS ids and pad id where the release reads them: `eos_token_ids` (1.14.2+),
    `eos_token_id` / `pad_token_id` (0.21+), the tokenizer (`processing_class`, `_tokenizer`)."""
    eos = [int(i) for i in eos_token_ids]
    with _settings(
        grpo,
        eos_token_ids=eos,
        eos_token_id=eos[0],
        pad_token_id=pad_token_id,
        processing_class=tokenizer_with_ids(grpo.processing_class, eos[0], pad_token_id),
        _tokenizer=tokenizer_with_ids(
            getattr(grpo, "_tokenizer", grpo.processing_class), eos[0], pad_token_id
        ),
    ):
        yield


@contextmanager
def _reward_functions(grpo: GRPOTrainer, rewards_per_func: torch.Tensor, weights):
    """Reward functions that return the given columns (NaN -> None, TRL's "cannot score")."""
    columns = [
        [None if torch.isnan(v) else float(v) for v in rewards_per_func[:, k]]
        for k in range(rewards_per_func.size(1))
    ]

    def returning(column: list) -> Any:
        def reward(completions, **_: Any) -> list:
            return list(column)

        return reward

    names = [f"reward_{k}" for k in range(len(columns))]
    with _settings(
        grpo,
        reward_funcs=[returning(column) for column in columns],
        reward_processing_classes=[None] * len(columns),
        reward_func_names=names,
        reward_weights=torch.as_tensor(weights, dtype=torch.float32),
        multi_objective_aggregation="sum_then_normalize",
    ):
        yield


# ---------------------------------------------------------------------------------------------
# rewards, advantages, masking: _generate_and_score_completions with given completions and rewards


def _generate_and_score(
    rewards_per_func: torch.Tensor,
    *,
    num_generations: int,
    scale_rewards: str = CONVENTIONS["scale_rewards"],
    reward_weights: Sequence[float] | torch.Tensor | None = None,
    completion_ids: torch.Tensor | None = None,
    eos_token_ids: Sequence[int] | None = None,
    mask_truncated_completions: bool = False,
) -> tuple[dict, dict]:
    """Run `_generate_and_score_completions` on N = len(rewards_per_func) rows.

    Generation returns `completion_ids` (default: one token, then EOS) and the reward functions
    return `rewards_per_func` [N, K] (NaN = a reward function returned None). Returns TRL's output
    dict and TRL's combined `rewards` as the advantage block saw them.
    """
    grpo = trainer()
    rewards_per_func = torch.as_tensor(rewards_per_func, dtype=torch.float32)
    num_rows, num_funcs = rewards_per_func.shape
    eos = [harness.built_eos_token_id()] if eos_token_ids is None else list(eos_token_ids)
    if completion_ids is None:
        # Not EOS alone: a completion that is only EOS would be empty under a mask that drops EOS,
        # and the rewards/advantages stages must not depend on the masking stage being right.
        token = torch.full((num_rows, 1), max(eos) + 1, dtype=torch.long)
        completion_ids = torch.cat([token, torch.full_like(token, eos[0])], dim=1)
    weights = torch.ones(num_funcs) if reward_weights is None else reward_weights
    # TRL also counts a row whose last id is the pad id as finished (gt:L2488); `generate` never
    # pads a row that has no EOS, so the pad id here is one that occurs nowhere in the rows.
    pad_token_id = int(max(int(completion_ids.max()), *eos)) + 1

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        return torch.cat([input_ids, completion_ids.to(input_ids)], dim=1)

    with (
        _settings(
            grpo,
            num_generations=num_generations,
            scale_rewards=trl_driver.scale_rewards_setting(scale_rewards, _BOOL_SCALE_REWARDS),
            mask_truncated_completions=mask_truncated_completions,
        ),
        _token_ids(grpo, eos, pad_token_id),
        _reward_functions(grpo, rewards_per_func, weights),
        replaced(grpo.model, "generate", generate),
        reading_locals(
            GRPOTrainer._generate_and_score_completions, ("rewards",), when_bound="advantages"
        ) as seen,
    ):
        output = grpo._generate_and_score_completions([{"prompt": PROMPT_TEXT}] * num_rows)
    trl_driver.clear_logs(grpo)
    return output, seen


@_located(
    GRPOTrainer._generate_and_score_completions,
    "rewards[unscorable_mask] = torch.nan",
    ("rewards = ", "nansum("),
)
def combine_rewards(
    rewards_per_func: torch.Tensor, reward_weights: Sequence[float] | torch.Tensor | None = None
) -> torch.Tensor:
    """TRL's weighted sum of the reward functions, as its advantage block uses it."""
    num_rows = rewards_per_func.shape[0]
    _, seen = _generate_and_score(
        rewards_per_func, num_generations=num_rows, reward_weights=reward_weights
    )
    if "rewards" not in seen:
        raise RuntimeError(
            "could not read `rewards` in GRPOTrainer._generate_and_score_completions "
            "(the local was renamed or the advantage block no longer binds `advantages`)"
        )
    return seen["rewards"].clone()


@_located(
    GRPOTrainer._generate_and_score_completions,
    "advantages = rewards - mean_grouped",
    also_runs=("rewards",),
)
def compute_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = CONVENTIONS["scale_rewards"]
) -> torch.Tensor:
    """TRL's advantages for already combined rewards (one reward function, weight 1)."""
    output, _ = _generate_and_score(
        torch.as_tensor(rewards).reshape(-1, 1),
        num_generations=num_generations,
        scale_rewards=scale_rewards,
    )
    return output["advantages"]


@_located(
    getattr(GRPOTrainer, "_generate_single_turn", GRPOTrainer._generate_and_score_completions),
    "completion_mask = (sequence_indices",
)
def completion_mask(
    completion_ids: torch.Tensor,
    eos_token_ids: Sequence[int] | int,
    mask_truncated_completions: bool = False,
) -> torch.Tensor:
    """TRL's loss mask for completions that `generate` returned as `completion_ids` [B, T]."""
    eos = [eos_token_ids] if isinstance(eos_token_ids, int) else [int(i) for i in eos_token_ids]
    if not eos:
        raise ValueError("eos_token_ids is empty: at least one end-of-sequence id is needed")
    if not trl_shims.EOS_ID_LIST:
        eos = eos[:1]  # before 1.14.2 TRL ends completions at the tokenizer's one EOS id
    ids = torch.as_tensor(completion_ids, dtype=torch.long)
    num_rows, length = ids.shape
    output, _ = _generate_and_score(
        torch.zeros(num_rows, 1),
        num_generations=num_rows,
        completion_ids=ids,
        eos_token_ids=eos,
        mask_truncated_completions=mask_truncated_completions,
    )
    mask = output["completion_mask"]  # [B, longest kept row]: TRL cut every row after its first EOS
    return F.pad(mask, (0, length - mask.size(1)))


# ---------------------------------------------------------------------------------------------
# decode: a fork's own helper between decoding and the reward functions (stock TRL has none)


class _TextAsIds:
    """A tokenizer whose decoding of any ids is the given text (the fork's helper is what runs)."""

    def __init__(self, text: str, tokenizer: Any) -> None:
        self._text = text
        self.pad_token = tokenizer.pad_token
        self.eos_token = tokenizer.eos_token

    def batch_decode(self, sequences: Any, **_: Any) -> list[str]:
        return [self._text for _ in sequences]

    def decode(self, ids: Any, **_: Any) -> str:
        return self._text


def _strip_reasoning_driver(helper: trl_shims.DecodeHelper) -> Any:
    """`strip_reasoning` on the trainer's decode helper; it takes the tag keywords only if the
    helper does."""
    takes_tags = {"open_tag", "close_tag"} <= set(inspect.signature(helper.function).parameters)

    def run(text: str, **tags: str) -> str:
        tokenizer = _TextAsIds(text, trainer().processing_class)
        return trl_shims.call_decode_helper(helper, text, tokenizer, trainer(), **tags)

    if takes_tags:

        def strip_reasoning(
            text: str, open_tag: str = "<think>", close_tag: str = "</think>"
        ) -> str:
            """The trainer's decode helper on one completion whose decoded text is `text`."""
            return run(text, open_tag=open_tag, close_tag=close_tag)

    else:

        def strip_reasoning(text: str) -> str:
            """The trainer's decode helper on one completion whose decoded text is `text`."""
            return run(text)

    strip_reasoning.grpo_check_location = source_location(helper.function)
    strip_reasoning.grpo_check_depends_on = ()
    return strip_reasoning


if trl_shims.decode_helper(GRPOTrainer) is not None:
    strip_reasoning = _strip_reasoning_driver(trl_shims.decode_helper(GRPOTrainer))


# ---------------------------------------------------------------------------------------------
# logprobs: the scoring method; from 1.15 through the fused LM head, as __init__ installs it

_LOGPROB_FUNCTION, _LOGPROB_MARKER = trl_shims.logprob_arithmetic()
# A subclass's own scoring method is where its log-probs come from (located at its line).
_LOGPROB_FUNCTION = harness.overridden(trl_shims.LOGPS_METHOD) or _LOGPROB_FUNCTION


def _fused_head_kwargs(temperature: float) -> dict[str, Any]:
    """The arguments `__init__` gave `add_fused_lm_head` for the policy, at `temperature`."""
    kwargs = harness.policy_fused_head_kwargs()
    return {**kwargs, "temperature": trl_temperature(temperature, kwargs.get("temperature"))}


@contextmanager
def _fused_head(model: torch.nn.Module, temperature: float):
    """Patch `model` with TRL's fused LM head for the duration (TRL >= 1.15; before, scoring
    calls the model's own forward); its own forward comes back after."""
    if not trl_shims.FUSED_LM_HEAD:
        yield model
        return
    own_forward = vars(model).get("forward")
    harness.grpo_module.add_fused_lm_head(model, **_fused_head_kwargs(temperature))
    try:
        yield model
    finally:
        if own_forward is None:
            del model.forward
        else:
            model.forward = own_forward


@contextmanager
def _scoring_temperature(temperature: float):
    """Before 1.15 scoring divides the logits by `self.temperature`, set by __init__ from args."""
    grpo = trainer()
    if trl_shims.FUSED_LM_HEAD:
        yield
        return
    used = trl_temperature(temperature, harness.built_temperature())
    with replaced(grpo, "temperature", used):
        yield


def _score(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float,
) -> torch.Tensor:
    with _fused_head(model, temperature), _scoring_temperature(temperature):
        return trl_shims.call_logps(trainer(), model, input_ids, attention_mask, logits_to_keep)


@_located(_LOGPROB_FUNCTION, _LOGPROB_MARKER)
def get_per_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = CONVENTIONS["temperature"],
) -> torch.Tensor:
    """TRL's per-token log-probs of the last `logits_to_keep` tokens under `model`."""
    return _score(model, input_ids, attention_mask, logits_to_keep, temperature)


@_located(_LOGPROB_FUNCTION, _LOGPROB_MARKER)
def completion_logps(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = CONVENTIONS["temperature"],
) -> torch.Tensor:
    """TRL's scoring of the last T tokens of `input_ids` when the model's logits are `logits`."""
    num_rows, length = input_ids.shape
    num_completion = completion_mask.size(1)
    prompt_mask = torch.ones(num_rows, length - num_completion, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    stand_in = LogitsAsHiddenStates(logits)
    return _score(stand_in, input_ids, attention_mask, num_completion, temperature)


@_located(_LOGPROB_FUNCTION, _LOGPROB_MARKER)
def selective_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, temperature: float = CONVENTIONS["temperature"]
) -> torch.Tensor:
    """TRL's log-prob of `index` under `logits` [..., V], through GRPOTrainer's own scoring.

    Each row is scored as a two-token sequence whose first position's logits are the row, so
    the release's scoring (its `selective_log_softmax`, or from 1.15 its fused LM head) runs.
    """
    vocab = logits.size(-1)
    rows = logits.reshape(-1, vocab)
    stacked = torch.stack([rows, torch.zeros_like(rows)], dim=1)  # position 0 predicts token 1
    targets = index.reshape(-1).long()
    input_ids = torch.stack([torch.zeros_like(targets), targets], dim=1)
    logps = _score(
        LogitsAsHiddenStates(stacked), input_ids, torch.ones_like(input_ids), 1, temperature
    )
    return logps.reshape(index.shape)


# ---------------------------------------------------------------------------------------------
# ratio, clipping, kl, loss_aggregation: _compute_loss on given log-probs


def _resolved_epsilon_high(epsilon_low: float, epsilon_high: float | None) -> float:
    """`epsilon_high=None`: what TRL's __init__ resolved None to when it was built with the same
    epsilon (so a change to that rule shows), else epsilon_low as the protocol says."""
    if epsilon_high is not None:
        return epsilon_high
    grpo = trainer()
    built_with_none = grpo.args.epsilon_high is None and grpo.args.epsilon == epsilon_low
    return grpo.epsilon_high if built_with_none else epsilon_low


# The release's defaults of the loss options (e.g. bnpo and beta 0.04 in 0.17).
_LOSS_DEFAULTS = {
    name: CONVENTIONS[name]
    for name in (
        "loss_type",
        "beta",
        "epsilon_low",
        "epsilon_high",
        "delta",
        "importance_sampling_level",
        "use_bias_correction_kl",
        "sapo_temperature_pos",
        "sapo_temperature_neg",
    )
}


# Where the release reads each loss option: on the trainer (set by __init__ from args) or on args.
# Each option is set on both for the call; a release reads the one it has.
@contextmanager
def _loss_settings(length: int, *, max_completion_length: int | None = None, **options: Any):
    """The protocol's loss options, set where `_compute_loss` reads them (trainer and args)."""
    grpo = trainer()
    options = {**_LOSS_DEFAULTS, **options}
    options["epsilon_high"] = _resolved_epsilon_high(
        options["epsilon_low"], options["epsilon_high"]
    )
    options["max_completion_length"] = (
        length if max_completion_length is None else max_completion_length
    )
    on_args = dict(options, epsilon=options["epsilon_low"])
    with _settings(grpo, **options), _settings(grpo.args, **on_args):
        yield


def _accumulated() -> bool:
    """Whether `compute_loss` is driven as two accumulated micro-batches (GA = 2).

    From 0.23 TRL scales the loss for gradient accumulation itself (it sets `compute_loss_func` so
    that HF's `training_step` does not): grpo, bnpo, dr_grpo and sapo divide by
    `current_gradient_accumulation_steps`, dapo and cispo by `num_items_in_batch` counted over the
    accumulated batch. Before 0.23 HF's loop divides by GA outside TRL's code, so there is nothing
    of TRL's to exercise and one micro-batch at GA = 1 is run.
    """
    return harness.scales_for_accumulation()


def _drive_compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    window: tuple[int, int] | None = None,
    read: tuple[str, ...] = (),
    **loss_options: Any,
) -> tuple[torch.Tensor, dict]:
    """Run `_compute_loss` with the scoring method returning `per_token_logps` (graph kept).

    With `_accumulated()`, HF's loop is reproduced on the same micro-batch twice: GA = 2 steps,
    each `_compute_loss` on the micro-batch, `num_items_in_batch` counted over both, and the two
    losses summed as their gradients accumulate. For a TRL that scales correctly the sum is the
    one-micro-batch loss of the protocol, for every loss type (each step contributes half of it).
    `window=(GA, S)` runs one micro-step of a GA-step window whose generation batch has S
    micro-batches, `num_items_in_batch` counting all of them (None: S times this micro-batch's).
    """
    if loss_options.get("beta") is None:  # the release's default
        loss_options["beta"] = CONVENTIONS["beta"]
        if ref_per_token_logps is None:
            # 0.04 before 0.19.1: TRL's reference is the initial policy, so at the first step it
            # equals the policy; the KL term and its gradient are 0 there.
            ref_per_token_logps = per_token_logps.detach()
    if loss_options["beta"] != 0.0 and ref_per_token_logps is None:
        raise ValueError("beta != 0 needs ref_per_token_logps from the frozen reference model")
    grpo = trainer()
    num_rows, length = per_token_logps.shape
    mask = completion_mask.long()  # TRL's completion_mask is int64 (gt:L2459)
    if window is None:
        steps = 2 if _accumulated() else 1
        accumulation_steps, generation_steps = steps, steps
    else:
        steps = 1
        accumulation_steps, generation_steps = window
    if num_items_in_batch is None:  # the generation batch's tokens (gt:L2498): this micro-batch's,
        # once for the protocol's one batch, S times in a window of S micro-batches like it
        num_items_in_batch = mask.sum() * (generation_steps if window else 1)
    inputs = {
        "prompt_ids": torch.zeros(num_rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(num_rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(num_rows, length, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": torch.as_tensor(num_items_in_batch) * steps,  # over the steps run
        "old_per_token_logps": old_per_token_logps,
        "ref_per_token_logps": ref_per_token_logps,
    }
    like = harness.scoring_result_sample()

    def scoring(model, input_ids, attention_mask, logits_to_keep, *_: Any, **__: Any):
        return trl_shims.logps_result(per_token_logps, like)

    with (
        _loss_settings(length, **loss_options),
        _settings(
            grpo,
            num_iterations=1 if old_per_token_logps is None else 2,  # 0.17 reads old only then
            current_gradient_accumulation_steps=accumulation_steps,
        ),
        _settings(
            grpo.args,
            gradient_accumulation_steps=accumulation_steps,
            steps_per_generation=generation_steps,
        ),
        replaced(grpo, trl_shims.LOGPS_METHOD, scoring),
        reading_locals(GRPOTrainer._compute_loss, read) as seen,
    ):
        # compute_loss: the public entry HF's training_step calls (a subclass may override it)
        loss = sum(grpo.compute_loss(grpo.model, inputs) for _ in range(steps))
    trl_driver.clear_logs(grpo)
    return loss, seen


@_located(harness.overridden("compute_loss") or GRPOTrainer._compute_loss)
def compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    loss_type: str = CONVENTIONS["loss_type"],
    beta: float | None = None,
    epsilon_low: float = CONVENTIONS["epsilon_low"],
    epsilon_high: float | None = CONVENTIONS["epsilon_high"],
    delta: float | None = CONVENTIONS["delta"],
    importance_sampling_level: str = CONVENTIONS["importance_sampling_level"],
    use_bias_correction_kl: bool = CONVENTIONS["use_bias_correction_kl"],
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    sapo_temperature_pos: float = CONVENTIONS["sapo_temperature_pos"],
    sapo_temperature_neg: float = CONVENTIONS["sapo_temperature_neg"],
    gradient_accumulation_steps: int | None = None,
    steps_per_generation: int | None = None,
) -> torch.Tensor:
    """TRL's `_compute_loss` on one micro-batch; the gradient flows to `per_token_logps`.

    `beta=None` is the release's default (CONVENTIONS["beta"]); without reference log-probs it is
    measured against the policy itself, as TRL's reference (a copy of the initial policy) is at the
    first step. With `gradient_accumulation_steps` the loss is one micro-step's of a window of that
    many, with `steps_per_generation` (default: GA) micro-batches per generation batch and
    `num_items_in_batch` the generation batch's tokens (see `_window`).
    """
    loss, _ = _drive_compute_loss(
        per_token_logps,
        advantages,
        completion_mask,
        old_per_token_logps=old_per_token_logps,
        ref_per_token_logps=ref_per_token_logps,
        loss_type=loss_type,
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        delta=delta,
        importance_sampling_level=importance_sampling_level,
        use_bias_correction_kl=use_bias_correction_kl,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        sapo_temperature_pos=sapo_temperature_pos,
        sapo_temperature_neg=sapo_temperature_neg,
        window=_window(gradient_accumulation_steps, steps_per_generation, loss_type),
    )
    return loss


def _window(
    gradient_accumulation_steps: int | None, steps_per_generation: int | None, loss_type: str
) -> tuple[int, int] | None:
    """(GA, S) of an explicit accumulation window, or None for the protocol's one batch.

    NotImplementedError (the check skips) where the release's semantics are not the accumulation
    rule: before 0.23 HF's Trainer, not TRL, divides by GA; before 1.10 dapo and cispo normalise by
    the whole generation batch without GA / S, which is one window only when S = GA.
    """
    if gradient_accumulation_steps is None:
        if steps_per_generation is not None:
            raise ValueError("steps_per_generation needs gradient_accumulation_steps")
        return None
    ga = int(gradient_accumulation_steps)
    s = ga if steps_per_generation is None else int(steps_per_generation)
    if ga < 1 or s < 1:
        raise ValueError(
            f"gradient_accumulation_steps={ga} and steps_per_generation={s} must be >= 1"
        )
    if ga != 1 and not _accumulated():
        raise NotImplementedError(
            f"TRL {TRL_VERSION} leaves the division by gradient_accumulation_steps to HF's Trainer"
        )
    if s != ga and loss_type in ("dapo", "cispo") and not trl_conventions.DAPO_WINDOW_RESCALE:
        raise NotImplementedError(
            f"TRL {TRL_VERSION} normalises {loss_type} by the generation batch's tokens without"
            " GA / S (from 1.10)"
        )
    return ga, s


@_located(GRPOTrainer._compute_loss, "per_token_kl = (")
def per_token_kl(per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor) -> torch.Tensor:
    """TRL's per-token KL term, read from `_compute_loss` run with beta = 1 and A = 0.

    A subclass whose `_compute_loss` holds no local `per_token_kl` (its own loss, the KL under its
    own name) has its KL term measured by value instead (`_kl_by_value`).
    """
    shape = per_token_logps.shape
    logps = (
        per_token_logps.reshape(-1, shape[-1]) if per_token_logps.dim() != 2 else per_token_logps
    )
    ref = ref_per_token_logps.reshape(logps.shape)
    _, seen = _drive_compute_loss(
        logps,
        torch.zeros(logps.size(0)),
        torch.ones_like(logps, dtype=torch.long),
        ref_per_token_logps=ref,
        loss_type="bnpo",
        beta=1.0,
        use_bias_correction_kl=False,  # the bare k3 term; the ratio factor is compute_loss's business
        read=("per_token_kl",),
    )
    if "per_token_kl" in seen:
        return seen["per_token_kl"].reshape(shape)
    return _kl_by_value(logps, ref).reshape(shape)


def _kl_by_value(logps: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Each token's KL term, measured from what `_compute_loss` returns for that token alone.

    Rule: token (i, j) is driven as a one-row micro-batch (row i) whose mask counts token j only,
    on policy (old = current log-probs, so the ratio is 1) with A = 0, so that the policy term is
    0 in value and gradient. Its KL term is then

        kl_ij = (L(beta = 1) - L(beta = 0)) / |dL(A = -1, beta = 0) / dlogp_ij|

    The difference removes every term that does not scale with beta (an entropy bonus, an
    auxiliary loss); the divisor is the weight the loss's aggregation gives that one token: the
    policy term's gradient at A = -1 and ratio 1 is that weight for the clipped surrogate, the
    REINFORCE form and cispo alike, so whatever the subclass's normaliser (per row, per token,
    B * L, the generation batch's tokens, gradient accumulation) it cancels. This is exact (fp32
    rounding only) when the KL enters the loss per token as weight * beta * kl, the form of every
    TRL loss type; kl keeps its gradient with respect to `logps`. How the KL is aggregated over a
    batch is the `loss_adds_beta_times_k3` check's business, on a full batch.

    NotImplementedError (the per_token_kl checks skip with its text) where the loss cannot be
    separated so: a one-token loss that is not finite, carries no policy gradient, or has a gradient
    on tokens its mask leaves out.
    """
    rows = []
    for i in range(logps.size(0)):
        row, row_ref = logps[i : i + 1], ref[i : i + 1]
        values = []
        for j in range(logps.size(1)):
            mask = torch.zeros_like(row, dtype=torch.long)
            mask[0, j] = 1
            weight = _one_token_weight(row, mask, j)
            with_kl, _ = _drive_compute_loss(
                row,
                torch.zeros(1),
                mask,
                ref_per_token_logps=row_ref,
                loss_type="bnpo",
                beta=1.0,
                use_bias_correction_kl=False,
            )
            without, _ = _drive_compute_loss(
                row, torch.zeros(1), mask, ref_per_token_logps=row_ref, loss_type="bnpo", beta=0.0
            )
            if not (torch.isfinite(with_kl) and torch.isfinite(without)):
                raise _not_separable("one token's loss is not finite")
            values.append((with_kl - without) / weight)
        rows.append(torch.stack(values))
    return torch.stack(rows)


def _one_token_weight(row: torch.Tensor, mask: torch.Tensor, j: int) -> float:
    """|dL/dlogp| at the one counted token j, for A = -1 on policy with beta = 0."""
    probe = row.detach().clone().requires_grad_(True)
    loss, _ = _drive_compute_loss(probe, -torch.ones(1), mask, loss_type="bnpo", beta=0.0)
    grad = torch.autograd.grad(loss, probe, allow_unused=True)[0] if loss.requires_grad else None
    if grad is None or not torch.isfinite(grad).all() or grad[0, j].abs() < 1e-12:
        raise _not_separable("one token's loss has no policy gradient")
    if (grad[0].abs() * (1 - mask[0])).max() > 1e-12 * grad[0, j].abs():
        raise _not_separable("the loss has a gradient on tokens its mask leaves out")
    return float(grad[0, j].abs())


def _not_separable(cause: str) -> NotImplementedError:
    """The skip of a subclass's own loss whose KL term cannot be measured by value (the check's
    skip line keeps 80 characters, so the cause comes first)."""
    return NotImplementedError(f"own-loss KL by value: {cause}")


# ---------------------------------------------------------------------------------------------
# generation and reference_model (the optional extension of the protocol)


@contextmanager
def _given_prompts(grpo: GRPOTrainer, prompts: list[list[int]], eos: Sequence[int], pad: int):
    """TRL tokenizes the prompt texts itself; here its tokenization yields the given prompt ids.

    From 0.29.1 through `_tokenize_prompts`; before, through a call of the tokenizer, which gets
    the rows left-padded as TRL asks for them.
    """

    def tokenize_prompts(prompt_texts: list) -> tuple[list, None, dict]:
        return prompts, None, {}

    with (
        _token_ids(grpo, eos, pad),
        _settings(
            grpo,
            processing_class=tokenizer_with_ids(grpo.processing_class, eos[0], pad, prompts),
            _tokenize_prompts=tokenize_prompts,
        ),
    ):
        yield


def _prompt_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    return [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=True)]


@_located(
    getattr(GRPOTrainer, "_generate_single_turn", GRPOTrainer._generate_and_score_completions),
    "unwrapped_model.generate(",
    also_runs=("masking",),
)
def generate_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    num_generations: int,
    max_completion_length: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    temperature: float = CONVENTIONS["temperature"],
) -> torch.Tensor:
    """TRL's transformers generation path with its GenerationConfig, on `model`.

    `_generate_and_score_completions` runs on the prompts, each repeated G times in a row as TRL's
    RepeatSampler lays out a generation batch (reward functions return 0); its `completion_ids`
    are returned, right-padded with `pad_token_id`.
    """
    grpo = trainer()
    repeated = [
        ids for ids in _prompt_rows(prompt_ids, prompt_mask) for _ in range(num_generations)
    ]
    eos = list(eos_token_ids) if trl_shims.EOS_ID_LIST else list(eos_token_ids)[:1]
    config = copy.deepcopy(grpo.generation_config)
    config.temperature = trl_temperature(temperature, grpo.generation_config.temperature)
    config.max_new_tokens = max_completion_length
    config.eos_token_id = eos
    config.pad_token_id = pad_token_id
    with (
        _given_prompts(grpo, repeated, eos, pad_token_id),
        _reward_functions(grpo, torch.zeros(len(repeated), 1), torch.ones(1)),
        _settings(
            grpo,
            model=model,
            model_wrapped=model,
            generation_config=config,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
        ),
    ):
        output = grpo._generate_and_score_completions([{"prompt": PROMPT_TEXT}] * len(repeated))
    trl_driver.clear_logs(grpo)
    return output["completion_ids"]


@_located(
    GRPOTrainer.__init__,
    ("self.ref_model = ", "from_path("),
    ("self.ref_model = ", "from_pretrained("),
)
def make_reference_model(policy: torch.nn.Module) -> torch.nn.Module:
    """The reference model GRPOTrainer.__init__ creates when beta != 0, for `policy` as it is now.

    TRL reloads the reference from the policy's name or path (gt:L1003) at init, when the policy is
    still what was saved there; the policy is therefore saved to a scratch folder and a trainer is
    built on that folder, which reloads its reference exactly as TRL does.
    """
    folder = harness.scratch_dir()
    policy.save_pretrained(folder)
    built, _ = harness.build_trainer(folder, beta=0.04)
    return built.ref_model


# ---------------------------------------------------------------------------------------------
# update: one generation batch through GRPOTrainer.training_step


def _events(grpo: GRPOTrainer, policy: torch.nn.Module, optimizer, stack: ExitStack):
    """A function sending one event to the trainer's callbacks (`CallbackHandler.call_event`,
    as `Trainer.train` does), which see `policy` and `optimizer` for the duration of `stack`."""
    handler = grpo.callback_handler
    stack.enter_context(_settings(handler, model=policy, optimizer=optimizer))
    stack.enter_context(_settings(grpo, control=copy.deepcopy(grpo.control)))

    def send(name: str) -> None:
        grpo.control = getattr(handler, name)(grpo.args, grpo.state, grpo.control)

    return send


@_located(GRPOTrainer.training_step)
def grpo_step(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    rewards: torch.Tensor,
    *,
    num_generations: int,
    eos_token_ids: list[int],
    reference: torch.nn.Module | None = None,
    temperature: float = CONVENTIONS["temperature"],
    num_iterations: int = 1,
    max_grad_norm: float = 1.0,
    callbacks: bool = False,
    **loss_kwargs: Any,
) -> float:
    """`num_iterations` x GRPOTrainer.training_step on one generation batch, as HF's loop runs it.

    training_step -> `_prepare_inputs` (gt:L1522: `_generate_and_score_completions` with the
    given completions and rewards, old log-probs when num_iterations > 1, reference log-probs when
    beta != 0, shuffle, buffer) -> `_compute_loss` -> backward. Between steps the adapter does what
    `Trainer._inner_training_loop` does: clip the gradient norm (accelerator.clip_grad_norm_),
    optimizer.step(), zero the gradients, count the global step. From 1.15 the policy and reference
    get TRL's fused LM head for the duration, as `__init__` installs it. With `callbacks`, the
    trainer's callbacks (a subclass may keep its reference model in step from one) get the
    events `Trainer._inner_training_loop` sends around each step, in its order, with this
    policy and optimizer as their `model` and `optimizer`.
    """
    options = dict(loss_kwargs)
    scale_rewards = options.pop("scale_rewards", CONVENTIONS["scale_rewards"])
    mask_truncated_completions = options.pop(
        "mask_truncated_completions", CONVENTIONS["mask_truncated_completions"]
    )
    if "beta" not in options and CONVENTIONS["beta"] != 0.0 and reference is None:
        # The release's default beta (0.04 before 0.19.1) with the reference __init__ would make:
        # a frozen copy of the policy as it is before the step.
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    options = {**_LOSS_DEFAULTS, **options}
    if options["beta"] != 0.0 and reference is None:
        raise ValueError("beta != 0 needs a reference model (make_reference_model(policy))")
    grpo = trainer()
    num_rows, length = completion_ids.shape
    eos = list(eos_token_ids) if trl_shims.EOS_ID_LIST else list(eos_token_ids)[:1]
    pad_token_id = harness.built_pad_token_id()

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        return torch.cat([input_ids, completion_ids.to(input_ids)], dim=1)

    with ExitStack() as stack:
        stack.enter_context(_fused_head(policy, temperature))
        if reference is not None:
            stack.enter_context(_fused_head(reference, temperature))
        stack.enter_context(_scoring_temperature(temperature))
        stack.enter_context(replaced(policy, "generate", generate))
        stack.enter_context(_loss_settings(length, **options))
        stack.enter_context(
            _given_prompts(grpo, _prompt_rows(prompt_ids, prompt_mask), eos, pad_token_id)
        )
        stack.enter_context(
            _reward_functions(
                grpo, torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, 1), torch.ones(1)
            )
        )
        stack.enter_context(
            _settings(
                grpo,
                model=policy,
                model_wrapped=policy,
                ref_model=reference,
                num_generations=num_generations,
                num_iterations=num_iterations,
                scale_rewards=trl_driver.scale_rewards_setting(scale_rewards, _BOOL_SCALE_REWARDS),
                mask_truncated_completions=mask_truncated_completions,
                current_gradient_accumulation_steps=1,
                _step=0,
            )
        )
        stack.enter_context(
            _settings(
                grpo.args,
                per_device_train_batch_size=num_rows,
                gradient_accumulation_steps=1,
                steps_per_generation=1,
            )
        )
        stack.enter_context(_settings(grpo.state, global_step=0))
        event = _events(grpo, policy, optimizer, stack) if callbacks else (lambda name: None)
        batch = [{"prompt": PROMPT_TEXT}] * num_rows
        event("on_train_begin")
        for _ in range(num_iterations):
            optimizer.zero_grad(set_to_none=True)
            event("on_step_begin")
            loss = grpo.training_step(policy, batch, num_items_in_batch=None)
            grpo.accelerator.clip_grad_norm_(policy.parameters(), max_grad_norm)
            event("on_pre_optimizer_step")
            optimizer.step()
            event("on_optimizer_step")
            grpo.state.global_step += 1
            event("on_step_end")
        event("on_train_end")
    trl_driver.clear_logs(grpo)
    return float(loss)
