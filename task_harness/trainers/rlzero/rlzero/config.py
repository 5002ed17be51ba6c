"""Every option of an rlzero run, with its default and why."""

from __future__ import annotations

from dataclasses import dataclass

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
ADVANTAGE_ESTIMATORS = ("group", "batch", "mean_only", "rloo")
KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass
class RunConfig:
    # --- the experiment ---------------------------------------------------------------------
    task: str = "succ"
    """Toy task to learn (rlzero.toy_tasks.TOY_TASKS)."""
    seed: int = 0
    """Seeds prompt order and sampling."""
    steps: int = 200
    """Rollouts at most; a run stops earlier once `target` is reached."""
    target: float = 0.9
    """Stop when the mean reward of the last `target_window` rollouts reaches this."""
    target_window: int = 10
    """Rollouts over which the mean reward is compared with `target`."""

    # --- rollouts -----------------------------------------------------------------------------
    prompts_per_step: int = 8
    """Distinct prompts per rollout."""
    group_size: int = 16
    """Completions sampled per prompt; the group mean is the baseline (GRPO, arXiv:2402.03300)."""
    max_new_tokens: int = 2
    """Tokens sampled per completion at most; also the dr_grpo loss normaliser's length."""
    temperature: float = 1.0
    """Softmax temperature of the sampler, and of the scorer that recomputes its log-probs
    (1: the model's own distribution)."""
    mask_truncated: bool = False
    """Leave completions that never produced EOS out of the loss (DAPO's overlong filtering,
    arXiv:2503.14476); their rewards still count in their group's statistics."""

    # --- rewards and advantages -----------------------------------------------------------------
    reward_weights: tuple[float, ...] | None = None
    """One weight per reward function of the task (None: all 1)."""
    advantage_estimator: str = "group"
    """How rewards become advantages (rlzero.advantages.ESTIMATORS): "group" scales by the group
    std, "batch" by the std of the whole rollout, "mean_only" does not scale (Dr. GRPO,
    arXiv:2503.20783), "rloo" subtracts the mean of the group's other rewards."""
    adv_eps: float = 1e-6
    """The epsilon of the advantages' normalisation (rlzero.advantages)."""

    # --- the objective ----------------------------------------------------------------------------
    loss_type: str = "dr_grpo"
    """How per-token losses become one scalar (rlzero.objective.aggregate): "grpo" averages each
    completion's tokens then the completions, "bnpo" averages the tokens of each micro-batch,
    "dapo" the tokens of the whole optimizer step, "dr_grpo" divides the sum by
    rows * max_new_tokens."""
    clip_low: float = 0.2
    """The ratio may fall to 1 - clip_low before the surrogate stops pushing it down."""
    clip_high: float = 0.28
    """The ratio may rise to 1 + clip_high: DAPO's clip-higher (arXiv:2503.14476), which keeps
    rare good tokens from being capped early; wider than clip_low on purpose."""
    dual_clip: float | None = None
    """Dual-clip PPO's bound c (arXiv:1912.09729, c > 1): for a negative advantage the loss
    per token is at most -c * A however large the ratio grows. None: no second bound."""
    kl_coef: float = 0.0
    """Weight of the KL term against the reference policy (the initial one); 0 builds none."""
    kl_estimator: str = "k3"
    """Estimator of KL(policy || reference) per token (Schulman 2020, rlzero.objective.kl_estimate):
    k1 = log p - log q, k2 = (log p - log q)^2 / 2, k3 = q/p - log(q/p) - 1."""

    # --- the optimizer ----------------------------------------------------------------------------
    lr: float = 3e-3
    """AdamW step size; a randomly initialised tiny model needs a large one."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW's moment decays."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay; 0 keeps the policy free to move far from its init."""
    warmup_steps: int = 0
    """Optimizer steps over which the step size rises linearly from lr / warmup_steps to lr."""
    passes: int = 1
    """Passes over each rollout (PPO epochs; TRL's num_iterations, mu)."""
    minibatches: int = 1
    """Optimizer steps per pass, each on its share of the rollout's rows (contiguous, in order)."""
    grad_accum_steps: int = 1
    """Micro-batches whose gradients add up to one optimizer step (memory, not maths: the loss
    of a step is the same however it is split)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip before each optimizer step."""

    # --- logging and checkpoints ------------------------------------------------------------------
    log_entropy: bool = True
    """Log the sampling policy's mean token entropy (one extra forward pass per rollout)."""
    log_file: str | None = None
    """Also append every step's metrics to this file, one JSON object a line."""
    output_dir: str | None = None
    """Folder for checkpoints (None: none are written)."""
    save_every: int = 0
    """Write a checkpoint every this many rollouts (0: only at the end of a run)."""
    resume_from: str | None = None
    """A checkpoint to resume from: weights, optimizer, prompt order and random state."""

    def __post_init__(self) -> None:
        choices = {
            "loss_type": LOSS_TYPES,
            "advantage_estimator": ADVANTAGE_ESTIMATORS,
            "kl_estimator": KL_ESTIMATORS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        for name in ("group_size", "prompts_per_step", "max_new_tokens", "passes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, not {self.temperature}")
        rows = self.prompts_per_step * self.group_size
        if rows % (self.minibatches * self.grad_accum_steps):
            raise ValueError(
                f"a rollout's {rows} rows do not split into minibatches={self.minibatches} x "
                f"grad_accum_steps={self.grad_accum_steps} equal parts"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must exceed 1, not {self.dual_clip}")
