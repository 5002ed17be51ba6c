"""Every number in the grpo skill, checked against the installed TRL and `reference_impl`.

How to maintain this file when the skill changes:
- a new `gt:L<n>` citation needs a row in CITED_LINES (what that source line must contain);
- a new number in prose needs a row in CLAIMS: the exact text as it appears in the skill and a
  function that computes the truth (from `trl.GRPOConfig`, the TRL source, TRL's own
  `_compute_loss`, or `reference_impl`);
- the hyperparameter table of SKILL.md is parsed and compared with `GRPOConfig` row by row.
A claim whose text is no longer in the skill fails too, so the table cannot silently go stale.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import trl
from trl import GRPOConfig, GRPOTrainer

import reference_impl.advantages as advantages_module
from reference_impl import compute_advantages, compute_loss, per_token_kl
from reference_impl.protocol import STAGES

SKILL = Path(__file__).resolve().parents[1] / "skills" / "grpo"
FILES = {
    "SKILL.md": SKILL / "SKILL.md",
    "algorithm": SKILL / "references" / "grpo-algorithm.md",
    "internals": SKILL / "references" / "grpo-trainer-internals.md",
    "playbook": SKILL / "references" / "debugging-playbook.md",
    "grpo-check": SKILL / "references" / "grpo-check.md",
}
TEXT = {key: path.read_text(encoding="utf-8") for key, path in FILES.items()}
TRAINER_SOURCE = Path(inspect.getsourcefile(GRPOTrainer)).read_text(encoding="utf-8").splitlines()
CONFIG_SOURCE = Path(inspect.getsourcefile(GRPOConfig)).read_text(encoding="utf-8")
DEFAULTS = {field.name: field.default for field in dataclasses.fields(GRPOConfig)}


def test_installed_trl_is_the_version_the_skill_describes():
    assert trl.__version__.startswith("1.16.")


# ---------------------------------------------------------------------------------------------
# The checker's links: one `## <stage>` heading per stage of the checker contract.


def test_playbook_has_one_section_per_checker_stage():
    headings = re.findall(r"^## (\S+)\s*$", TEXT["playbook"], flags=re.MULTILINE)
    for stage in STAGES:
        assert headings.count(stage) == 1, f"debugging-playbook.md needs exactly one '## {stage}'"


def test_skill_md_names_every_stage_in_the_loop_table():
    for stage in STAGES:
        assert f"| `{stage}` |" in TEXT["SKILL.md"]


# ---------------------------------------------------------------------------------------------
# gt:L<n> citations: each cited line of grpo_trainer.py 1.16.0 holds what the skill says.

CITED_LINES = {
    302: "def __init__(",
    401: "pad_token = self._tokenizer.eos_token",
    416: "self.eos_token_ids = eos_token_ids",
    984: "if self.beta == 0.0:",
    760: "# `add_response_schema` sets the response template",
    1003: "create_model_from_path(get_config_model_id(self.model.config)",
    1068: "add_fused_lm_head(",
    1419: "def _get_per_token_logps_and_entropies(",
    1510: "def training_step(",
    1522: "def _prepare_inputs(",
    1538: "generate_every = self.args.steps_per_generation * self.num_iterations",
    1543: "shuffle_sequence_dict(generation_batch)",
    1579: "def _calculate_rewards(",
    1880: "Mask everything after the first EOS token",
    1887: "c[m].tolist() for c, m in zip(completion_ids.cpu(), completion_mask.bool().cpu(), strict=True)",
    2229: 'if is_conversational({"prompt": prompts[0]}):',
    2247: "batch_decode(completion_ids, skip_special_tokens=True)",
    2324: "def _generate_and_score_completions(",
    2492: "completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()",
    2498: "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()",
    2642: "generate_every = self.args.steps_per_generation * self.num_iterations",
    2763: "rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)",
    2787: "advantages = advantages / (std_rewards + 1e-4)",
    2810: "advantages = torch.nan_to_num(advantages, nan=0.0)",
    2939: "def compute_loss(",
    3020: "def _compute_loss(",
    3095: "coef_1 = torch.exp(log_importance_weights)",
    3100: "per_token_kl = (",
    3113: "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)",
    3116: "coef_1 = torch.clamp(coef_1, max=self.args.delta)",
    3153: 'if self.loss_type in ["grpo", "sapo"]:',
    3154: "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
    3170: 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes',
}


def test_every_cited_line_is_in_the_table():
    cited = {int(n) for text in TEXT.values() for n in re.findall(r"gt:L(\d+)", text)}
    assert cited <= set(CITED_LINES), f"add to CITED_LINES: {sorted(cited - set(CITED_LINES))}"


@pytest.mark.parametrize("line", sorted(CITED_LINES))
def test_cited_line_holds_the_code(line):
    assert CITED_LINES[line] in TRAINER_SOURCE[line - 1]


# ---------------------------------------------------------------------------------------------
# TRL's own `_compute_loss`, run on a stub trainer: the loss numbers are TRL's, not ours.


def trl_loss(
    loss_type: str,
    logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    old: torch.Tensor | None = None,
    num_items: float | None = None,
    max_completion_length: int = 3,
    grad_accum: int = 1,
    steps_per_generation: int = 1,
    epsilon: float = 0.2,
    beta: float = 0.0,
    ref: torch.Tensor | None = None,
    use_bias_correction_kl: bool = True,
    delta: float | None = None,
) -> torch.Tensor:
    """TRL 1.16 `GRPOTrainer._compute_loss` on given log-probs (one process; beta 0 unless given)."""
    accelerator = SimpleNamespace(
        num_processes=1,
        gather=lambda x: x,
        reduce=lambda x, reduction="sum": x,
        sync_gradients=True,
    )
    args = SimpleNamespace(
        delta=delta,
        use_bias_correction_kl=use_bias_correction_kl,
        steps_per_generation=steps_per_generation,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
    )
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=accelerator,
        args=args,
        loss_type=loss_type,
        beta=beta,
        epsilon_low=epsilon,
        epsilon_high=epsilon,
        importance_sampling_level="token",
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        max_completion_length=max_completion_length,
        current_gradient_accumulation_steps=grad_accum,
        _metrics={"train": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
    )
    rows, length = logps.shape
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, length, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(float(mask.sum() if num_items is None else num_items)),
    }
    if old is not None:
        inputs["old_per_token_logps"] = old
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return GRPOTrainer._compute_loss(stub, None, inputs)


# On policy the per-token loss is -A, so advantages [-1, -2] give per-token losses [[1, 1, x], [2, x, x]].
FIXTURE_MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])
FIXTURE_ADVANTAGES = torch.tensor([-1.0, -2.0])


def fixture_loss(loss_type: str, implementation: str = "trl") -> float:
    logps = torch.full((2, 3), -0.5, requires_grad=True)
    if implementation == "trl":
        return trl_loss(loss_type, logps, FIXTURE_ADVANTAGES, FIXTURE_MASK).item()
    return compute_loss(
        logps, FIXTURE_ADVANTAGES, FIXTURE_MASK, loss_type=loss_type, max_completion_length=3
    ).item()


def clipped_token() -> tuple[float, float]:
    """Loss and d loss / d logp for A = 1, ratio 1.5, epsilon 0.2, one token."""
    logps = torch.tensor([[math.log(1.5)]], requires_grad=True)
    loss = trl_loss(
        "bnpo",
        logps,
        torch.tensor([1.0]),
        torch.ones(1, 1, dtype=torch.long),
        old=torch.zeros(1, 1),
    )
    (grad,) = torch.autograd.grad(loss, logps)
    return loss.item(), grad.item()


def dapo_window_normaliser() -> float:
    """What TRL divides a dapo loss sum by with GA = 2 and steps_per_generation = 4."""
    logps = torch.zeros(2, 3, requires_grad=True)
    loss = trl_loss(
        "dapo",
        logps,
        torch.tensor([-1.0, -1.0]),
        torch.ones(2, 3, dtype=torch.long),
        num_items=12,
        grad_accum=2,
        steps_per_generation=4,
    )
    return 6.0 / loss.item()  # per-token loss 1 on 6 tokens


def onpolicy_dapo_gradient() -> torch.Tensor:
    logps = torch.full((2, 3), -0.7, requires_grad=True)
    advantages = torch.tensor([0.5, -1.5])
    loss = trl_loss("dapo", logps, advantages, FIXTURE_MASK)
    (grad,) = torch.autograd.grad(loss, logps)
    return grad


def bias_correction_gradient_gap() -> float:
    """On policy, bias-corrected KL minus plain KL gradient, divided by the k3 value (should be beta/N)."""
    logps = torch.tensor([[-1.0]], requires_grad=True)
    ref = torch.tensor([[-2.0]])
    grads = []
    for correction in (True, False):
        loss = compute_loss(
            logps,
            torch.zeros(1),
            torch.ones(1, 1),
            ref_per_token_logps=ref,
            beta=1.0,
            use_bias_correction_kl=correction,
        )
        grads.append(torch.autograd.grad(loss, logps)[0].item())
    return (grads[0] - grads[1]) / per_token_kl(logps.detach(), ref).item()


def advantages_with_epsilon(epsilon: float) -> torch.Tensor:
    saved = advantages_module.ADVANTAGE_EPSILON
    advantages_module.ADVANTAGE_EPSILON = epsilon
    try:
        return compute_advantages(torch.tensor([0.0, 1.0]), 2)
    finally:
        advantages_module.ADVANTAGE_EPSILON = saved


def k3_expectation_matches_kl() -> bool:
    """E over samples from pi of k3(pi, ref) equals KL(pi || ref), by exact enumeration."""
    pi = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    expected_k3 = (pi * per_token_kl(pi.log(), ref.log())).sum()
    kl = (pi * (pi.log() - ref.log())).sum()
    return torch.isclose(expected_k3, kl, atol=1e-12).item()


def k3_mirror_is_not_kl() -> bool:
    """The mirrored k3, exp(logp - ref) - (logp - ref) - 1, averaged over samples from pi, is
    neither KL(pi || ref) nor KL(ref || pi)."""
    pi = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    mirrored = (pi * per_token_kl(ref.log(), pi.log())).sum()
    forward = (pi * (pi.log() - ref.log())).sum()
    backward = (ref * (ref.log() - pi.log())).sum()
    return not torch.isclose(mirrored, forward) and not torch.isclose(mirrored, backward)


def delta_is_a_dual_clip() -> bool:
    """TRL's loss with delta = c equals dual-clip PPO's (arXiv:1912.09729, eq. 3 as verl's
    `compute_policy_loss_vanilla` writes it) for either sign of A, and an A = -1 token at ratio
    10 loses c, not 1 + c."""
    c, epsilon = 3.0, 0.2
    for advantage in (-1.0, 1.0):
        for ratio in (0.5, 1.1, 2.5, 10.0):
            logps = torch.tensor([[math.log(ratio)]])
            trl = trl_loss(
                "bnpo",
                logps,
                torch.tensor([advantage]),
                torch.ones(1, 1, dtype=torch.long),
                old=torch.zeros(1, 1),
                epsilon=epsilon,
                delta=c,
            ).item()
            clipped = max(
                -ratio * advantage, -min(max(ratio, 1 - epsilon), 1 + epsilon) * advantage
            )
            dual = min(-c * advantage, clipped) if advantage < 0 else clipped
            if not close(trl, dual, 1e-5):
                return False
            if advantage < 0 and ratio == 10.0 and not close(trl, c, 1e-5):
                return False
    return True


def k1_expected_gradient_is_zero() -> bool:
    """The gradient of k1 = logp - ref, summed over an exact 5-token softmax weighted by pi, is
    0 (E_pi[grad log pi] = 0), while k3's is not."""
    logits = torch.tensor([0.3, -1.2, 2.0, 0.1, -0.4], dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.tensor([1.0, 0.0, -1.0, 0.5, 0.2], dtype=torch.float64), -1)
    logp = torch.log_softmax(logits, -1)
    weights = logp.exp().detach()
    (k1_grad,) = torch.autograd.grad((weights * (logp - ref)).sum(), logits, retain_graph=True)
    (k3_grad,) = torch.autograd.grad((weights * per_token_kl(logp, ref)).sum(), logits)
    return k1_grad.abs().max().item() < 1e-12 and k3_grad.abs().max().item() > 1e-3


def grpo_mean_counts_empty_rows() -> bool:
    """TRL's `grpo` loss of three rows, the last with no counted token (as
    mask_truncated_completions leaves it), is the sum of the two kept rows' means over 3 rows."""
    logps = torch.zeros(3, 2)
    advantages = torch.tensor([1.0, -0.5, 2.0])
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    loss = trl_loss("grpo", logps, advantages, mask, max_completion_length=2).item()
    return close(loss, -(1.0 - 0.5) / 3, 1e-6) and not close(loss, -(1.0 - 0.5) / 2, 1e-3)


def advantage_bound_holds() -> bool:
    generator = torch.Generator().manual_seed(0)
    for group in range(2, 9):
        extreme = torch.zeros(group)
        extreme[0] = 1.0
        bound = (group - 1) / math.sqrt(group)
        if not math.isclose(
            compute_advantages(extreme, group).abs().max().item(), bound, rel_tol=1e-3
        ):
            return False
        for _ in range(20):
            rewards = torch.rand(group * 3, generator=generator)
            if compute_advantages(rewards, group).abs().max() > bound + 1e-6:
                return False
    return True


def bf16_logprob_shift() -> float:
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    model, _ = load_tiny()
    model.eval()
    ids = torch.randint(
        0, model.config.vocab_size, (16, 24), generator=torch.Generator().manual_seed(0)
    )
    mask = torch.ones_like(ids)
    with torch.no_grad():
        fp32 = get_per_token_logps(model, ids, mask, 12)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = get_per_token_logps(model, ids, mask, 12)
    return (fp32 - bf16).abs().max().item()


def config_rejects(**kwargs) -> bool:
    try:
        GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kwargs)
    except ValueError:
        return True
    return False


def advantages_with_epsilon_group(epsilon: float) -> float:
    """max abs advantage of a near-constant group [1.0, 1.00001] x 4 with a given epsilon."""
    saved = advantages_module.ADVANTAGE_EPSILON
    advantages_module.ADVANTAGE_EPSILON = epsilon
    try:
        rewards = torch.tensor([1.0, 1.00001] * 4)
        return compute_advantages(rewards, 8).abs().max().item()
    finally:
        advantages_module.ADVANTAGE_EPSILON = saved


def constant_group_advantage(reward: float, epsilon: float) -> float:
    """max abs advantage of a constant group of 8 fp32 rewards, with a given epsilon."""
    saved = advantages_module.ADVANTAGE_EPSILON
    advantages_module.ADVANTAGE_EPSILON = epsilon
    try:
        return compute_advantages(torch.full((8,), reward), 8).abs().max().item()
    finally:
        advantages_module.ADVANTAGE_EPSILON = saved


@dataclass(frozen=True)
class Claim:
    file: str
    text: str  # exactly as it appears in the skill
    holds: Callable[[], bool]


def holds(claim: Claim) -> bool:
    """Run the claim's check; a check that takes an argument gets the claim's text, from which
    it reads the numbers it recomputes (so the test copies no value from the text under test)."""
    if inspect.signature(claim.holds).parameters:
        return claim.holds(claim.text)
    return claim.holds()


def close(value: float, target: float, tol: float = 1e-4) -> bool:
    return abs(value - target) <= tol


def _literal_gspo_ratio_leaves_float32() -> bool:
    """exp's float32 limits, and GSPO's ratio as exp(sum) ** (1 / n) against exp(mean) on 8,192
    tokens drifting 0.011 nats each: inf with a NaN gradient, where the log-space ratio is 1.011."""
    exp32 = lambda x: torch.exp(torch.tensor(x, dtype=torch.float32))  # noqa: E731
    limits = (
        torch.isfinite(exp32(88.7))
        and torch.isinf(exp32(88.8))
        and exp32(-103.9) > 0
        and exp32(-104.0) == 0
    )
    drift = torch.full((8192,), 0.011, requires_grad=True)
    literal = torch.exp(drift.sum()) ** (1 / 8192)
    (grad,) = torch.autograd.grad(literal, drift)
    log_space = torch.exp(drift.mean())
    return bool(
        limits
        and torch.isinf(literal)
        and torch.isnan(grad).all()
        and round(float(log_space), 3) == 1.011
    )


CLAIMS = [
    # Advantages.
    Claim("SKILL.md", "(std(r) + 1e-4)", lambda: "+ 1e-4)" in TRAINER_SOURCE[2786]),
    Claim(
        "SKILL.md",
        "[0, 1] with G = 2 give\n  advantages of about ±0.707",
        lambda: close(compute_advantages(torch.tensor([0.0, 1.0]), 2)[1].item(), 0.707, 5e-4),
    ),
    Claim(
        "algorithm",
        "σ = 0.7071 and A is about ±0.707",
        lambda: close(advantages_module.nanstd(torch.tensor([0.0, 1.0])).item(), 0.7071),
    ),
    Claim(
        "algorithm",
        "μ = 0.75, the squared deviations sum to 0.75, σ = sqrt(0.75 / 3) = 0.5",
        lambda: close(advantages_module.nanstd(torch.tensor([0.0, 1, 1, 1])).item(), 0.5),
    ),
    Claim(
        "algorithm",
        "A = [-1.4997, 0.4999,\n0.4999, 0.4999]",
        lambda: torch.allclose(
            compute_advantages(torch.tensor([0.0, 1, 1, 1]), 4),
            torch.tensor([-1.4997, 0.4999, 0.4999, 0.4999]),
            atol=1e-4,
        ),
    ),
    Claim("algorithm", "`abs(A_i) <= (G - 1) / sqrt(G)`", advantage_bound_holds),
    Claim(
        "algorithm",
        "(0.35 for example) fp32 rounding leaves advantages up to about 3e-4",
        lambda: 1e-4 < compute_advantages(torch.full((8,), 0.35), 8).abs().max().item() < 5e-4,
    ),
    Claim(
        "algorithm",
        "compare with a tolerance of about 1e-3",
        lambda: compute_advantages(torch.full((8,), 0.35), 8).abs().max().item() < 1e-3,
    ),
    Claim(
        "playbook",
        "a constant group gives 0 (within about 1e-3 for non-dyadic rewards such as 0.35)",
        lambda: compute_advantages(torch.full((8,), 0.35), 8).abs().max().item() < 1e-3,
    ),
    Claim(
        "playbook",
        "verl's 1e-6 gives |A| of about\n  0.056 for a constant group of 0.95",
        lambda: close(constant_group_advantage(0.95, 1e-6), 0.056, 5e-4),
    ),
    Claim(
        "playbook",
        "(epsilon 1 turns rewards [0, 1] into ±0.29 instead of ±0.71)",
        lambda: (
            close(advantages_with_epsilon(1.0)[1].item(), 0.29, 5e-3)
            and close(advantages_with_epsilon(1e-4)[1].item(), 0.71, 5e-3)
        ),
    ),
    Claim(
        "playbook",
        "`1e-8` amplifies noise in\n  near-constant groups",
        lambda: advantages_with_epsilon_group(1e-8) > 10 * advantages_with_epsilon_group(1e-4),
    ),
    # Log-probs.
    Claim(
        "SKILL.md",
        "bf16 autocast moves log-probs by 1e-3 or more",
        lambda: bf16_logprob_shift() >= 1e-3,
    ),
    # Clipping and KL.
    Claim(
        "algorithm",
        "A = 1, ρ = 1.5, ε = 0.2 gives a loss of -1.2 and zero gradient",
        lambda: close(clipped_token()[0], -1.2, 1e-6) and clipped_token()[1] == 0.0,
    ),
    Claim(
        "algorithm",
        "d = -1 and k3 = exp(-1) + 1 - 1 = 0.368",
        lambda: close(per_token_kl(torch.tensor(-1.0), torch.tensor(-2.0)).item(), 0.368, 5e-4),
    ),
    Claim("algorithm", "Its expectation\nunder π_θ is exactly that KL", k3_expectation_matches_kl),
    Claim(
        "SKILL.md",
        "whose mean over the policy's samples is KL(policy \\|\\| reference)",
        k3_expectation_matches_kl,
    ),
    Claim(
        "SKILL.md",
        "k1, `logp - ref` added to the loss, has a gradient of zero in expectation",
        k1_expected_gradient_is_zero,
    ),
    Claim(
        "algorithm",
        "as a loss term it penalises\nnothing: its gradient is ∇ℓ, whose expectation under π_θ is Σ π_θ ∇ℓ = ∇ Σ π_θ = 0.",
        k1_expected_gradient_is_zero,
    ),
    Claim(
        "SKILL.md",
        "caps the loss\n  of an A < 0 token at `-c·A`, its ratio at c itself, not at 1 + c",
        delta_is_a_dual_clip,
    ),
    Claim(
        "SKILL.md", "TRL's `delta` gives the same cap when δ > 1 + eps_high.", delta_is_a_dual_clip
    ),
    Claim(
        "SKILL.md",
        "mean over all B rows of (sum of m*l over tokens / tokens in the row); a row with no counted token adds 0",
        grpo_mean_counts_empty_rows,
    ),
    Claim(
        "SKILL.md",
        "the mirrored `exp(logp - ref) - (logp - ref) - 1` is no estimate of it",
        k3_mirror_is_not_kl,
    ),
    Claim(
        "algorithm",
        "On\npolicy ρ = 1 in value, but its gradient adds k3 to ∂loss/∂ℓ.",
        lambda: close(bias_correction_gradient_gap(), 1.0, 1e-6),
    ),
    Claim(
        "algorithm",
        "the\ngradient of the `dapo` loss with respect to ℓ_{i,t} is -A_i / N",
        lambda: torch.allclose(
            onpolicy_dapo_gradient(), -torch.tensor([[0.5, 0.5, 0.0], [-1.5, 0.0, 0.0]]) / 3
        ),
    ),
    Claim(
        "algorithm",
        "τ = 1.0 for A > 0 and 1.05 otherwise",
        lambda: (
            DEFAULTS["sapo_temperature_pos"] == 1.0 and DEFAULTS["sapo_temperature_neg"] == 1.05
        ),
    ),
    Claim(
        "algorithm",
        "(the recommended ε_high is 5.0; the default 0.2\n  caps every weight at 0.2)",
        lambda: (
            "recommended value is `5.0`" in CONFIG_SOURCE
            and DEFAULTS["epsilon"] == 0.2
            and DEFAULTS["epsilon_high"] is None
        ),
    ),
    Claim(
        "SKILL.md", "`cispo` recommends 5.0", lambda: "recommended value is `5.0`" in CONFIG_SOURCE
    ),
    # Paper values: only their consistency with TRL's defaults can be checked offline.
    Claim(
        "algorithm",
        "ε_high = 0.28 > ε_low = 0.2",
        lambda: "Paper DAPO recommends `0.28`" in CONFIG_SOURCE and DEFAULTS["epsilon"] == 0.2,
    ),
    Claim(
        "SKILL.md",
        "DAPO's clip-higher uses 0.28",
        lambda: "Paper DAPO recommends `0.28`" in CONFIG_SOURCE and DEFAULTS["epsilon"] < 0.28,
    ),
    Claim(
        "algorithm",
        "(the paper\nuses about 3e-4 and 4e-4, its §5.1)",
        lambda: DEFAULTS["epsilon"] > 4e-4,
    ),
    # Aggregation, on TRL's own _compute_loss and on reference_impl.
    Claim(
        "algorithm",
        "give 4/3 for `bnpo` and `dapo`, 1.5 for `grpo`, 2/3 for `dr_grpo` with L_max = 3, and 2 for\n`luspo`",
        lambda: (
            close(fixture_loss("luspo"), 2.0, 1e-6)
            and all(
                close(fixture_loss(t, impl), v, 1e-6)
                for impl in ("trl", "ref")
                for t, v in (("bnpo", 4 / 3), ("dapo", 4 / 3), ("grpo", 1.5), ("dr_grpo", 2 / 3))
            )
        ),
    ),
    Claim(
        "algorithm",
        "divides the `dapo` family by\n(N_tok / P) · (GA / S)",
        lambda: close(dapo_window_normaliser(), 12 * 2 / 4, 1e-6),
    ),
    Claim(
        "internals",
        "(N_tok / P) · GA / S (from v1.10)",
        lambda: close(dapo_window_normaliser(), 6.0, 1e-6),
    ),
    # Config facts.
    Claim(
        "internals",
        "`generation_batch_size` must be divisible by G, and G must be at least 2",
        lambda: (
            config_rejects(num_generations=1)
            and config_rejects(per_device_train_batch_size=3, num_generations=2)
        ),
    ),
    Claim(
        "SKILL.md",
        "`bf16` defaults to True and `gradient_checkpointing` to True",
        lambda: (
            GRPOConfig(output_dir="unused", use_cpu=True, report_to="none").bf16 is True
            and DEFAULTS["gradient_checkpointing"] is True
        ),
    ),
    Claim(
        "SKILL.md",
        "then clip the summed gradient's norm to 1.0 once",
        lambda: DEFAULTS["max_grad_norm"] == 1.0 and _clipped_once_per_step(),
    ),
    Claim("internals", "(3,405 lines)", lambda: len(TRAINER_SOURCE) == 3405),
    Claim(
        "algorithm",
        "exp overflows to\ninf past a summed log-ratio of 88.7 and rounds to 0 below -103.9: 8,192 tokens"
        " drifting 0.011\nnats each, while the ratio itself is 1.011. The ratio is then inf or 0 and"
        " the gradient NaN.",
        lambda: _literal_gspo_ratio_leaves_float32(),
    ),
    Claim(
        "SKILL.md",
        "With `beta=0.0` (the TRL 1.16 default) no reference model is built",
        lambda: DEFAULTS["beta"] == 0.0,
    ),
    Claim("SKILL.md", "T = 1.0 (the TRL 1.16 default)", lambda: DEFAULTS["temperature"] == 1.0),
    # Version table: the TRL 1.16 column must match the installed defaults (history is from TRL's
    # release tags, recorded in the project's facts file; only 1.16 is installed to check against).
    Claim("internals", '| "dapo" (from v0.22) |', lambda: DEFAULTS["loss_type"] == "dapo"),
    Claim("internals", "| 0.0 (from v0.19) |", lambda: DEFAULTS["beta"] == 0.0),
    Claim("internals", "| 1.0 (from v0.18) |", lambda: DEFAULTS["temperature"] == 1.0),
    Claim("internals", '| "group" (from v0.22;', lambda: DEFAULTS["scale_rewards"] == "group"),
    Claim("internals", "| 512 (from v1.10) |", lambda: DEFAULTS["max_completion_length"] == 512),
    Claim("internals", "| True (from v1.10) |", lambda: DEFAULTS["use_bias_correction_kl"] is True),
    Claim(
        "internals",
        "| `nanstd` + 1e-4 |",
        lambda: (
            "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)"
            in "\n".join(TRAINER_SOURCE)
        ),
    ),
    Claim(
        "internals", "| prompts are not truncated |", lambda: "max_prompt_length" not in DEFAULTS
    ),
]


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{c.file}:{c.text[:40]}" for c in CLAIMS])
def test_claim_is_in_the_skill_and_true(claim):
    assert claim.text in TEXT[claim.file], f"claim no longer in {claim.file}: {claim.text!r}"
    assert holds(claim), f"claim is false: {claim.text!r}"


# ---------------------------------------------------------------------------------------------
# The hyperparameter table of SKILL.md, row by row against GRPOConfig.

ROW = re.compile(r"^\| `(\w+)`(?: \(G\))? \|([^|]+)\|([^|]*)\|", re.MULTILINE)


def parse_cell(cell: str):
    cell = cell.strip()
    if cell.startswith('"'):
        return cell.strip('"')
    return {"None": None, "True": True, "False": False}.get(cell, None if cell == "None" else cell)


def hyperparameter_rows() -> list[tuple[str, str, str]]:
    section = TEXT["SKILL.md"].split("## Key hyperparameters", 1)[1].split("\n## ", 1)[0]
    return [tuple(cell.strip() for cell in row) for row in ROW.findall(section)]


def test_hyperparameter_table_is_complete():
    names = [name for name, _, _ in hyperparameter_rows()]
    assert len(names) == 14 and len(set(names)) == 14


@pytest.mark.parametrize("name,default,typical", hyperparameter_rows())
def test_hyperparameter_default_matches_grpo_config(name, default, typical):
    assert name in DEFAULTS, f"{name} is not a GRPOConfig field"
    actual = DEFAULTS[name]
    written = parse_cell(default)
    if isinstance(actual, bool) or actual is None or isinstance(actual, str):
        assert written == actual
    else:
        assert float(written) == actual
    if " to " in typical and actual is not None:  # a typical range must contain the default
        low, high = (float(x) for x in typical.split(" to "))
        assert low <= actual <= high


# ---------------------------------------------------------------------------------------------
# Issue 11: each corrected statement is recomputed here, and the old wrong wording must be gone.

CHUNKED_LOGPROB_SOURCE = (Path(trl.__file__).parent / "kernels" / "chunked_logprob.py").read_text()
CALLBACKS_SOURCE = (Path(trl.__file__).parent / "trainer" / "callbacks.py").read_text()
TRAINER_TEXT = "\n".join(TRAINER_SOURCE)


def _clipped_once_per_step() -> bool:
    """transformers' Trainer clips the gradient norm in the branch that runs once per optimizer
    step (after the last micro-batch of an accumulation window), just before the step."""
    import transformers.trainer as hf_trainer

    source = inspect.getsource(hf_trainer.Trainer)
    sync_branch = source.split("if do_sync_step:", 1)[1].split("self.optimizer.step()", 1)[0]
    return "self._clip_grad_norm(model)" in sync_branch


def expected_kl_gradients() -> dict[str, torch.Tensor]:
    """Exact expected gradients, over a 5-token softmax policy, of TRL's KL term and of both KLs.

    The KL term is TRL's own `_compute_loss` with beta 1 and advantage 0 on one sampled token;
    its expectation is the sum over the 5 tokens weighted by their (detached) probability.
    """
    theta = torch.tensor([0.3, -1.2, 0.8, 0.1, -0.4], dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.tensor([-0.5, 0.4, 0.2, -1.0, 0.9], dtype=torch.float64), -1)
    logp = torch.log_softmax(theta, -1)
    pi = logp.exp().detach()
    grads = {}
    for correction in (True, False):
        total = torch.zeros_like(theta)
        for token in range(5):
            loss = trl_loss(
                "bnpo",
                logp[token].view(1, 1),
                torch.zeros(1, dtype=torch.float64),
                torch.ones(1, 1, dtype=torch.long),
                beta=1.0,
                ref=ref[token].view(1, 1),
                use_bias_correction_kl=correction,
            )
            (grad,) = torch.autograd.grad(loss, theta, retain_graph=True)
            total += pi[token] * grad
        grads["bias_corrected" if correction else "plain"] = total
    reverse = (logp.exp() * (logp - ref)).sum()  # KL(pi || ref)
    forward = (ref.exp() * (ref - logp)).sum()  # KL(ref || pi)
    grads["reverse"] = torch.autograd.grad(reverse, theta, retain_graph=True)[0]
    grads["forward"] = torch.autograd.grad(forward, theta)[0]
    return grads


def kl_gradients_match_to_5_decimals() -> bool:
    g = expected_kl_gradients()
    same = lambda a, b: torch.allclose(a, b, atol=5e-6, rtol=0)  # noqa: E731
    return (
        same(g["bias_corrected"], g["reverse"])
        and same(g["plain"], g["forward"])
        and not same(g["bias_corrected"], g["forward"])  # the two objectives really differ here
    )


def fused_head_rounds_only_the_logits() -> bool:
    """TRL 1.16's ChunkedLogProbFunction under CPU bf16 autocast: equal (to fp32 precision) to an
    fp32 log-softmax of bf16-projected logits, and far from the all-fp32 result."""
    from trl.kernels import ChunkedLogProbFunction

    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(6, 16, generator=generator)
    weight = torch.randn(37, 16, generator=generator)
    targets = torch.randint(0, 37, (6,), generator=generator)
    temperature = 0.7

    def reference(logits: torch.Tensor) -> torch.Tensor:
        scaled = logits.double() / temperature
        return torch.log_softmax(scaled, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = ChunkedLogProbFunction.apply(hidden, weight, None, targets, temperature, 8)[0]
    plain = ChunkedLogProbFunction.apply(hidden, weight, None, targets, temperature, 8)[0]
    bf16_logits = torch.mm(hidden.bfloat16(), weight.bfloat16().t())  # bf16 output, as the tile
    return (
        torch.allclose(fused.double(), reference(bf16_logits), atol=1e-5)
        and (fused.double() - reference(hidden @ weight.t())).abs().max() > 1e-3
        and torch.allclose(plain.double(), reference(hidden @ weight.t()), atol=1e-5)
    )


def length_correlated_losses(
    positive_first: bool,
    advantage: float | None = None,
    lengths: tuple[int, int] = (10, 30),
    max_completion_length: int | None = None,
) -> dict[str, float]:
    """TRL loss per loss_type for A = ±advantage (default ±1/sqrt(2), the G = 2 advantage of
    rewards [0, 1]) on two completions of the given lengths, on policy, beta 0.

    positive_first: the first (shorter) completion has A > 0 (the shorter answer is the better one).
    """
    if advantage is None:
        advantage = compute_advantages(torch.tensor([0.0, 1.0]), 2)[1].item()
    width = max_completion_length or max(lengths)
    mask = torch.zeros(2, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    sign = 1.0 if positive_first else -1.0
    advantages = torch.tensor([advantage * sign, -advantage * sign])
    losses = {}
    for loss_type in ("dapo", "bnpo", "dr_grpo", "grpo"):
        logps = torch.zeros(2, width, requires_grad=True)
        losses[loss_type] = trl_loss(
            loss_type, logps, advantages, mask, max_completion_length=width
        ).item()
    return losses


NUMBER = r"(\d+(?:\.\d+)?)"


def length_losses_are_as_stated(text: str) -> bool:
    """The text's inputs (A, the two lengths, max_completion_length) and its stated dapo/bnpo and
    dr_grpo values are read from the claim; the losses are TRL's; grpo must give 0."""
    found = re.search(
        rf"A = ±{NUMBER}.*?lengths {NUMBER} and {NUMBER}.*?±{NUMBER}.*?`dr_grpo` ±{NUMBER} "
        rf"with `max_completion_length={NUMBER}`",
        text,
        re.S,
    )
    advantage, short, long, dapo, dr_grpo, width = (float(x) for x in found.groups())
    assert advantage == round(compute_advantages(torch.tensor([0.0, 1.0]), 2)[1].item(), 3)
    stated = {"dapo": dapo, "bnpo": dapo, "dr_grpo": dr_grpo, "grpo": 0.0}
    for positive_first, sign in ((True, 1.0), (False, -1.0)):
        losses = length_correlated_losses(
            positive_first, advantage, (int(short), int(long)), int(width)
        )
        if not all(close(losses[t], sign * v, 5e-4) for t, v in stated.items()):
            return False
    return True


def bnpo_and_dapo_accumulation() -> dict[str, tuple[float, float]]:
    """(one batch, two accumulated micro-batches) for per-token losses [[1, 1], [2]] in TRL."""
    rows = [
        (torch.tensor([[-1.0, -1.0]]), torch.tensor([[1, 1]])),
        (torch.tensor([[-2.0, -2.0]]), torch.tensor([[1, 0]])),
    ]
    full_mask = torch.tensor([[1, 1], [1, 0]])
    results = {}
    for loss_type in ("bnpo", "dapo"):
        one_batch = trl_loss(
            loss_type, torch.zeros(2, 2), torch.tensor([-1.0, -2.0]), full_mask, num_items=3
        ).item()
        accumulated = 0.0
        for advantages, mask in rows:
            accumulated += trl_loss(
                loss_type,
                torch.zeros(1, 2),
                advantages[:, 0],
                mask,
                num_items=3,
                grad_accum=2,
                steps_per_generation=2,
            ).item()
        results[loss_type] = (one_batch, accumulated)
    return results


def value(text: str) -> float:
    """`4/3` or `1.5` as a float."""
    numerator, _, denominator = text.partition("/")
    return float(numerator) / float(denominator or 1)


def bnpo_accumulation_as_stated(text: str) -> bool:
    """Per-token losses (one constant per row) and the two stated bnpo values, read from the text;
    TRL's `_compute_loss` gives the values for one batch and for one micro-batch per row."""
    found = re.search(
        r"(\[\[[\d, \[\]]+\]\]) give ([\d/.]+) (?:in|as) one\s+batch but ([\d/.]+) accumulated",
        text,
    )
    rows = ast.literal_eval(found.group(1))
    one_batch_stated, accumulated_stated = value(found.group(2)), value(found.group(3))
    width = max(len(row) for row in rows)
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    advantages = torch.tensor([-float(row[0]) for row in rows])  # on policy, per-token loss = -A
    assert all(len(set(row)) == 1 for row in rows)
    tokens = int(mask.sum())
    one_batch = trl_loss("bnpo", torch.zeros(len(rows), width), advantages, mask).item()
    accumulated = sum(
        trl_loss(
            "bnpo",
            torch.zeros(1, width),
            advantages[i : i + 1],
            mask[i : i + 1],
            num_items=tokens,
            grad_accum=len(rows),
            steps_per_generation=len(rows),
        ).item()
        for i in range(len(rows))
    )
    return (
        close(one_batch, one_batch_stated, 1e-6)
        and close(accumulated, accumulated_stated, 1e-6)
        and not close(one_batch, accumulated, 1e-3)
    )


def old_logps_computed_with_vllm_correction() -> bool:
    window = "\n".join(TRAINER_SOURCE[2641:2646])
    return (
        "self.args.gradient_accumulation_steps % generate_every != 0 or (" in window
        and "self.use_vllm and self.vllm_importance_sampling_correction" in window
        and DEFAULTS["vllm_importance_sampling_correction"] is True
    )


ISSUE_11_CLAIMS = [
    Claim(
        "algorithm",
        "On an exact 5-token softmax the two\nexpected gradients match those KLs to 5 decimals.",
        kl_gradients_match_to_5_decimals,
    ),
    Claim(
        "playbook",
        "With A = ±0.707 and lengths 10 and 30 it is\n  ±0.354 (`bnpo` the same, `dr_grpo` ±0.236 "
        "with `max_completion_length=30`); only `grpo`",
        length_losses_are_as_stated,
    ),
    Claim(
        "internals",
        "its sign follows the lengths of the better completions",
        lambda: (
            DEFAULTS["loss_type"] == "dapo"
            and length_losses_are_as_stated(TEXT["playbook"].split("### The loss is 0")[1])
        ),
    ),
    Claim(
        "internals",
        "`logprobs = target_logit - log_z`",
        lambda: "logprobs = target_logit - log_z" in CHUNKED_LOGPROB_SOURCE,
    ),
    Claim(
        "internals",
        "logit tiles come out of the projection in the autocast dtype (bf16 under the default\n"
        "`bf16=True`) unless `cast_lm_head_to_fp32=True`, so they carry bf16 rounding; each tile is then\n"
        "cast to fp32 for the temperature scaling and the exponentials",
        lambda: DEFAULTS["cast_lm_head_to_fp32"] is False and fused_head_rounds_only_the_logits(),
    ),
    Claim(
        "internals",
        "`GRPOTrainer` 1.15 and 1.16 never call `selective_log_softmax`",
        lambda: "selective_log_softmax(" not in TRAINER_TEXT,
    ),
    Claim(
        "playbook",
        "for `dapo`, whose normaliser is the token count of the whole optimizer step, the gradient of\n"
        "  one batch equals the gradient accumulated",
        lambda: close(*bnpo_and_dapo_accumulation()["dapo"], 1e-6),
    ),
    Claim(
        "algorithm",
        "per-token losses\n[[1, 1], [2]] give 4/3 as one batch but 1.5 accumulated",
        bnpo_accumulation_as_stated,
    ),
    Claim(
        "SKILL.md",
        "with `sync_ref_model=True` each sync moves it `ref_model_mixup_alpha` of the way",
        lambda: (
            DEFAULTS["sync_ref_model"] is False
            and "self.add_callback(SyncRefModelCallback(" in TRAINER_TEXT
            and "args.ref_model_mixup_alpha)" in CALLBACKS_SOURCE
        ),
    ),
    Claim(
        "SKILL.md",
        "score with a frozen copy of the starting policy, in eval mode",
        lambda: (
            "self.accelerator.prepare_model(self.ref_model, evaluation_mode=True)" in TRAINER_TEXT
        ),
    ),
    Claim(
        "SKILL.md",
        "exp of the masked mean log-ratio, a geometric mean",
        lambda: "(log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)" in TRAINER_TEXT,
    ),
    Claim(
        "internals",
        "| `completions/mean_length`, `completions/clipped_ratio` |",
        lambda: 'self._metrics[mode]["completions/clipped_ratio"]' in TRAINER_TEXT,
    ),
    Claim(
        "SKILL.md",
        "GRPO adds a per-token\nk3 estimate of the KL to the loss",
        lambda: "per_token_loss = per_token_loss + self.beta * per_token_kl" in TRAINER_TEXT,
    ),
]


def ref_sync_as_stated(text: str) -> bool:
    """Steps and alpha read from the text equal GRPOConfig's defaults, and TRL's callback mixes
    ref = alpha * policy + (1 - alpha) * ref."""
    from trl.trainer.callbacks import SyncRefModelCallback

    steps, alpha = re.search(r"\(([\d]+)\) optimizer steps.*?\(([\d.]+)\)", text, re.S).groups()
    config = built_config()
    if (config.ref_model_sync_steps, config.ref_model_mixup_alpha) != (int(steps), float(alpha)):
        return False
    policy, ref = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    before = ref.weight.detach().clone()
    SyncRefModelCallback._sync_target_model(policy, ref, config.ref_model_mixup_alpha)
    a = float(alpha)
    return torch.allclose(ref.weight, a * policy.weight + (1 - a) * before)


LATER_CLAIMS = [
    Claim(
        "internals",
        "then every `ref_model_sync_steps` (512) optimizer steps `SyncRefModelCallback` sets\n"
        "  ref = α·policy + (1 − α)·ref with α = `ref_model_mixup_alpha` (0.6)",
        ref_sync_as_stated,
    ),
    Claim(
        "playbook",
        "(unless the\n  trainer syncs it on purpose, as TRL does with `sync_ref_model=True`)",
        lambda: "self.add_callback(SyncRefModelCallback(" in TRAINER_TEXT,
    ),
    Claim(
        "algorithm",
        "and always with `use_vllm=True` while\n`vllm_importance_sampling_correction=True` (its default)",
        old_logps_computed_with_vllm_correction,
    ),
    Claim(
        "SKILL.md",
        "(`num_iterations=1`, the default, without vLLM) TRL does not store old\n  log-probs",
        lambda: DEFAULTS["num_iterations"] == 1 and old_logps_computed_with_vllm_correction(),
    ),
    Claim(
        "SKILL.md",
        "TRL 1.16 under\n  `bf16=True` projects the logits in bf16 (the softmax arithmetic is fp32) unless\n"
        "  `cast_lm_head_to_fp32=True`",
        lambda: built_config().bf16 is True and fused_head_rounds_only_the_logits(),
    ),
]


@pytest.mark.parametrize(
    "claim", LATER_CLAIMS, ids=[f"{c.file}:{c.text[:40]}" for c in LATER_CLAIMS]
)
def test_audit_claim_is_in_the_skill_and_true(claim):
    assert claim.text in TEXT[claim.file], f"claim no longer in {claim.file}: {claim.text!r}"
    assert holds(claim), f"claim is false: {claim.text!r}"


# The wrong statements of issue 11, exactly as the old text had them.
REMOVED = [
    ("algorithm", "It is the\nGRPO paper's choice and TRL's"),
    ("algorithm", "on policy its expected gradient is that of the forward KL"),
    ("SKILL.md", "because the advantages of each group sum to 0; watch the reward"),
    ("internals", "near 0 is normal (advantages sum to 0 per group)"),
    ("SKILL.md", "- With `num_iterations > 1`, old log-probs are computed once"),
    ("internals", "old log-probs (only if GA % (S·μ) != 0)"),
    ("internals", "computes `z_label - logsumexp(z)` and the entropy in fp32"),
    ("internals", "The fused head (`trl/trainer/utils.py:add_fused_lm_head`)"),
    ("SKILL.md", "Where bugs hide: helpers in `trl/trainer/utils.py` (`selective_log_softmax`"),
    (
        "playbook",
        "the gradient of one batch equals the gradient accumulated over micro-batches with unequal\n  token counts",
    ),
    ("SKILL.md", "| its log-probs never change across steps |"),
    ("internals", "clipped_ratio near 1: EOS never reached or EOS set incomplete"),
    ("playbook", "refer to the project's catalog"),
    ("SKILL.md", "KL penalty, comes from PPO"),
    ("internals", "the gathered one has N = b·S·P rows"),
    ("playbook", "with no hidden top-k"),
    # Found in the audit of the first fix.
    ("SKILL.md", "Its target range is TRL 0.17 to 1.16; 1.16 is the release it is validated on"),
    ("grpo-check", "On another release a failure that names a missing attribute or config field"),
    (
        "algorithm",
        "(`steps_per_generation` larger than the accumulation steps), ℓ^old is computed once",
    ),
    (
        "internals",
        "only the running accumulators (max, sum of exponentials, target\nlogit) are fp32",
    ),
    (
        "internals",
        "0.14 and 0.15 have no `top_k` field and build their `GenerationConfig` without it,\n  so transformers' default of 50 applies; 0.17 sets",
    ),
    ("internals", "`_generate_and_score_completions` up to 0.17 and in `_calculate_rewards`"),
]


@pytest.mark.parametrize(
    "claim", ISSUE_11_CLAIMS, ids=[f"{c.file}:{c.text[:40]}" for c in ISSUE_11_CLAIMS]
)
def test_issue_11_claim_is_in_the_skill_and_true(claim):
    assert claim.text in TEXT[claim.file], f"claim no longer in {claim.file}: {claim.text!r}"
    assert holds(claim), f"claim is false: {claim.text!r}"


@pytest.mark.parametrize("file,phrase", REMOVED, ids=[f"{f}:{p[:40]}" for f, p in REMOVED])
def test_issue_11_wrong_statement_is_gone(file, phrase):
    assert phrase not in TEXT[file]


def test_old_kl_claim_was_false_for_trls_default():
    """The old text said TRL's KL gradient is the forward KL's; with TRL's default it is not."""
    g = expected_kl_gradients()
    assert DEFAULTS["use_bias_correction_kl"] is True
    assert not torch.allclose(g["bias_corrected"], g["forward"], atol=1e-3)


def test_old_loss_claim_was_false_for_dapo():
    """The old text said the loss is near 0 because advantages sum to 0: true only for grpo."""
    losses = length_correlated_losses(positive_first=False)
    assert losses["grpo"] == pytest.approx(0.0, abs=1e-7)
    assert losses["dapo"] < -0.3 and losses["bnpo"] < -0.3 and losses["dr_grpo"] < -0.2


def test_skill_has_no_dangling_catalog_identifiers():
    """Bug ids such as B05 or T16 pointed to a catalog the skill does not ship."""
    for name, text in TEXT.items():
        assert not re.findall(r"\b[BT]\d\d\b", text), name


def commands_in_code_blocks(text: str, program: str) -> list[str]:
    """Indented (4-space) code lines of `text` that run `program`, in order."""
    return [
        line.strip()
        for line in text.splitlines()
        if line.startswith("    ") and line.strip().startswith(program + " ")
    ]


def test_skill_md_reaches_vendored_forks_and_sandboxes():
    text = TEXT["SKILL.md"]
    commands = commands_in_code_blocks(text, "grpo-check")
    # The first example an agent copies must check the fork in front of it, not the installed TRL.
    assert commands[0].split()[:2] == ["grpo-check", "./trl"], commands
    assert (
        "`grpo-check trl` checks only the TRL that `import trl` finds, never a fork beside it"
        in (" ".join(text.split()))
    )
    assert "python scripts/grpo_probe.py --trl ./trl" in text
    assert (SKILL / "scripts" / "grpo_probe.py").is_file()
    assert len(text.splitlines()) < 300
    # The CLI options and YAML format live in the grpo-check reference, not in SKILL.md.
    assert "functions:\n" not in text and "functions:\n" in TEXT["grpo-check"]
    assert "--junit-xml" in TEXT["grpo-check"]


def test_supported_trl_range_is_the_checkers():
    """SKILL.md and grpo-check.md state the range `checker.adapters.trl_version` enforces."""
    from checker.adapters import trl_version

    low, high = (".".join(map(str, v)) for v in (trl_version.OLDEST, trl_version.NEWEST))
    assert f"a TRL outside {low} to {high}" in " ".join(TEXT["SKILL.md"].split())
    assert f"drives every TRL release from {low} to {high}" in TEXT["grpo-check"]
    assert trl_version.unsupported_reason(f"{low}.0") is None
    assert trl_version.unsupported_reason(f"{high}.0") is None
    for outside in ("0.16.1", "1.17.0"):
        assert "is not supported" in trl_version.unsupported_reason(outside)
    if importlib.util.find_spec("triton") is None:
        assert "triton" in trl_version.unsupported_reason("1.15.0")


def test_grpo_check_refuses_an_older_release_with_one_line():
    """'on any other release it exits 2 with one line naming the supported range'."""
    import subprocess
    import sys

    from trl_releases import trl_release_path

    assert "**2**: nothing was checked (bad path, import error, a TRL outside" in (
        " ".join(TEXT["SKILL.md"].split())
    )
    executable = Path(sys.executable).with_name("grpo-check")
    command = [str(executable), str(trl_release_path("0.14.0"))]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert "0.17.0 to 1.16" in result.stderr


def test_description_names_variants_and_the_reward_contract():
    front = TEXT["SKILL.md"].split("---", 2)[1]
    for word in ("DAPO", "Dr. GRPO", "GSPO", "RLVR"):
        assert word in front
    for keyword in ("prompts", "completions", "completion_ids", "dataset columns", "trainer_state"):
        assert keyword in front
    call = "prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs"
    assert call in TRAINER_TEXT and 'reward_kwargs["trainer_state"] = self.state' in TRAINER_TEXT


# ---------------------------------------------------------------------------------------------
# The playbook's questions section: each default and behaviour it quotes, from TRL 1.16.


def built_config(**kwargs) -> GRPOConfig:
    """A GRPOConfig after __post_init__ (which fills some defaults the fields leave open)."""
    return GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kwargs)


QUESTION_CLAIMS = [
    Claim(
        "playbook",
        '`use_vllm=True` with `vllm_mode="colocate"` (default)',
        lambda: DEFAULTS["use_vllm"] is False and DEFAULTS["vllm_mode"] == "colocate",
    ),
    Claim(
        "playbook",
        "`vllm_gpu_memory_utilization` (default 0.3)",
        lambda: DEFAULTS["vllm_gpu_memory_utilization"] == 0.3,
    ),
    Claim(
        "playbook",
        "(`vllm_server_host` 0.0.0.0, port 8000 by default)",
        lambda: DEFAULTS["vllm_server_host"] == "0.0.0.0" and DEFAULTS["vllm_server_port"] == 8000,
    ),
    Claim(
        "playbook",
        '`vllm_importance_sampling_mode="sequence_mask"` a sequence whose weight is above 3.0 gets 0\n'
        "  (no lower bound: `vllm_importance_sampling_clip_min` is None)",
        lambda: (
            DEFAULTS["vllm_importance_sampling_mode"] == "sequence_mask"
            and built_config().vllm_importance_sampling_clip_max == 3.0
            and built_config().vllm_importance_sampling_clip_min is None
            and "invalid_mis_mask, value=0.0" in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        "weights each sequence's loss by\n  `exp(Σ_t (trainer − vLLM) log-probs)`",
        lambda: (
            "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask"
            in TRAINER_TEXT
            and "per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)"
            in TRAINER_TEXT
            and 'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]'
            in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        "the `kl` metric (logged only when `beta` is not 0)",
        lambda: (
            'if self.beta != 0.0:\n            self._metrics[mode]["kl"].append(' in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        "`frac_reward_zero_std` first: at 1 every group is constant and every advantage is 0",
        lambda: compute_advantages(torch.tensor([0.3, 0.3, 1.0, 1.0]), 2).abs().max() < 1e-3,
    ),
    Claim(
        "playbook",
        "`disable_dropout` defaults to False",
        lambda: DEFAULTS["disable_dropout"] is False,
    ),
    Claim(
        "playbook",
        "`per_device_train_batch_size=4` with\n  the default G = 8 fails; 8 passes",
        lambda: (
            DEFAULTS["num_generations"] == 8
            and config_rejects(per_device_train_batch_size=4)
            and not config_rejects(per_device_train_batch_size=8)
        ),
    ),
    Claim(
        "playbook",
        "`auto_find_batch_size=True` is rejected",
        lambda: config_rejects(per_device_train_batch_size=8, auto_find_batch_size=True),
    ),
    Claim(
        "playbook",
        "Keep `gradient_checkpointing=True` (the default)",
        lambda: built_config().gradient_checkpointing is True,
    ),
    Claim(
        "playbook",
        "The default `learning_rate` is 1e-6",
        lambda: built_config().learning_rate == 1e-6,
    ),
    Claim(
        "playbook",
        "`sync_ref_model=True` is refused",
        lambda: (
            "You passed `sync_ref_model=True` while using a PEFT model, which is currently not "
            "supported." in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        '`[{"role": "assistant", "content": text}]`',
        lambda: (
            'completions = [[{"role": "assistant", "content": content}] for content in contents]'
            in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        "plus\n  `trainer_state`, `log_extra` and `log_metric`",
        lambda: all(
            f'reward_kwargs["{key}"] = ' in TRAINER_TEXT
            for key in ("trainer_state", "log_extra", "log_metric")
        ),
    ),
    Claim(
        "playbook",
        "Returning a list of another length raises\n  a ValueError.",
        lambda: (
            "if len(output_reward_func) != len(prompts):\n                        raise ValueError("
            in TRAINER_TEXT
        ),
    ),
    Claim(
        "playbook",
        "512 tokens by\n  default (256 before TRL 1.10)",
        lambda: DEFAULTS["max_completion_length"] == 512,
    ),
]


@pytest.mark.parametrize(
    "claim", QUESTION_CLAIMS, ids=[f"{c.file}:{c.text[:40]}" for c in QUESTION_CLAIMS]
)
def test_question_claim_is_in_the_playbook_and_true(claim):
    assert claim.text in TEXT[claim.file], f"claim no longer in {claim.file}: {claim.text!r}"
    assert holds(claim), f"claim is false: {claim.text!r}"


def test_every_question_is_symptom_cause_check_fix():
    """Each entry of the playbook's questions section has the four parts, in order."""
    section = TEXT["playbook"].split("\n## questions\n", 1)[1]
    entries = re.split(r"^### ", section, flags=re.MULTILINE)[1:]
    titles = [entry.splitlines()[0] for entry in entries]
    assert len(entries) == 14, titles
    for entry in entries:
        positions = [entry.find(f"- **{part}") for part in ("Symptom.", "Cause.", "Check.", "Fix")]
        assert -1 not in positions and positions == sorted(positions), entry.splitlines()[0]
    # The questions of issue 11, each with its entry.
    for topic in (
        "loss is 0, negative, or rising",
        "reward is flat",
        "truncated (`completions/clipped_ratio` near 1)",
        "KL is large at step 0",
        "divisible by num_generations",
        "vLLM: server or colocate",
        "CUDA out of memory",
        # Issue 22: what users ask most and the skill answered only partly.
        "NaN",
        "vLLM operations: memory at start-up, time-outs, weight sync, sleep mode",
        "KL spikes in the middle of a run",
        "Training is slow",
        "DeepSpeed ZeRO-3 looks stuck",
        "LoRA / PEFT",
        "reward-function signature",
    ):
        assert any(topic in title for title in titles), topic


# ---------------------------------------------------------------------------------------------
# grpo-check.md: every option and default it names is the CLI's.


def test_grpo_check_reference_matches_the_cli():
    from checker.candidate import KINDS
    from checker.check_cli import check, profile

    # The probe's command lines and pip's take their own options.
    text = "\n".join(
        line
        for line in TEXT["grpo-check"].splitlines()
        if "grpo_probe.py" not in line and not line.strip().startswith("pip ")
    )
    options = {
        command.name: {opt: param for param in command.params for opt in param.opts}
        for command in (check, profile)
    }
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text))
    known = set(options["check"]) | set(options["profile"])
    assert named <= known, named - known
    line = re.search(r"--kind trl +# force how TARGET is read: (.*)", text).group(1)
    assert tuple(line.split(", ")) == KINDS
    defaults = re.search(r"--seed (\d+) --timeout (\d+) --workers (\d+) +# the defaults", text)
    seed, timeout, workers = (int(x) for x in defaults.groups())
    assert options["check"]["--seed"].default == seed
    assert options["check"]["--timeout"].default == timeout
    assert options["check"]["--workers"].default == workers
    assert (options["check"]["--workers"].type.min, options["check"]["--workers"].type.max) == (
        1,
        2,
    )
    profile_timeout = re.search(r"\[--timeout (\d+)\]", text).group(1)
    assert options["profile"]["--timeout"].default == float(profile_timeout)
    assert "[--write conventions.yaml]" in text and "--write" in options["profile"]
    # Stage names: the loop table's, which the CLI accepts.
    assert set(options["check"]["--stage"].type.choices) == set(STAGES)


def test_every_metric_the_skill_names_is_logged_by_trl():
    logged = set(re.findall(r'_metrics\[mode\]\[f?"([^"]+)"\]', TRAINER_TEXT))
    logged = {re.sub(r"\{\w+\}", "<func>", name) for name in logged}
    metric = re.compile(
        r"`((?:completions|sampling|clip_ratio|rewards)/[\w/<>]+|frac_reward_zero_std|reward_std)`"
    )
    named = {name for text in TEXT.values() for name in metric.findall(text)}
    assert (
        "completions/clipped_ratio" in named and "sampling/importance_sampling_ratio/mean" in named
    )
    assert named <= logged, named - logged
    # The metrics table's shorthand `high_mean`, `region_mean` are clip_ratio/ metrics.
    row = next(line for line in TEXT["internals"].splitlines() if "`clip_ratio/low_mean`" in line)
    for short in re.findall(r"`(\w+_mean)`", row):
        assert f"clip_ratio/{short}" in logged


def test_a_reference_sync_moves_the_reference_alpha_of_the_way(monkeypatch):
    """SKILL.md's loop table: ref = α·policy + (1 − α)·ref, run through TRL's own sync."""
    from trl.trainer import callbacks

    monkeypatch.setattr(
        callbacks, "AcceleratorState", lambda: SimpleNamespace(deepspeed_plugin=None)
    )
    torch.manual_seed(0)
    policy, reference = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = reference.weight.detach().clone()
    alpha = DEFAULTS["ref_model_mixup_alpha"]
    callbacks.SyncRefModelCallback.sync_target_model(policy, reference, alpha)
    expected = alpha * policy.weight.detach() + (1 - alpha) * before
    assert torch.allclose(reference.weight, expected)
    assert "ref = α·policy + (1 − α)·ref" in TEXT["SKILL.md"]
