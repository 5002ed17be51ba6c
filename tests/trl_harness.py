"""Run TRL 1.16's `GRPOTrainer` offline on CPU and capture the tensors of every stage.

Shared by the parity tests and the benchmark; other test modules may import it read-only.
The recipe, measured on TRL 1.16:

- fp32 throughout (`bf16=False, use_cpu=True`): TRL's bf16 default turns on CPU autocast and moves
  log-probs by ~1e-2, far beyond the 1e-5 parity tolerance.
- the model is passed as a saved folder: with `beta != 0` TRL reloads the reference model from
  `config._name_or_path` (gt:L1003), so an in-memory model would get a different reference.
- tensors are captured by subclassing at TRL's own seams, never by replaying its
  sampling: `_calculate_rewards` (gathered rewards per function), `_generate_and_score_completions`
  (the pre-shuffle generation batch), `_get_per_token_logps_and_entropies` (the policy log-probs
  with their graph) and `_compute_loss` (loss, and dL/dlogp by `torch.autograd.grad`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

for _name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ.setdefault(
        _name, "1"
    )  # before trl/transformers are imported: nothing reaches the Hub

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from reference_impl import get_per_token_logps  # noqa: E402

Weights = dict[str, torch.Tensor]


def _snapshot(module: torch.nn.Module) -> Weights:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def _detached(batch: dict) -> dict:
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@dataclass
class GenerationCapture:
    """One generation batch as TRL built it, before the shuffle and split into micro-batches."""

    rewards_per_func: torch.Tensor
    """[N, K] gathered rewards, NaN where a reward function returned None."""
    batch: dict[str, torch.Tensor]
    """`prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, num_items_in_batch`,
    plus `old_per_token_logps` / `ref_per_token_logps` when TRL computed them."""
    weights: Weights
    """Policy weights when the batch was generated (the weights old log-probs were scored with)."""


@dataclass
class MicroStepCapture:
    """One call of `_compute_loss`: a shuffled micro-batch, TRL's loss and its gradient."""

    generation: int
    """Index into `TRLCapture.generations` of the batch this micro-batch came from."""
    inputs: dict[str, torch.Tensor]
    per_token_logps: torch.Tensor
    """TRL's policy log-probs [B, T] (fused LM head), detached."""
    loss: torch.Tensor
    grad: torch.Tensor
    """dL/d per_token_logps, [B, T]."""
    weights: Weights
    """Policy weights this micro-batch was scored with (the optimizer steps after backward)."""


@dataclass
class TRLCapture:
    """Everything one `GRPOTrainer.train()` produced, in order."""

    args: GRPOConfig
    eos_token_ids: list[int]
    generations: list[GenerationCapture] = field(default_factory=list)
    micro_steps: list[MicroStepCapture] = field(default_factory=list)


class CapturingGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that records its tensors into `self.capture` without changing what it computes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.capture = TRLCapture(args=self.args, eos_token_ids=list(self.eos_token_ids))
        self._pending_rewards: torch.Tensor | None = None
        self._live_logps: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._pending_rewards = rewards_per_func.detach().clone()
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        weights = _snapshot(self.accelerator.unwrap_model(self.model))
        batch = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.capture.generations.append(
                GenerationCapture(self._pending_rewards, _detached(batch), weights)
            )
        return batch

    def _get_per_token_logps_and_entropies(self, model, *args, compute_entropy=False, **kwargs):
        result = super()._get_per_token_logps_and_entropies(
            model, *args, compute_entropy=compute_entropy, **kwargs
        )
        if compute_entropy:  # only the policy forward inside _compute_loss asks for entropies
            self._live_logps = result[0]
        return result

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        # retain_graph: the Trainer's own backward still has to run on this graph.
        (grad,) = torch.autograd.grad(loss, self._live_logps, retain_graph=True)
        self.capture.micro_steps.append(
            MicroStepCapture(
                generation=len(self.capture.generations) - 1,
                inputs=_detached(inputs),
                per_token_logps=self._live_logps.detach().clone(),
                loss=loss.detach().clone(),
                grad=grad.detach().clone(),
                weights=_snapshot(self.accelerator.unwrap_model(model)),
            )
        )
        return loss


OFFLINE_FP32_CPU = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "use_vllm": False,
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "disable_tqdm": True,
}
"""GRPOConfig fields every offline CPU run needs (bf16 and gradient checkpointing are on by default)."""


def grpo_config(output_dir: str | Path, **overrides) -> GRPOConfig:
    """A `GRPOConfig` for fp32 CPU runs; `overrides` are any GRPOConfig fields."""
    return GRPOConfig(output_dir=str(output_dir), **{**OFFLINE_FP32_CPU, **overrides})


def make_trainer(
    model_path: str | Path,
    reward_funcs: Sequence[Callable],
    dataset: Dataset,
    output_dir: str | Path,
    trainer_class: type[GRPOTrainer] = CapturingGRPOTrainer,
    **config,
) -> GRPOTrainer:
    """A trainer on the saved model folder, its own tokenizer passed explicitly."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    return trainer_class(
        model=str(model_path),
        reward_funcs=list(reward_funcs),
        args=grpo_config(output_dir, **config),
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def run_trl(
    model_path: str | Path, reward_funcs: Sequence[Callable], dataset: Dataset, **config
) -> TRLCapture:
    """Train with `CapturingGRPOTrainer` for `config["max_steps"]` optimizer steps; its capture."""
    with tempfile.TemporaryDirectory(prefix="trl-run-") as output_dir:
        trainer = make_trainer(model_path, reward_funcs, dataset, output_dir, **config)
        trainer.train()
    return trainer.capture


def protocol_num_items(args: GRPOConfig, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The `num_items_in_batch` that makes the protocol's dapo/cispo loss equal TRL's.

    TRL divides by N / P * GA / S, N = loss tokens of the whole generation batch (gt:L3170-3172);
    the protocol divides by `num_items_in_batch`. The other loss types also divide by GA
    (gt:L3153-3167), which has no protocol argument, so captures must use GA = 1.
    """
    if args.gradient_accumulation_steps != 1:
        raise ValueError("protocol parity needs gradient_accumulation_steps=1 (GA has no argument)")
    return (
        inputs["num_items_in_batch"] * args.gradient_accumulation_steps / args.steps_per_generation
    )


def protocol_loss_kwargs(args: GRPOConfig, inputs: dict[str, torch.Tensor]) -> dict:
    """`compute_loss` keyword arguments equivalent to TRL's config and this micro-batch."""
    return {
        "old_per_token_logps": inputs.get("old_per_token_logps"),
        "ref_per_token_logps": inputs.get("ref_per_token_logps"),
        "loss_type": args.loss_type,
        "beta": args.beta,
        "epsilon_low": args.epsilon,
        "epsilon_high": args.epsilon_high,
        "delta": args.delta,
        "importance_sampling_level": args.importance_sampling_level,
        "use_bias_correction_kl": args.use_bias_correction_kl,
        "max_completion_length": args.max_completion_length,
        "num_items_in_batch": protocol_num_items(args, inputs),
        "sapo_temperature_pos": args.sapo_temperature_pos,
        "sapo_temperature_neg": args.sapo_temperature_neg,
    }


class IndependentScorer:
    """A never-`prepare`d fp32 copy of the model: TRL's forward is patched (fused head) and may
    run under autocast, so independent log-probs need a model of their own."""

    def __init__(self, model_path: str | Path) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()

    @torch.no_grad()
    def logps(
        self,
        weights: Weights,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        temperature: float,
    ) -> torch.Tensor:
        """`reference_impl.get_per_token_logps` with `weights` loaded; [B, T]."""
        self.model.load_state_dict(weights)
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        return get_per_token_logps(
            self.model, input_ids, attention_mask, completion_ids.size(1), temperature
        )
