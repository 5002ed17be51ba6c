"""The verifier's side of the `trl` family: the job a child runs (`trl_probes.py`) and the rules
that judge what it reports, in the verifier's own process.

Every input a judgement depends on is made here: the reward functions' values, the texts the
decode stage is given, each loss case's settings, advantages, completion mask and log-prob
offsets, the ids the reference model is probed on. The child feeds them to the workspace's
GRPOTrainer and reports what it computed and what it was given; a report whose inputs are not
these fails before anything is compared, and every expected value is recomputed from the
verifier's inputs with `reference_impl` (TRL 1.16 semantics), never from the child's. Nothing
reads the source text.

A fork of an older release (TRL 0.17 to 1.14) is judged against that release's semantics and the
fork's intended customisations, the task's `conventions` (the release's row of
`reference_impl/trl_semantics.py`, overridden by `[grpo.intended]`); without them, TRL 1.16's.
"rules" (task.toml `probes`) name the rules a task's bugs and decoys are judged by: the
`<stage>.<name>` rules of FORK_CASES and below judge a stage against a TRL 1.16 fork's
intended semantics (its GRPOConfig defaults and extra terms), `defaults.<field>=<value>` reads
GRPOConfig's defaults.
"""

from __future__ import annotations

import math

import plain
import torch
from judge import describe, difference, same

from reference_impl.trl_semantics import parse, semantics, value

G = 4
PROMPTS = [f"{d} =" for d in (1, 2, 3, 4)]
ROWS = len(PROMPTS) * G
COMPLETION_LENGTH = 6
TEMPERATURE = 0.7
EOS_BIAS = 2.0  # an untrained model that often stops early: ragged masks
# Rewards by row: groups with different spreads, so a batch-wide statistic or a huge epsilon shows.
SPREAD = [0.0, 1.0, 1.0, 1.0, 3.0, 5.0, 3.0, 5.0, 0.2, 0.2, 0.2, 0.9, 2.0, 0.0, 1.0, 0.5]
AUX = [1.0, None, 0.0, 1.0, None, None, 0.5, 0.5, 1.0, 0.0, None, 1.0, 0.0, 0.0, 1.0, 1.0]
# With AUX: rows 1 and 4 are scored by no function (both None), rows 5, 10 and 11 by one.
AUX2 = [0.5, None, 1.0, None, None, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, None, 1.0, 0.5, 0.0, 1.0]
REWARD_TABLES = {"spread": SPREAD, "aux": AUX, "aux2": AUX2}
DECODE_TEXTS = [
    "7",
    "<think>3 + 4</think> 7",
    "<think>3 + 4",
    "3 + 4</think>7",
    "the answer is 8",
    "<think></think>9",
    "",
    "5 5",
]
PLAIN_ROWS = [0, 4, 6, 7]
# Log-ratio (or ref - logp) offsets of the fork loss cases, cycled over the tokens: inside and
# outside 1 +- 0.2 and 1 + 0.28 (DAPO clip-higher), past a dual-clip bound of 3, a KL of 10 and a
# log-ratio of 20, with both signs.
FORK_OFFSETS = [0.1, -0.24, 0.24, 0.6, -0.6, 1.5, -1.5, 22.0, -22.0, 0.0, 15.0, -15.0]
LOSS_SEED = 7
PROBE_IDS = [[3, 13, 4, 5, 6]]  # what the reference model is probed on after training

# TRL 1.16's semantics where a task states none (a fork of an older release states its own).
DEFAULT_CONVENTIONS = semantics("1.16.0")
# Decoy rules that need the observations of a stage the task may not list.
RULE_STAGES = {
    "decode_reasoning": "decode",
    "decode_unclosed": "decode",
    "rewards_unscorable": "rewards",
}


def _conventions(conventions: dict | None) -> dict:
    return DEFAULT_CONVENTIONS | (conventions or {})


def tiny_spec():
    from reference_impl.tiny import TinySpec

    return TinySpec(eos_bias=EOS_BIAS)


LOSS_CASES = {
    "ratio.token": ("ratio", dict(loss_type="dapo"), 0.1, None),
    "ratio.sequence": (
        "ratio",
        dict(loss_type="dapo", importance_sampling_level="sequence"),
        0.1,
        None,
    ),
    "clipping.clip_higher": ("clipping", dict(loss_type="dapo", epsilon_high=0.28), 0.8, None),
    # epsilon_high explicit: a fork may change its default (trl-reward-weights-clipping's does)
    "clipping.delta": ("clipping", dict(loss_type="bnpo", delta=1.3, epsilon_high=0.2), 0.8, None),
    "kl.k3": ("kl", dict(loss_type="dapo", beta=0.04), None, 0.5),
    "kl.bias_correction": ("kl", dict(loss_type="grpo", beta=0.1), 0.1, 0.3),
    "kl.no_bias_correction": (
        "kl",
        dict(loss_type="grpo", beta=0.1, use_bias_correction_kl=False),
        0.1,
        0.3,
    ),
    "loss_aggregation.grpo": ("loss_aggregation", dict(loss_type="grpo"), None, None),
    "loss_aggregation.bnpo": ("loss_aggregation", dict(loss_type="bnpo"), None, None),
    "loss_aggregation.dr_grpo": ("loss_aggregation", dict(loss_type="dr_grpo"), None, None),
    "loss_aggregation.dapo": ("loss_aggregation", dict(loss_type="dapo"), None, None),
}


def loss_case(name: str, conventions: dict) -> dict | None:
    """The config of LOSS_CASES[name] on the fork's release, or None where it has no such
    setting: no dapo before TRL 0.22.2 (its token mean over the batch is bnpo's on one
    micro-batch), no `delta` before 0.18.2, no `importance_sampling_level` before 0.20.0, no
    `use_bias_correction_kl` before 0.26.2."""
    overrides = dict(LOSS_CASES[name][1])
    if overrides.get("loss_type") == "dapo" and "dapo" not in conventions["loss_types"]:
        overrides["loss_type"] = "bnpo" if name != "loss_aggregation.dapo" else None
    if overrides.get("loss_type") is None:
        return None
    for field in ("delta", "importance_sampling_level"):
        if field in overrides and not conventions[field]:
            return None
    if "use_bias_correction_kl" in overrides and not conventions["bias_correction_field"]:
        return None
    if "beta" not in overrides and conventions.get("beta", 0.0) != 0.0:
        overrides["beta"] = 0.0  # TRL 0.17-0.19.0 default to 0.04; the case has no reference
    return overrides


# Loss cases judged against a task fork's intended semantics: the trainer is built with
# `overrides` only, so the fork's own GRPOConfig defaults fill the rest, and `expected` is what the
# fork intends them to be, with its extra terms (`_fork_loss`). (stage, overrides, old log-probs
# offset by FORK_OFFSETS, ref log-probs offset by FORK_OFFSETS, expected)
FORK_CASES = {
    # trl-ratio-aggregation's fork: loss_type "grpo" and epsilon_high 0.28 by default, the log-ratio
    # clamped to +-20 before exp (verl core_algos.compute_policy_loss)
    "ratio.clamped_log_ratio": (
        "ratio",
        {},
        True,
        False,
        dict(loss_type="grpo", epsilon_high=0.28, log_ratio_clamp=20.0),
    ),
    "loss_aggregation.default_grpo": ("loss_aggregation", {}, False, False, dict(loss_type="grpo")),
    # trl-reward-weights-clipping's fork: epsilon_high 0.28 by default (DAPO, arXiv:2503.14476) and
    # dual-clip PPO, the loss of a negative-advantage token capped at 3 |A| (arXiv:1912.09729)
    "clipping.dual_clip": (
        "clipping",
        {},
        True,
        False,
        dict(loss_type="dapo", epsilon_high=0.28, dual_clip_c=3.0),
    ),
    # trl-kl-reference's fork: beta 0.04 by default, the per-token KL capped at 10 (verl low_var_kl)
    "kl.clamped": ("kl", {}, False, True, dict(loss_type="dapo", beta=0.04, kl_max=10.0)),
}


def _fork_offsets(shape) -> torch.Tensor:
    rows, cols = torch.arange(shape[0]).unsqueeze(1), torch.arange(shape[1]).unsqueeze(0)
    return torch.tensor(FORK_OFFSETS)[(rows + cols) % len(FORK_OFFSETS)]


def loss_inputs() -> dict[str, torch.Tensor]:
    """The loss cases' inputs, for the longest batch (the child keeps the columns its sampled
    batch has): uniform log-prob offsets in [-1, 1] ("noise"), FORK_OFFSETS ("offsets"), one
    advantage per row, and a completion mask of 1 to COMPLETION_LENGTH tokens per row."""
    g = torch.Generator().manual_seed(LOSS_SEED)
    noise = torch.rand((ROWS, COMPLETION_LENGTH), generator=g) * 2 - 1
    advantages = torch.randn(ROWS, generator=g)
    lengths = torch.tensor([1 + (5 * row) % COMPLETION_LENGTH for row in range(ROWS)])
    mask = (torch.arange(COMPLETION_LENGTH) < lengths.unsqueeze(1)).long()
    offsets = _fork_offsets((ROWS, COMPLETION_LENGTH))
    return {"noise": noise, "offsets": offsets, "advantages": advantages, "mask": mask}


def _loss_runs(stages: list[str], conventions: dict) -> dict[str, dict]:
    """How the child builds each loss case's trainer and its old and reference log-probs."""
    runs = {}
    for name, (stage, _, old, ref) in LOSS_CASES.items():
        overrides = loss_case(name, conventions)
        if stage in stages and overrides is not None:
            runs[name] = {"overrides": overrides, "old": old, "ref": ref, "deltas": "noise"}
    for name, (_, overrides, old, ref, _) in FORK_CASES.items():
        if name in stages:
            runs[name] = {
                "overrides": overrides,
                "old": 1.0 if old else None,
                "ref": 1.0 if ref else None,
                "deltas": "offsets",
            }
    for run in runs.values():
        release = parse(conventions["release"])
        needs_iterations = value("old_logps_need_iterations", release)
        run["extra"] = {"num_iterations": 2} if run["old"] is not None and needs_iterations else {}
    return runs


def make_job(stages: list[str], rules: list[str], conventions: dict | None) -> dict:
    """The child's job: what to observe and every input it is observed on."""
    conventions = _conventions(conventions)
    wanted = sorted(set(stages) | {RULE_STAGES.get(rule, rule) for rule in rules})
    return {
        "stages": wanted,
        "setup": {
            "prompts": PROMPTS,
            "group": G,
            "completion_length": COMPLETION_LENGTH,
            "temperature": TEMPERATURE,
            "eos_bias": EOS_BIAS,
            "seed": 0,
        },
        "rewards": REWARD_TABLES,
        "decode_texts": DECODE_TEXTS,
        "scales": conventions["scale_rewards"],
        "loss_runs": _loss_runs(wanted, conventions),
        "loss_inputs": {k: plain.encode(v) for k, v in loss_inputs().items()},
        "probe_ids": PROBE_IDS,
    }


# --- the inputs the child reports -------------------------------------------------------------
def _table(*names: str) -> torch.Tensor:
    """The verifier's reward columns `names`, one row per completion (None as NaN)."""
    columns = [[math.nan if v is None else float(v) for v in REWARD_TABLES[n]] for n in names]
    return torch.tensor(columns, dtype=torch.float32).T


def _rewards_given(name: str, rpf, *tables: str) -> tuple[torch.Tensor, list[str]]:
    """The verifier's rewards for a case, and a problem when the child reports others."""
    expected = _table(*tables)
    if not isinstance(rpf, torch.Tensor) or not same(rpf, expected):
        return expected, [
            f"{name}: the reward functions returned {describe(expected)}, the trainer reported "
            f"{describe(rpf)}"
        ]
    return expected, []


def _loss_inputs_problems(name: str, case: dict, run: dict) -> list[str]:
    """The loss case's inputs as reported must be the verifier's: its advantages and mask, its
    normaliser, and old and reference log-probs that are the policy's offset by its deltas."""
    given = loss_inputs()
    logps = case["logps"]
    if not isinstance(logps, torch.Tensor) or logps.dim() != 2 or logps.size(0) != ROWS:
        return [f"{name}: the policy log-probs reported are {describe(logps)}"]
    length = logps.size(1)
    mask = given["mask"][:, :length]
    deltas = given[run["deltas"]][:, :length]
    problems = []
    checks = [
        ("advantages", case["advantages"], given["advantages"]),
        ("completion mask", case["mask"], mask),
    ]
    if run["old"] is not None:
        checks.append(("old log-probs", case["old"], logps - deltas * run["old"]))
    if run["ref"] is not None:
        checks.append(("reference log-probs", case["ref"], logps + deltas.flip(0) * run["ref"]))
    for what, got, expected in checks:
        if not isinstance(got, torch.Tensor) or not same(got, expected, atol=1e-4):
            problems.append(
                f"{name}: the {what} the loss was given are not the verifier's: got "
                f"{describe(got)}, given {describe(expected)}"
            )
    items = case["num_items_in_batch"]
    if items is not None and not same(items, mask.sum()):
        problems.append(
            f"{name}: num_items_in_batch {describe(items)}, the mask holds {int(mask.sum())}"
        )
    return problems


def _batch_problems(name: str, batch: dict) -> list[str]:
    """A sampled batch must hold the job's prompts and finished and unfinished completions, so
    that its masks and log-probs say something."""
    from reference_impl.tiny import load_tiny

    _, tokenizer = load_tiny(tiny_spec())
    ids = batch["input_ids"]
    length = batch["prompt_length"]
    prompts = [tokenizer.decode(row[:length], skip_special_tokens=True).strip() for row in ids]
    wanted = [p for p in PROMPTS for _ in range(G)]
    if prompts != wanted:
        return [f"{name}: the batch's prompts are {prompts[:4]}..., not the job's {wanted[:4]}..."]
    if not batch["completion_mask"].any():
        return [f"{name}: the batch's completion mask is empty"]
    return []


# --- the rules --------------------------------------------------------------------------------------
def _fail(name: str, seen, expected) -> str:
    return f"{name}: {difference(expected, seen)}"


def _rewards(rpf: torch.Tensor, weights, conventions: dict) -> torch.Tensor:
    """The per-row rewards the release computes: before TRL 1.6.0 a row that every reward
    function left None gets the nansum's 0 and counts in its group (TRL 0.17.0
    `grpo_trainer.py` L1078); from 1.6.0 it stays NaN and drops out."""
    from reference_impl import combine_rewards

    rewards = combine_rewards(rpf, weights)
    if conventions["nan_rewards"] == "zero":
        rewards = torch.nan_to_num(rewards, nan=0.0)
    return rewards


def _judge_advantages(seen: dict, conventions: dict) -> list[str]:
    from reference_impl import compute_advantages

    problems = []
    for scale in conventions["scale_rewards"]:
        name = f"advantages.{scale}"
        rpf, advantages = seen[name]
        rpf, wrong = _rewards_given(name, rpf, "spread")
        if wrong:
            problems += wrong
            continue
        expected = compute_advantages(_rewards(rpf, None, conventions), G, scale)
        if not same(advantages, expected, atol=1e-4):
            problems.append(_fail(name, advantages, expected))
    return problems


def _judge_rewards(seen: dict, conventions: dict) -> list[str]:
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.weighted_with_none"]
    rpf, wrong = _rewards_given("rewards.weighted_with_none", rpf, "spread", "aux")
    if wrong:  # a None that did not become NaN shows here
        return wrong
    expected = compute_advantages(_rewards(rpf, [1.0, 0.5], conventions), G)
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.weighted_with_none (advantages)", advantages, expected)]
    return judge_rewards_unscorable(seen, conventions)


def judge_rewards_unscorable(seen: dict, conventions: dict) -> list[str]:
    """Rows that no reward function scored: 0 and counted (before TRL 1.6), or left out of the
    group statistics with advantage 0 (from 1.6, or a fork that intends it)."""
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.unscorable_rows"]
    rpf, wrong = _rewards_given("rewards.unscorable_rows", rpf, "aux", "aux2")
    if wrong:
        return wrong
    expected = compute_advantages(_rewards(rpf, [1.0, 0.5], conventions), G)
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.unscorable_rows (advantages)", advantages, expected)]
    return []


def judge_decode_plain(seen: dict, conventions: dict | None = None) -> list[str]:
    """A completion without reasoning tags reaches the reward function unchanged; where the fork
    intends a reasoning-aware decode (conventions "decode" = "reasoning"), closed reasoning is
    stripped to the answer too."""
    got = seen["decode.reward_inputs"]
    bad = [(DECODE_TEXTS[i], got[i]) for i in PLAIN_ROWS if got[i] != DECODE_TEXTS[i]]
    problems = [f"decode: plain answer {text!r} reached the reward as {out!r}" for text, out in bad]
    if _conventions(conventions)["decode"] == "reasoning":
        problems += _judge_reasoning_rows(seen, lambda text: "</think>" in text)
    return problems


def judge_decode_reasoning(seen: dict, conventions: dict | None = None) -> list[str]:
    """Closed reasoning is stripped to the answer; unclosed reasoning becomes ""."""
    return _judge_reasoning_rows(seen, lambda text: True)


def judge_decode_unclosed(seen: dict, conventions: dict | None = None) -> list[str]:
    """A completion whose reasoning never closed has no answer: it reaches the reward as ""."""
    return _judge_reasoning_rows(seen, lambda text: "</think>" not in text)


def _judge_reasoning_rows(seen: dict, selected) -> list[str]:
    from reference_impl import strip_reasoning

    got = seen["decode.reward_inputs"]
    problems = []
    for i, text in enumerate(DECODE_TEXTS):
        if i not in PLAIN_ROWS and selected(text) and got[i] != strip_reasoning(text):
            problems.append(
                f"decode: {text!r} reached the reward as {got[i]!r}, intended {strip_reasoning(text)!r}"
            )
    return problems


def _judge_losses(seen: dict, stage: str, conventions: dict) -> list[str]:
    from reference_impl import compute_loss

    problems = []
    if stage == "ratio":
        problems += _judge_old_logps(seen)
    for name, (case_stage, _, old, ref) in LOSS_CASES.items():
        overrides = loss_case(name, conventions)
        if case_stage != stage or overrides is None:
            continue
        case = seen[name]
        wrong = _loss_inputs_problems(name, case, {"old": old, "ref": ref, "deltas": "noise"})
        if wrong:
            problems += wrong
            continue
        advantages, mask = _given_advantages_and_mask(case)
        logps = case["logps"].clone().requires_grad_(True)
        config = {"use_bias_correction_kl": conventions["use_bias_correction_kl"]} | overrides
        kwargs = dict(
            old_per_token_logps=case["old"],
            ref_per_token_logps=case["ref"],
            loss_type=config.pop("loss_type"),
            max_completion_length=COMPLETION_LENGTH,
            num_items_in_batch=None if case["num_items_in_batch"] is None else mask.sum(),
        )
        if "epsilon_high" in config:
            kwargs["epsilon_high"] = config.pop("epsilon_high")
        kwargs.update(config)
        loss = compute_loss(logps, advantages, mask, **kwargs)
        (grad,) = torch.autograd.grad(loss, logps)
        mask = mask.bool()
        if not same(case["loss"], loss.detach(), atol=1e-5):
            problems.append(_fail(f"{name} loss", case["loss"], loss.detach()))
        elif not same(case["grad"][mask], grad[mask], atol=1e-6):
            problems.append(_fail(f"{name} dL/dlogp", case["grad"][mask], grad[mask]))
    return problems


def _given_advantages_and_mask(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier's advantages and completion mask for a loss case's batch length."""
    given = loss_inputs()
    return given["advantages"], given["mask"][:, : case["logps"].size(1)]


def _judge_old_logps(seen: dict) -> list[str]:
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    case = seen["ratio.old_logps_kept"]
    if isinstance(case["old"], dict):
        return [f"ratio: with num_iterations=2 {case['old']['error']}"]
    if not case["completion_mask"].any():
        return ["ratio: the batch's completion mask is empty"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    mask = case["completion_mask"].bool()
    with torch.no_grad():
        expected = get_per_token_logps(
            model, case["input_ids"], case["attention_mask"], mask.size(1), TEMPERATURE
        )
    if not same(case["old"][mask], expected[mask], atol=1e-4):
        return [
            _fail("ratio: old log-probs with num_iterations=2", case["old"][mask], expected[mask])
        ]
    return []


def _judge_logprobs(seen: dict) -> list[str]:
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    batch = seen["batch"]
    if wrong := _batch_problems("logprobs", batch):
        return wrong
    model, _ = load_tiny(tiny_spec())
    model.eval()
    logits_to_keep = batch["completion_ids"].size(1)
    with torch.no_grad():
        expected = get_per_token_logps(
            model, batch["input_ids"], batch["attention_mask"], logits_to_keep, TEMPERATURE
        )
    mask = batch["completion_mask"].bool()
    if not same(batch["logps"][mask], expected[mask], atol=1e-4):
        return [_fail("logprobs: per-token log-probs", batch["logps"][mask], expected[mask])]
    return []


def _judge_masking(seen: dict) -> list[str]:
    from reference_impl import completion_mask

    batch = seen["batch"]
    if wrong := _batch_problems("masking", batch):
        return wrong
    expected = completion_mask(batch["completion_ids"], batch["eos_token_ids"])
    if not same(batch["completion_mask"], expected):
        return [_fail("masking: completion_mask", batch["completion_mask"], expected)]
    return []


def _judge_reference_model(seen: dict, key: str = "reference_model.after_training") -> list[str]:
    from reference_impl.tiny import load_tiny

    case = seen[key]
    if "error" in case:
        return [f"{key}: the trainer raised {case['error']}"]
    if not same(case["probe_ids"], torch.tensor(PROBE_IDS)):
        return [f"{key}: probed on {describe(case['probe_ids'])}, not the job's {PROBE_IDS}"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    with torch.no_grad():
        initial = model(input_ids=torch.tensor(PROBE_IDS)).logits
    if same(case["policy_logits"], initial, atol=1e-4):
        return ["reference_model: the policy did not change in training, nothing to compare"]
    if not same(case["ref_logits"], initial, atol=1e-4):
        return [
            _fail("reference_model: reference logits after training", case["ref_logits"], initial)
        ]
    return []


# --- the forks' intended semantics (rules named in task.toml `probes`) ---------------------------
def _fork_loss(
    logps,
    advantages,
    mask,
    old,
    ref,
    num_items_in_batch,
    loss_type: str,
    epsilon_high: float,
    epsilon_low: float = 0.2,
    beta: float = 0.0,
    log_ratio_clamp: float | None = None,
    dual_clip_c: float | None = None,
    kl_max: float | None = None,
) -> torch.Tensor:
    """TRL 1.16's token-level clipped loss (gt:L3083-3183, one process, GA = 1) with a fork's extra
    terms: the log-ratio clamped to +-log_ratio_clamp before exp (verl), dual-clip PPO's cap
    -dual_clip_c * A on negative-advantage tokens (arXiv:1912.09729), the per-token KL capped at
    kl_max before the ratio correction (verl low_var_kl)."""
    old = logps.detach() if old is None else old
    log_ratio = logps - old
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if dual_clip_c is not None:
        per_token = torch.where(adv < 0, torch.min(per_token, -dual_clip_c * adv), per_token)
    if beta:
        kl = torch.exp(ref - logps) - (ref - logps) - 1
        if kl_max is not None:
            kl = kl.clamp(max=kl_max)
        per_token = per_token + beta * kl * ratio  # use_bias_correction_kl (gt:L3104)
    mask = mask.to(per_token.dtype)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dapo":
        return (per_token * mask).sum() / torch.as_tensor(num_items_in_batch).clamp(min=1.0)
    raise ValueError(f"_fork_loss covers grpo and dapo, not {loss_type!r}")


def _judge_fork_loss(seen: dict, name: str) -> list[str]:
    case = seen[name]
    _, _, old, ref, expected_config = FORK_CASES[name]
    run = {"old": 1.0 if old else None, "ref": 1.0 if ref else None, "deltas": "offsets"}
    wrong = _loss_inputs_problems(name, case, run)
    if wrong:
        return wrong
    advantages, mask = _given_advantages_and_mask(case)
    config = dict(expected_config)
    config.setdefault("epsilon_high", 0.2)
    logps = case["logps"].clone().requires_grad_(True)
    loss = _fork_loss(logps, advantages, mask, case["old"], case["ref"], mask.sum(), **config)
    (grad,) = torch.autograd.grad(loss, logps)
    mask = mask.bool()
    intended = ", ".join(f"{k}={v}" for k, v in expected_config.items())
    if not same(case["loss"], loss.detach(), atol=1e-5):
        return [_fail(f"{name} loss (intended: {intended})", case["loss"], loss.detach())]
    if not same(case["grad"][mask], grad[mask], atol=1e-6):
        return [_fail(f"{name} dL/dlogp (intended: {intended})", case["grad"][mask], grad[mask])]
    return []


# trl-reward-weights-clipping's fork clips each reward function's output to [-1, 1]
REWARD_CLIP = 1.0


def _judge_rewards_clipped(seen: dict, conventions: dict) -> list[str]:
    """Each function's reward clipped to +-REWARD_CLIP, then weighted and normalised per group
    (the rows no function scored as in the release: the case's rewards are inside the clip)."""
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.weighted_with_none"]
    rpf, wrong = _rewards_given("rewards.weighted_with_none", rpf, "spread", "aux")
    if wrong:
        return wrong
    clipped = rpf.clamp(-REWARD_CLIP, REWARD_CLIP)
    expected = compute_advantages(_rewards(clipped, [1.0, 0.5], conventions), G)
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.clipped (advantages)", advantages, expected)]
    return judge_rewards_unscorable(seen, conventions)


def _judge_advantages_default_batch(seen: dict) -> list[str]:
    """trl-skillsbench-trio's fork: scale_rewards defaults to "batch" (arXiv:2508.08221)."""
    from reference_impl import combine_rewards, compute_advantages

    rpf, advantages = seen["advantages.default_scale"]
    rpf, wrong = _rewards_given("advantages.default_scale", rpf, "spread")
    if wrong:
        return wrong
    expected = compute_advantages(combine_rewards(rpf, None), G, "batch")
    if not same(advantages, expected, atol=1e-4):
        return [_fail("advantages with scale_rewards left at its default", advantages, expected)]
    return []


def _judge_masking_drop_truncated(seen: dict) -> list[str]:
    """trl-never-stops' fork: mask_truncated_completions defaults to True (DAPO overlong
    filtering), so a completion cut at max_completion_length has an all-zero mask."""
    from reference_impl import completion_mask

    batch = seen["batch"]
    if wrong := _batch_problems("masking", batch):
        return wrong
    expected = completion_mask(batch["completion_ids"], batch["eos_token_ids"], True)
    if not (expected.sum(-1) == 0).any():
        return ["masking: no truncated completion in the probe batch, nothing to compare"]
    if not same(batch["completion_mask"], expected):
        return [
            _fail(
                "masking: completion_mask (truncated rows dropped)",
                batch["completion_mask"],
                expected,
            )
        ]
    return []


def _judge_masking_pad_is_eos(seen: dict) -> list[str]:
    """trl-never-stops' run, whose tokenizer pads with its EOS: each completion's mask still covers
    the tokens up to and including its first EOS (the padding after it is EOS tokens too), and a
    truncated completion is dropped (the fork's mask_truncated_completions=True default)."""
    from reference_impl import completion_mask

    case = seen["batch.pad_is_eos"]
    if "error" in case:
        return [f"masking with pad == EOS: the trainer raised {case['error']}"]
    if case["pad_token_id"] not in case["eos_token_ids"]:
        return ["masking: the probe's pad token is not the EOS, nothing to compare"]
    expected = completion_mask(case["completion_ids"], case["eos_token_ids"], True)
    if not ((expected.sum(-1) == 0).any() and (expected.sum(-1) > 0).any()):
        return ["masking: the probe batch lacks a finished or a truncated completion"]
    if not same(case["completion_mask"], expected):
        return [
            _fail(
                "masking with pad == EOS: completion_mask (truncated rows dropped)",
                case["completion_mask"],
                expected,
            )
        ]
    return []


def _judge_normalised_entropy(seen: dict) -> list[str]:
    """trl-skillsbench-trio's fork: the fused head's entropy is divided by log |V| (in [0, 1])."""
    import math

    from reference_impl.tiny import load_tiny

    batch = seen["batch"]
    if wrong := _batch_problems("logprobs", batch):
        return wrong
    model, _ = load_tiny(tiny_spec())
    model.eval()
    length = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, -(length + 1) : -1].float() / TEMPERATURE, dim=-1)
    expected = -(logp.exp() * logp).sum(-1) / math.log(logits.size(-1))
    mask = batch["completion_mask"].bool()
    got = seen["batch.entropies"]
    if not same(got[mask], expected[mask], atol=1e-4):
        return [_fail("logprobs: per-token entropy / log |V|", got[mask], expected[mask])]
    return []


def _parse_default(check: str) -> tuple[str, object]:
    import json

    field, _, text = check.removeprefix("defaults.").partition("=")
    try:
        return field, json.loads(text)
    except ValueError:
        return field, text


def judge_default(seen: dict, check: str) -> list[str]:
    """`defaults.<field>=<value>`: GRPOConfig(...) without `field` gives `value` (JSON, or a bare
    string)."""
    field, expected = _parse_default(check)
    defaults = seen["defaults"]
    if field not in defaults:
        return [f"defaults: GRPOConfig has no field {field!r} (intended default {expected!r})"]
    got = defaults[field]
    if isinstance(expected, float | int) and not isinstance(expected, bool):
        ok = (
            isinstance(got, int | float)
            and not isinstance(got, bool)
            and same(got, float(expected))
        )
    else:
        ok = got == expected
    return [] if ok else [f"defaults: GRPOConfig().{field} is {got!r}, intended {expected!r}"]


JUDGES = {
    "advantages": _judge_advantages,
    "rewards": _judge_rewards,
    "rewards_unscorable": judge_rewards_unscorable,
    "logprobs": lambda seen, conventions: _judge_logprobs(seen),
    "masking": lambda seen, conventions: _judge_masking(seen),
    "reference_model": lambda seen, conventions: _judge_reference_model(seen),
    "ratio": lambda seen, conventions: _judge_losses(seen, "ratio", conventions),
    "clipping": lambda seen, conventions: _judge_losses(seen, "clipping", conventions),
    "kl": lambda seen, conventions: _judge_losses(seen, "kl", conventions),
    "loss_aggregation": lambda seen, conventions: _judge_losses(
        seen, "loss_aggregation", conventions
    ),
    "decode": judge_decode_plain,
    "decode_reasoning": judge_decode_reasoning,
    "decode_unclosed": judge_decode_unclosed,
    # the forks' intended semantics, one rule per customised stage
    "advantages.default_batch": lambda seen, conventions: _judge_advantages_default_batch(seen),
    "rewards.clipped": _judge_rewards_clipped,
    "masking.drop_truncated": lambda seen, conventions: _judge_masking_drop_truncated(seen),
    "masking.pad_is_eos": lambda seen, conventions: _judge_masking_pad_is_eos(seen),
    "logprobs.normalised_entropy": lambda seen, conventions: _judge_normalised_entropy(seen),
    "reference_model.default_beta": lambda seen, conventions: _judge_reference_model(
        seen, "reference_model.default_beta"
    ),
    **{name: (lambda seen, conventions, n=name: _judge_fork_loss(seen, n)) for name in FORK_CASES},
}


def judge(seen: dict, check: str, conventions: dict | None = None) -> list[str]:
    """Problems found by `check` (a stage, or a decoy rule) against the fork's `conventions`
    (TRL 1.16's where absent); empty when it passes."""
    errors = [f"{k}: {v['error']}" for k, v in seen.items() if k.startswith("error.")]
    try:
        if check.startswith("defaults."):
            return judge_default(seen, check)
        return JUDGES[check](seen, _conventions(conventions)) or []
    except KeyError as missing:
        return errors or [f"{check}: no observation {missing} (the trainer crashed before it)"]
    except Exception as error:
        return [f"{check}: could not judge: {type(error).__name__}: {error}"]
