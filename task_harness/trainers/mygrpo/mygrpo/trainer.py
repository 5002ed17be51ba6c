"""Our GRPOTrainer: TRL's sampling, scoring and training loop, with our own reward combination,
advantages and loss (NOTES.md says why)."""

import torch
from trl import GRPOTrainer


class TeamGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with the lab's reward gating, advantages and loss."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._rewards_per_func = rewards_per_func
        return rewards_per_func

    def combine_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """One reward per completion from the columns of our reward functions: the first is the
        answer reward; the others are style rewards, which count only where the answer is right
        when `style_gate` is set. A function that could not score a row (NaN) adds nothing."""
        weights = self.reward_weights.to(rewards_per_func.device)
        scores = torch.nan_to_num(rewards_per_func, nan=0.0) * weights
        answer, style = scores[:, 0], scores[:, 1:].sum(dim=1)
        if getattr(self.args, "style_gate", True):
            style = style * (answer > 0)
        return answer + style

    def group_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """Each completion's reward minus the mean reward of its group (the completions of its
        prompt), not divided by the group's spread (Dr. GRPO)."""
        grouped = rewards.view(-1, self.num_generations)
        centred = grouped - grouped.mean(dim=1, keepdim=True)
        return centred.flatten()

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards = self.combine_rewards(self._rewards_per_func)
        advantages = self.group_advantages(rewards)
        output["advantages"] = advantages
        return output

    def _compute_loss(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        mask = inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], mask], dim=1)
        logps = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1)
        )[0]
        old_logps = inputs.get("old_per_token_logps")
        if old_logps is None:
            old_logps = logps.detach()
        ratio = torch.exp(logps - old_logps)
        advantages = inputs["advantages"].unsqueeze(1)
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        per_token_loss = -torch.min(ratio * advantages, clipped * advantages)
        if self.beta != 0.0:
            log_ratio_ref = inputs["ref_per_token_logps"] - logps
            kl = torch.exp(log_ratio_ref) - log_ratio_ref - 1
            per_token_loss = per_token_loss + self.beta * kl
            self._log_masked_mean("kl", kl, mask)
        self._log_masked_mean("clip_ratio", (ratio - clipped).abs().gt(0).float(), mask)
        total = (per_token_loss * mask).sum() / (mask.size(0) * self.max_completion_length)
        return total / self.current_gradient_accumulation_steps

    def _log_masked_mean(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        mean = (values.detach() * mask).sum() / mask.sum().clamp(min=1.0)
        self._metrics["train" if self.model.training else "eval"][name].append(mean.item())
