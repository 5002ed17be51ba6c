"""GRPOTrainer subclasses as users write them, for `grpo-check FILE.py:CLASS` (tests/test_trainer_subclass.py).

Written against the public shape of GRPOTrainer in TRL 0.17 to 1.16; each docstring says whether
the class is correct and, if not, where its bug is.
"""

import inspect
import sys
import textwrap

import torch
from trl import GRPOTrainer


class LoggingGRPOTrainer(GRPOTrainer):
    """Correct: logs the loss per completion token and the number of logged steps; the loss and
    everything else are upstream's."""

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        tokens = inputs["completion_mask"].sum().clamp(min=1)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["loss_per_token"].append((loss.detach() / tokens).item())
        return loss

    def log(self, logs, start_time=None):
        self.logged_steps = getattr(self, "logged_steps", 0) + 1
        return super().log(logs, start_time)


class RowSumGRPOTrainer(GRPOTrainer):
    """Buggy: meant to make the step size independent of the batch size, it multiplies the loss by
    the number of completions, so the loss is a sum over rows instead of TRL's normaliser."""

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        num_completions = inputs["completion_mask"].size(0)
        return loss * num_completions  # the bug: TRL's loss is already normalised


class PopulationStdGRPOTrainer(GRPOTrainer):
    """Correct, with a declared convention (`std_estimator: population`): advantages divided by
    the population std of the group (numpy's np.std) instead of torch's Bessel-corrected std.

    Needs `_calculate_rewards` (TRL 1.0 and later): the combined rewards are kept from there.
    """

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscorable: left out
        self._combined_rewards = rewards
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards = self._combined_rewards
        grouped = rewards.view(-1, self.num_generations)
        centred = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
        if self.scale_rewards != "none":
            scope = grouped if self.scale_rewards == "group" else rewards.view(1, -1)
            mean = torch.nanmean(scope, dim=1, keepdim=True)
            std = torch.nanmean((scope - mean) ** 2, dim=1, keepdim=True).sqrt()
            centred = centred / (std + 1e-4)
        output["advantages"] = torch.nan_to_num(centred.reshape(-1), nan=0.0)
        return output


class NeedsRewardModel(GRPOTrainer):
    """Cannot be built by grpo-check: its __init__ requires an argument GRPOTrainer does not take."""

    def __init__(self, model, reward_model, **kwargs):
        super().__init__(model=model, reward_funcs=[reward_model], **kwargs)


class NotATrainer:
    """Not a GRPOTrainer at all."""


# A user's config as a dict of GRPOConfig fields: the conventions (loss_type, beta) are checked;
# device, precision and batch sizes are grpo-check's own.
CONFIG = {
    "loss_type": "grpo",
    "beta": 0.04,
    "bf16": True,
    "per_device_train_batch_size": 16,
    "num_generations": 8,
}


def strip_think(text, open_tag="<think>", close_tag="</think>"):
    """The answer after the reasoning block; "" while the reasoning is unclosed; else the text."""
    if close_tag in text:
        return text.split(close_tag, 1)[1].strip()
    return "" if open_tag in text else text


class ThinkStripGRPOTrainer(GRPOTrainer):
    """Correct: the reward functions score the answer after `</think>` (a text helper applied to
    each decoded completion before upstream's reward computation)."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        completions = [strip_think(text) for text in completions]
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)


class AnswerOnlyGRPOTrainer(GRPOTrainer):
    """Buggy: its reasoning strip blanks every completion without `</think>`, plain answers too."""

    def answers(self, texts):
        return [
            text.split("</think>", 1)[1].strip() if "</think>" in text else "" for text in texts
        ]

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        completions = self.answers(completions)
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)


class SymmetricClipGRPOTrainer(GRPOTrainer):
    """Correct by the team's convention (`clipping: symmetric`): one epsilon both sides of the
    clip, whatever epsilon_high says."""

    def _compute_loss(self, model, inputs):
        self.epsilon_high = self.epsilon_low
        return super()._compute_loss(model, inputs)


def _renamed(method, old: str, new: str):
    """`method` recompiled from its own source with the local `old` named `new` (TRL's globals)."""
    source = textwrap.dedent(inspect.getsource(method)).replace(old, new)
    namespace: dict = {}
    exec(compile(source, __file__, "exec"), vars(sys.modules[method.__module__]), namespace)
    return namespace[method.__name__]


if hasattr(GRPOTrainer, "_compute_loss"):  # TRL 1.x (0.17's loss is `compute_loss`)

    class RenamedKLGRPOTrainer(GRPOTrainer):
        """Correct: TRL's own `_compute_loss`, its KL term held in a local named `kl_term`, as a
        team that rewrote the loss in its own words would name it; nothing reads TRL's name."""

        _compute_loss = _renamed(GRPOTrainer._compute_loss, "per_token_kl", "kl_term")


class TokenMeanGRPOTrainer(GRPOTrainer):
    """Correct: the team's own `_compute_loss` in its own words (TRL 1.x): the clipped surrogate plus
    beta times k3 of KL(pi || pi_ref) (by the ratio under `use_bias_correction_kl`), averaged over
    every completion token of the micro-batch and divided by the accumulation steps as TRL does
    from 0.23 (TRL's bnpo, whatever `loss_type` says); its KL term is `kl`, and it calls no upstream
    loss code."""

    def _compute_loss(self, model, inputs):
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], mask], dim=1)
        scored = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1)
        )
        logps = scored[0]
        old = inputs.get("old_per_token_logps")
        ratio = torch.exp(logps - (logps.detach() if old is None else old))
        advantages = inputs["advantages"].unsqueeze(1)
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        token_loss = -torch.min(ratio * advantages, clipped * advantages)
        if self.beta != 0.0:
            log_ref_ratio = inputs["ref_per_token_logps"] - logps
            kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
            if self.args.use_bias_correction_kl:
                kl = kl * ratio
            token_loss = token_loss + self.beta * kl
        accumulation = self.current_gradient_accumulation_steps if self.model.training else 1
        return (token_loss * mask).sum() / mask.sum().clamp(min=1) / accumulation


class ReversedKLGRPOTrainer(GRPOTrainer):
    """Buggy: TokenMeanGRPOTrainer's loss with k3 reversed: its log-ratio is logp - ref where k3 of
    KL(pi || pi_ref) takes ref - logp, so it penalises KL(pi_ref || pi)'s estimator instead."""

    def _compute_loss(self, model, inputs):
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], mask], dim=1)
        scored = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1)
        )
        logps = scored[0]
        old = inputs.get("old_per_token_logps")
        ratio = torch.exp(logps - (logps.detach() if old is None else old))
        advantages = inputs["advantages"].unsqueeze(1)
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        token_loss = -torch.min(ratio * advantages, clipped * advantages)
        if self.beta != 0.0:
            log_ref_ratio = logps - inputs["ref_per_token_logps"]  # the bug: reversed
            kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
            if self.args.use_bias_correction_kl:
                kl = kl * ratio
            token_loss = token_loss + self.beta * kl
        accumulation = self.current_gradient_accumulation_steps if self.model.training else 1
        return (token_loss * mask).sum() / mask.sum().clamp(min=1) / accumulation


class UnmaskedMeanGRPOTrainer(TokenMeanGRPOTrainer):
    """Buggy: TokenMeanGRPOTrainer's loss averaged over every position, padding included."""

    def _compute_loss(self, model, inputs):
        every_position = torch.ones_like(inputs["completion_mask"])
        return super()._compute_loss(model, {**inputs, "completion_mask": every_position})
