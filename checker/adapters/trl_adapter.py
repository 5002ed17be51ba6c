"""grpo-check's `trl` kind: the stage protocol, computed by TRL 1.16's own GRPOTrainer code.

`grpo-check trl` (or a path to a TRL tree, put first on sys.path) imports this module in the child
process and checks it like any functions candidate. Each function below drives the GRPOTrainer
method that computes its stage, on one trainer built once per process (the tiny model, fp32, CPU),
with only that method's inputs supplied by the adapter:

| function | what runs (TRL 1.16.0 `grpo_trainer.py`) | inputs the adapter supplies |
| --- | --- | --- |
| `combine_rewards` | `_generate_and_score_completions`, reward block (gt:L2759-2764) | rewards per function; TRL's combined `rewards` is read from the method's frame |
| `compute_advantages` | `_generate_and_score_completions`, advantage block (gt:L2766-2810) | rewards (one reward function); its returned `advantages` |
| `completion_mask` | `_generate_single_turn` EOS mask (gt:L1880) + truncation mask (gt:L2490) | `model.generate` returns the given ids; the returned `completion_mask`, right-padded to T |
| `get_per_token_logps` | `_get_per_token_logps_and_entropies` (gt:L1419) on the given model patched with `add_fused_lm_head` as `__init__` patches the policy | the model; the patch is removed afterwards |
| `completion_logps`, `selective_log_softmax` | the same method and fused head on a stand-in model whose hidden states are the given logits and whose LM head is the identity | logits |
| `compute_loss` | `_compute_loss` (gt:L3020) | the policy forward returns the given log-probs (graph kept); protocol kwargs set on the trainer and its args |
| `per_token_kl` | `_compute_loss` with beta = 1, A = 0, no bias correction; TRL's `per_token_kl` read from the frame | log-probs, reference log-probs |
| `generate_completions` | `_generate_single_turn` (gt:L1763) with the trainer's GenerationConfig | the model, prompts repeated G times as TRL's sampler does |
| `make_reference_model` | `GRPOTrainer.__init__` with beta != 0 (reloads from `config._name_or_path`, gt:L984-1003) | the policy, saved to a folder first |
| `grpo_step` | `training_step` (gt:L1510) -> `_prepare_inputs` -> `_generate_and_score_completions` -> `_compute_loss` -> backward, `num_iterations` times | the policy, reference and optimizer; completions and rewards as above; clip + optimizer step as HF's loop does them |

Not provided (the checker skips those checks): `strip_reasoning`: TRL has no such function
(reward functions receive the raw decoded text).

Conventions: P = GA = S = 1 and train mode, so TRL's normalisers are the protocol's (gt:L3153-3183).
Each function's `grpo_check_location` is the line of the imported, possibly patched, TRL
source that it drives.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad

from checker.adapters import trl_trainer as harness
from checker.adapters.trl_trainer import (
    PROMPT_TEXT,
    LogitsAsHiddenStates,
    TokenizerWithPad,
    clear_logs,
    reading_locals,
    replaced,
    source_location,
    trainer,
    trl_temperature,
)

_CONFIG_DEFAULTS = {field.name: field.default for field in fields(GRPOConfig)}

# TRL 1.16's defaults for the protocol's keyword arguments, read from GRPOConfig itself.
CONVENTIONS: dict[str, Any] = {
    "loss_type": _CONFIG_DEFAULTS["loss_type"],
    "scale_rewards": _CONFIG_DEFAULTS["scale_rewards"],
    "beta": _CONFIG_DEFAULTS["beta"],
    "epsilon_low": _CONFIG_DEFAULTS["epsilon"],
    "epsilon_high": _CONFIG_DEFAULTS["epsilon_high"],
    "delta": _CONFIG_DEFAULTS["delta"],
    "importance_sampling_level": _CONFIG_DEFAULTS["importance_sampling_level"],
    "use_bias_correction_kl": _CONFIG_DEFAULTS["use_bias_correction_kl"],
    "sapo_temperature_pos": _CONFIG_DEFAULTS["sapo_temperature_pos"],
    "sapo_temperature_neg": _CONFIG_DEFAULTS["sapo_temperature_neg"],
    "mask_truncated_completions": _CONFIG_DEFAULTS["mask_truncated_completions"],
    "temperature": _CONFIG_DEFAULTS["temperature"],
}


def _located(function, marker: str | None = None, also_runs: tuple[str, ...] = ()):
    """Decorator: tag an adapter function with the TRL line it drives.

    `also_runs` (`grpo_check_depends_on`) names other stages whose TRL code the function cannot
    avoid running, so that a bug there may also show here: e.g. TRL's advantage block starts from
    its own reward combination, and its generation output is cut by its completion mask.
    """

    def tag(adapter_function):
        adapter_function.grpo_check_location = source_location(function, marker)
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


# ---------------------------------------------------------------------------------------------
# rewards, advantages, masking: _generate_and_score_completions with given completions and rewards


def _generate_and_score(
    rewards_per_func: torch.Tensor,
    *,
    num_generations: int,
    scale_rewards: str = "group",
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
    eos = list(grpo.eos_token_ids if eos_token_ids is None else eos_token_ids)
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

    def calculate_rewards(inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        return rewards_per_func.clone()

    with (
        _settings(
            grpo,
            num_generations=num_generations,
            scale_rewards=scale_rewards,
            reward_weights=torch.as_tensor(weights, dtype=torch.float32),
            reward_func_names=[f"reward_{k}" for k in range(num_funcs)],
            multi_objective_aggregation="sum_then_normalize",
            eos_token_ids=eos,
            mask_truncated_completions=mask_truncated_completions,
            _tokenizer=TokenizerWithPad(grpo._tokenizer, pad_token_id),
            _calculate_rewards=calculate_rewards,
        ),
        replaced(grpo.model, "generate", generate),
        reading_locals(
            GRPOTrainer._generate_and_score_completions, ("rewards",), when_bound="advantages"
        ) as seen,
    ):
        output = grpo._generate_and_score_completions([{"prompt": PROMPT_TEXT}] * num_rows)
    clear_logs(grpo)
    return output, seen


@_located(GRPOTrainer._generate_and_score_completions, "rewards[unscorable_mask] = torch.nan")
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
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    """TRL's advantages for already combined rewards (one reward function, weight 1)."""
    output, _ = _generate_and_score(
        torch.as_tensor(rewards).reshape(-1, 1),
        num_generations=num_generations,
        scale_rewards=scale_rewards,
    )
    return output["advantages"]


@_located(GRPOTrainer._generate_single_turn, "completion_mask = (sequence_indices")
def completion_mask(
    completion_ids: torch.Tensor,
    eos_token_ids: Sequence[int] | int,
    mask_truncated_completions: bool = False,
) -> torch.Tensor:
    """TRL's loss mask for completions that `generate` returned as `completion_ids` [B, T]."""
    eos = [eos_token_ids] if isinstance(eos_token_ids, int) else [int(i) for i in eos_token_ids]
    if not eos:
        raise ValueError("eos_token_ids is empty: at least one end-of-sequence id is needed")
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
# logprobs: the fused LM head, as __init__ installs it on the policy


def _fused_head_kwargs(temperature: float) -> dict[str, Any]:
    """The arguments `__init__` gave `add_fused_lm_head` for the policy, at `temperature`."""
    kwargs = harness.policy_fused_head_kwargs()
    return {**kwargs, "temperature": trl_temperature(temperature, kwargs.get("temperature"))}


@contextmanager
def _fused_head(model: torch.nn.Module, temperature: float):
    """Patch `model` with TRL's fused LM head for the duration; its own forward comes back after."""
    own_forward = vars(model).get("forward")
    harness.grpo_module.add_fused_lm_head(model, **_fused_head_kwargs(temperature))
    try:
        yield model
    finally:
        if own_forward is None:
            del model.forward
        else:
            model.forward = own_forward


def _score(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float,
) -> torch.Tensor:
    with _fused_head(model, temperature):
        logps, _, _ = trainer()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, compute_entropy=True
        )
    return logps


@_located(GRPOTrainer._get_per_token_logps_and_entropies)
def get_per_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """TRL's per-token log-probs of the last `logits_to_keep` tokens under `model`."""
    return _score(model, input_ids, attention_mask, logits_to_keep, temperature)


@_located(GRPOTrainer._get_per_token_logps_and_entropies)
def completion_logps(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """TRL's scoring of the last T tokens of `input_ids` when the model's logits are `logits`."""
    num_rows, length = input_ids.shape
    num_completion = completion_mask.size(1)
    prompt_mask = torch.ones(num_rows, length - num_completion, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    stand_in = LogitsAsHiddenStates(logits)
    return _score(stand_in, input_ids, attention_mask, num_completion, temperature)


@_located(GRPOTrainer._get_per_token_logps_and_entropies)
def selective_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """TRL's fused-head log-prob of `index` under `logits` [..., V].

     TRL 1.16's GRPOTrainer scores with its fused LM head, not `trl.trainer.utils.selective_log_softmax`
    , so each row is scored as a two-token sequence whose first hidden state is the row.
    """
    vocab = logits.size(-1)
    rows = logits.reshape(-1, vocab)
    hidden = torch.stack([rows, torch.zeros_like(rows)], dim=1)  # position 0 predicts token 1
    targets = index.reshape(-1).long()
    input_ids = torch.stack([torch.zeros_like(targets), targets], dim=1)
    logps = _score(
        LogitsAsHiddenStates(hidden), input_ids, torch.ones_like(input_ids), 1, temperature
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


@contextmanager
def _loss_settings(
    length: int,
    *,
    loss_type: str = "dapo",
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
    use_bias_correction_kl: bool = True,
    max_completion_length: int | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
):
    """The protocol's loss options, set where `_compute_loss` reads them (trainer and args)."""
    grpo = trainer()
    with (
        _settings(
            grpo,
            loss_type=loss_type,
            beta=beta,
            epsilon_low=epsilon_low,
            epsilon_high=_resolved_epsilon_high(epsilon_low, epsilon_high),
            importance_sampling_level=importance_sampling_level,
            max_completion_length=length
            if max_completion_length is None
            else max_completion_length,
        ),
        _settings(
            grpo.args,
            delta=delta,
            use_bias_correction_kl=use_bias_correction_kl,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
        ),
    ):
        yield


def _drive_compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    read: tuple[str, ...] = (),
    **loss_options: Any,
) -> tuple[torch.Tensor, dict]:
    """Run `_compute_loss` with the policy forward returning `per_token_logps` (graph kept)."""
    if loss_options.get("beta", 0.0) != 0.0 and ref_per_token_logps is None:
        raise ValueError("beta != 0 needs ref_per_token_logps from the frozen reference model")
    grpo = trainer()
    num_rows, length = per_token_logps.shape
    mask = completion_mask.long()  # TRL's completion_mask is int64 (gt:L2459)
    if num_items_in_batch is None:
        num_items_in_batch = mask.sum()  # one generation batch = this micro-batch (gt:L2498)
    inputs = {
        "prompt_ids": torch.zeros(num_rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(num_rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(num_rows, length, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": torch.as_tensor(num_items_in_batch),
    }
    if old_per_token_logps is not None:
        inputs["old_per_token_logps"] = old_per_token_logps
    if ref_per_token_logps is not None:
        inputs["ref_per_token_logps"] = ref_per_token_logps

    def policy_forward(model, input_ids, attention_mask, logits_to_keep, **_: Any):
        return per_token_logps, torch.zeros_like(per_token_logps.detach()), None

    with (
        _loss_settings(length, **loss_options),
        replaced(grpo, "_get_per_token_logps_and_entropies", policy_forward),
        reading_locals(GRPOTrainer._compute_loss, read) as seen,
    ):
        loss = grpo._compute_loss(grpo.model, inputs)
    clear_logs(grpo)
    return loss, seen


@_located(GRPOTrainer._compute_loss)
def compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    loss_type: str = "dapo",
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
    use_bias_correction_kl: bool = True,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
) -> torch.Tensor:
    """TRL's `_compute_loss` on one micro-batch; the gradient flows to `per_token_logps`."""
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
    )
    return loss


@_located(GRPOTrainer._compute_loss, "per_token_kl = (")
def per_token_kl(per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor) -> torch.Tensor:
    """TRL's per-token KL term, read from `_compute_loss` run with beta = 1 and A = 0."""
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
    if "per_token_kl" not in seen:
        raise RuntimeError("could not read `per_token_kl` in GRPOTrainer._compute_loss")
    return seen["per_token_kl"].reshape(shape)


# ---------------------------------------------------------------------------------------------
# generation and reference_model (the optional extension of the protocol)


@_located(
    GRPOTrainer._generate_single_turn,
    "prompt_completion_ids = unwrapped_model.generate(",
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
    temperature: float = 1.0,
) -> torch.Tensor:
    """TRL's transformers generation path with its GenerationConfig, on `model`.

    Each prompt is repeated G times in a row, as TRL's RepeatSampler lays out a generation batch;
    TRL cuts every row after its first EOS and the rows are right-padded with `pad_token_id` as in
    `_generate_and_score_completions` (gt:L2452).
    """
    grpo = trainer()
    prompts = [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=True)]
    repeated = [ids for ids in prompts for _ in range(num_generations)]
    config = copy.deepcopy(grpo.generation_config)
    config.temperature = trl_temperature(temperature, grpo.generation_config.temperature)
    config.max_new_tokens = max_completion_length
    config.eos_token_id = list(eos_token_ids)
    config.pad_token_id = pad_token_id
    with _settings(
        grpo,
        model_wrapped=model,
        generation_config=config,
        eos_token_ids=list(eos_token_ids),
        _tokenizer=TokenizerWithPad(grpo._tokenizer, pad_token_id),
    ):
        completions, _ = grpo._generate_single_turn(repeated, None, {}, num_generations)
    rows = [torch.tensor(ids, dtype=torch.long) for ids in completions]
    return pad(rows, padding_value=pad_token_id, padding_side="right")


@_located(GRPOTrainer.__init__, "self.ref_model = create_model_from_path(")
def make_reference_model(policy: torch.nn.Module) -> torch.nn.Module:
    """The reference model GRPOTrainer.__init__ creates when beta != 0, for `policy` as it is now.

    TRL reloads the reference from `config._name_or_path` (gt:L1003) at init, when the policy is
    still what was saved there; the policy is therefore saved to a scratch folder and a trainer is
    built on that folder, which reloads its reference exactly as TRL does.
    """
    folder = harness.scratch_dir()
    policy.save_pretrained(folder)
    built, _ = harness.build_trainer(folder, beta=0.04)
    return built.ref_model


# ---------------------------------------------------------------------------------------------
# update: one generation batch through GRPOTrainer.training_step


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
    temperature: float = 1.0,
    num_iterations: int = 1,
    max_grad_norm: float = 1.0,
    **loss_kwargs: Any,
) -> float:
    """`num_iterations` x GRPOTrainer.training_step on one generation batch, as HF's loop runs it.

    training_step -> `_prepare_inputs` (gt:L1522: `_generate_and_score_completions` with the
    given completions and rewards, old log-probs when num_iterations > 1, reference log-probs when
    beta != 0, shuffle, buffer) -> `_compute_loss` -> backward. Between steps the adapter does what
    `Trainer._inner_training_loop` does: clip the gradient norm (accelerator.clip_grad_norm_),
    optimizer.step(), zero the gradients. The policy and reference get TRL's fused LM head for the
    duration, as `__init__` installs it.
    """
    options = dict(loss_kwargs)
    scale_rewards = options.pop("scale_rewards", "group")
    mask_truncated_completions = options.pop("mask_truncated_completions", False)
    if options.get("beta", 0.0) != 0.0 and reference is None:
        raise ValueError("beta != 0 needs a reference model (make_reference_model(policy))")
    grpo = trainer()
    num_rows, length = completion_ids.shape
    prompts = [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=True)]
    rewards_per_func = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, 1)

    def tokenize_prompts(prompt_texts: list) -> tuple[list, None, dict]:
        return prompts, None, {}

    def generate(input_ids: torch.Tensor, **_: Any) -> torch.Tensor:
        return torch.cat([input_ids, completion_ids.to(input_ids)], dim=1)

    def calculate_rewards(inputs, prompt_texts, completions, completion_ids_list) -> torch.Tensor:
        return rewards_per_func.clone()

    with ExitStack() as stack:
        stack.enter_context(_fused_head(policy, temperature))
        if reference is not None:
            stack.enter_context(_fused_head(reference, temperature))
        stack.enter_context(replaced(policy, "generate", generate))
        stack.enter_context(_loss_settings(length, **options))
        stack.enter_context(
            _settings(
                grpo,
                model=policy,
                model_wrapped=policy,
                ref_model=reference,
                num_generations=num_generations,
                num_iterations=num_iterations,
                scale_rewards=scale_rewards,
                reward_weights=torch.ones(1),
                reward_func_names=["reward"],
                multi_objective_aggregation="sum_then_normalize",
                eos_token_ids=list(eos_token_ids),
                mask_truncated_completions=mask_truncated_completions,
                _step=0,
                _buffered_inputs=None,
                _tokenize_prompts=tokenize_prompts,
                _calculate_rewards=calculate_rewards,
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
        batch = [{"prompt": PROMPT_TEXT}] * num_rows
        for _ in range(num_iterations):
            optimizer.zero_grad(set_to_none=True)
            loss = grpo.training_step(policy, batch, num_items_in_batch=None)
            grpo.accelerator.clip_grad_norm_(policy.parameters(), max_grad_norm)
            optimizer.step()
    clear_logs(grpo)
    return float(loss)
