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

import dataclasses
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
from skill_installer.source import skill_source

SKILL = skill_source()
FILES = {
    "SKILL.md": SKILL / "SKILL.md",
    "algorithm": SKILL / "references" / "grpo-algorithm.md",
    "internals": SKILL / "references" / "grpo-trainer-internals.md",
    "playbook": SKILL / "references" / "debugging-playbook.md",
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
    1003: "create_model_from_path(get_config_model_id(self.model.config)",
    1068: "add_fused_lm_head(",
    1419: "def _get_per_token_logps_and_entropies(",
    1510: "def training_step(",
    1522: "def _prepare_inputs(",
    1538: "generate_every = self.args.steps_per_generation * self.num_iterations",
    1543: "shuffle_sequence_dict(generation_batch)",
    1579: "def _calculate_rewards(",
    1880: "Mask everything after the first EOS token",
    2247: "batch_decode(completion_ids, skip_special_tokens=True)",
    2324: "def _generate_and_score_completions(",
    2498: "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()",
    2642: "generate_every = self.args.steps_per_generation * self.num_iterations",
    2787: "advantages = advantages / (std_rewards + 1e-4)",
    2810: "advantages = torch.nan_to_num(advantages, nan=0.0)",
    2939: "def compute_loss(",
    3020: "def _compute_loss(",
    3095: "coef_1 = torch.exp(log_importance_weights)",
    3100: "per_token_kl = (",
    3113: "coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)",
    3116: "coef_1 = torch.clamp(coef_1, max=self.args.delta)",
    3153: 'if self.loss_type in ["grpo", "sapo"]:',
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
) -> torch.Tensor:
    """TRL 1.16 `GRPOTrainer._compute_loss` on given log-probs (one process, beta 0)."""
    accelerator = SimpleNamespace(
        num_processes=1,
        gather=lambda x: x,
        reduce=lambda x, reduction="sum": x,
        sync_gradients=True,
    )
    args = SimpleNamespace(
        delta=None,
        use_bias_correction_kl=True,
        steps_per_generation=steps_per_generation,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
    )
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=accelerator,
        args=args,
        loss_type=loss_type,
        beta=0.0,
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


@dataclass(frozen=True)
class Claim:
    file: str
    text: str  # exactly as it appears in the skill
    holds: Callable[[], bool]


def close(value: float, target: float, tol: float = 1e-4) -> bool:
    return abs(value - target) <= tol


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
        "the epsilon is 1e-4, added to the std: a value like `1e4` crushes every advantage to near 0",
        lambda: advantages_with_epsilon(1e4).abs().max() < 1e-4,
    ),
    Claim(
        "playbook",
        "advantages about 1e4 times too small",
        lambda: (
            5e3 < (advantages_with_epsilon(1e-4)[1] / advantages_with_epsilon(1e4)[1]).item() < 5e4
        ),
    ),
    Claim(
        "playbook",
        "`1e-8` amplifies noise in near-constant groups",
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
    Claim("algorithm", "ε_high = 0.28 > ε_low = 0.2", lambda: DEFAULTS["epsilon"] == 0.2),
    Claim("SKILL.md", "DAPO's clip-higher uses 0.28", lambda: DEFAULTS["epsilon"] < 0.28),
    Claim("algorithm", "(the paper\nuses about 3e-4 and 4e-4)", lambda: DEFAULTS["epsilon"] > 4e-4),
    # Aggregation, on TRL's own _compute_loss and on reference_impl.
    Claim(
        "SKILL.md",
        "give 4/3 for `bnpo` and `dapo`, 1.5 for `grpo` and 2/3 for\n`dr_grpo` with `max_completion_length=3`",
        lambda: all(
            close(fixture_loss(t, impl), v, 1e-6)
            for impl in ("trl", "ref")
            for t, v in (("bnpo", 4 / 3), ("dapo", 4 / 3), ("grpo", 1.5), ("dr_grpo", 2 / 3))
        ),
    ),
    Claim(
        "algorithm",
        "give 4/3 for `bnpo` and `dapo`, 1.5 for `grpo`, 2/3 for `dr_grpo` with L_max = 3, and 2 for\n`luspo`",
        lambda: close(fixture_loss("luspo"), 2.0, 1e-6) and close(fixture_loss("grpo"), 1.5, 1e-6),
    ),
    Claim(
        "playbook",
        "`bnpo` and `dapo` give 4/3, `grpo` gives 1.5, `dr_grpo` with `max_completion_length=3` gives 2/3",
        lambda: all(
            close(fixture_loss(t), v, 1e-6)
            for t, v in (("bnpo", 4 / 3), ("dapo", 4 / 3), ("grpo", 1.5), ("dr_grpo", 2 / 3))
        ),
    ),
    Claim(
        "algorithm",
        "divides the `dapo` family by\n(N / P) · (GA / S)",
        lambda: close(dapo_window_normaliser(), 12 * 2 / 4, 1e-6),
    ),
    Claim(
        "internals",
        "(N / P) · GA / S (from v1.10)",
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
    Claim("SKILL.md", "clip the gradient norm to 1.0", lambda: DEFAULTS["max_grad_norm"] == 1.0),
    Claim("internals", "(3,405 lines)", lambda: len(TRAINER_SOURCE) == 3405),
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
    assert claim.holds(), f"claim is false: {claim.text!r}"


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
