"""Every option of an rlzero run, with its default and why."""

from __future__ import annotations

from dataclasses import dataclass

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
ADVANTAGE_ESTIMATORS = ("group", "batch", "mean_only", "rloo")
KL_ESTIMATORS = ("k1", "k2", "k3")
LR_SCHEDULES = ("constant", "linear", "cosine")
IMPORTANCE_LEVELS = ("token", "sequence")


@dataclass
class RunConfig:
    # --- the experiment ---------------------------------------------------------------------
    task: str = "succ"
    """Toy task to learn (rlzero.toy_tasks.TOY_TASKS)."""
    prompt_template: str | None = None
    """How a dataset row becomes the text the model is prompted with, `{prompt}` standing for
    the row's prompt ("Q: {prompt}" say); None: the prompt as it is. Reward functions see the
    row's own prompt."""
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
    max_prompt_tokens: int | None = None
    """Keep at most this many of a prompt's last tokens (TRL's max_prompt_length cuts from the
    left too: the end of a prompt is what the completion follows). None: whole prompts."""
    mask_truncated: bool = False
    """Leave completions that never produced EOS out of the loss (DAPO's overlong filtering,
    arXiv:2503.14476); their rewards still count in their group's statistics."""

    # --- rewards and advantages -----------------------------------------------------------------
    reward_weights: tuple[float, ...] | None = None
    """One weight per reward function of the task (None: all 1)."""
    overlong_buffer: int = 0
    """DAPO's soft overlong punishment (rlzero.shaping): the last this many tokens of the budget
    cost reward linearly, up to `overlong_weight` at the budget. 0: no shaping."""
    overlong_weight: float = 1.0
    """The largest overlong penalty, in reward units."""
    skip_zero_std_groups: bool = False
    """Leave out of the loss the groups whose rewards are all equal: their advantages are 0, so
    they add no gradient but do count in a token-mean normaliser (DAPO's dynamic sampling
    filters them, arXiv:2503.14476)."""
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
    importance_level: str = "token"
    """"token": one importance ratio per token (PPO, GRPO); "sequence": one per completion, the
    geometric mean of its tokens' (GSPO, arXiv:2507.18071), clipped as a whole."""
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
    ref_sync_every: int = 0
    """Pull the reference towards the policy every this many rollouts (rlzero.reference; TRL's
    ref_model_sync_steps). 0: the reference stays the initial policy."""
    ref_sync_alpha: float = 0.6
    """How far each sync moves the reference: ref <- alpha * policy + (1 - alpha) * ref (TRL's
    ref_model_mixup_alpha)."""
    kl_estimator: str = "k3"
    """Estimator of the KL to the reference per token: "k1", "k2" or "k3" (Schulman 2020,
    "Approximating KL divergence"; rlzero.objective.kl_estimate computes them)."""

    # --- the optimizer ----------------------------------------------------------------------------
    lr: float = 3e-3
    """AdamW step size; a randomly initialised tiny model needs a large one."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW's moment decays."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay; 0 keeps the policy free to move far from its init."""
    warmup_steps: int = 0
    """Optimizer steps over which the step size rises linearly from lr / warmup_steps to lr."""
    lr_schedule: str = "constant"
    """The step size after warm-up (rlzero.learner.step_size_factor): "constant", or "linear" /
    "cosine" decay to 0 at the run's last optimizer step (steps * passes * minibatches)."""
    passes: int = 1
    """Passes over each rollout (PPO epochs; TRL's num_iterations, mu)."""
    minibatches: int = 1
    """Optimizer steps per pass, each on its share of the rollout's rows (contiguous, in order)."""
    grad_accum_steps: int = 1
    """Micro-batches each optimizer step's rows are split into, to bound the memory a forward
    pass takes."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip before each optimizer step."""

    # --- logging and checkpoints ------------------------------------------------------------------
    eval_every: int = 0
    """Score the policy's greedy answers to the first `eval_prompts` dataset rows every this many
    rollouts, logged as `eval_reward` (rlzero.evaluation). 0: never."""
    eval_prompts: int = 64
    """Rows an evaluation answers: the first ones of the evaluation set Learner.train is given,
    else of the training set (all of them if the set is smaller)."""
    eval_batch_size: int = 32
    """Prompts an evaluation decodes at once."""
    log_entropy: bool = True
    """Log the sampling policy's mean token entropy (one extra forward pass per rollout)."""
    log_timing: bool = False
    """Log each rollout's wall-clock seconds (sampling and scoring, then learning) and the sampled
    tokens per second. Off by default: a log with it differs between runs of the same seed."""
    log_file: str | None = None
    """Also append every step's metrics to this file, one JSON object a line."""
    output_dir: str | None = None
    """Folder for checkpoints (None: none are written)."""
    save_every: int = 0
    """Write a checkpoint every this many rollouts (0: only at the end of a run)."""
    keep_checkpoints: int = 2
    """Checkpoints kept in `output_dir`, the latest ones; older ones are deleted (0: keep all)."""
    export_dir: str | None = None
    """Where the trained policy and its tokenizer are saved at the end of a run, in Hugging Face's
    format (`save_pretrained`), to be loaded without rlzero. None: not exported."""
    resume_from: str | None = None
    """A checkpoint (or a folder: its latest) to resume from: weights, optimizer, prompt order
    and random state."""

    def optimizer_steps(self) -> int:
        """Optimizer steps of a run that uses all its rollouts."""
        return self.steps * self.passes * self.minibatches

    def __post_init__(self) -> None:
        choices = {
            "loss_type": LOSS_TYPES,
            "advantage_estimator": ADVANTAGE_ESTIMATORS,
            "kl_estimator": KL_ESTIMATORS,
            "lr_schedule": LR_SCHEDULES,
            "importance_level": IMPORTANCE_LEVELS,
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
        if not 0.0 < self.ref_sync_alpha <= 1.0:
            raise ValueError(f"ref_sync_alpha must be in (0, 1], not {self.ref_sync_alpha}")
        if self.overlong_buffer > self.max_new_tokens:
            raise ValueError(
                f"overlong_buffer ({self.overlong_buffer}) exceeds max_new_tokens "
                f"({self.max_new_tokens})"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must exceed 1, not {self.dual_clip}")
