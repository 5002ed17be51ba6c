"""Every option of an rlzero run, with its default and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunConfig:
    task: str = "succ"
    """Toy task to learn (rlzero.toy_tasks.TOY_TASKS)."""
    seed: int = 0
    """Seeds prompt order and sampling."""
    steps: int = 200
    """Rollouts at most; a run stops earlier once `target` is reached."""
    target: float = 0.9
    """Stop when the mean reward of the last 10 rollouts reaches this."""
    prompts_per_step: int = 8
    """Distinct prompts per rollout."""
    group_size: int = 16
    """Completions sampled per prompt; the group mean is the baseline (GRPO, arXiv:2402.03300)."""
    max_new_tokens: int = 2
    """Tokens sampled per completion at most; also the loss normaliser's length (see objective)."""
    temperature: float = 1.0
    """Softmax temperature (1: the model's own distribution)."""
    lr: float = 3e-3
    """AdamW step size; a randomly initialised tiny model needs a large one."""
    clip_low: float = 0.2
    """The ratio may fall to 1 - clip_low before the surrogate stops pushing it down."""
    clip_high: float = 0.28
    """The ratio may rise to 1 + clip_high: DAPO's clip-higher (arXiv:2503.14476), which keeps
    rare good tokens from being capped early; wider than clip_low on purpose."""
    kl_coef: float = 0.0
    """Weight of the k3 KL term against the reference policy (the initial one); 0 builds none."""
    adv_eps: float = 1e-6
    """The epsilon of the advantages' normalisation (rlzero.advantages)."""
    passes: int = 1
    """Optimizer steps on each rollout (PPO epochs, mu)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip before each optimizer step."""
    reward_weights: tuple[float, ...] | None = None
    """One weight per reward function of the task (None: all 1)."""
