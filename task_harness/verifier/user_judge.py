"""The verifier's side of the `user` family: the job a child runs (`user_probes.py`) and the
comparison of what it reports with what the task's intended code computes.

Every input is made here, from a seed drawn per run: the reward columns and weights, the texts
the reward functions score, the advantages' rewards, the loss cases' log-probs, masks,
advantages and old and reference log-probs. The child feeds them to the workspace's trainer
through grpo-check's subclass driver and reports what it passed with what came back; the same
job runs on the intended code (`tests/expected/`, a process of the verifier's own). A report
whose inputs are not the job's fails before anything is compared. Nothing reads source text.
"""

from __future__ import annotations

import plain
import torch
from judge import difference, same

G = 4
PROMPTS = 3
ROWS = G * PROMPTS
LENGTH = 5
# Long rows for the ratio: a chain of thought of 3,584 to 4,096 tokens whose old log-probs drift
# 0.03 nats per token, up or down by row. Each row's mean log-ratio keeps its ratio near 1 (0.97,
# 1.03); its sum, 107 to 123 either way, is past float32's exp range (inf above 88.7, 0 below -103.9).
LONG = 4096
DRIFT = 0.03
WORDS = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "=", "+"]


def _mask(generator: torch.Generator) -> torch.Tensor:
    """A ragged completion mask: each row's first 1 to LENGTH tokens."""
    lengths = torch.randint(1, LENGTH + 1, (ROWS,), generator=generator)
    lengths[0] = LENGTH
    return (torch.arange(LENGTH) < lengths[:, None]).long()


def _logps(generator: torch.Generator) -> torch.Tensor:
    return -(0.1 + 2.5 * torch.rand(ROWS, LENGTH, generator=generator))


def _advantages(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(ROWS, generator=generator)


def _offsets(generator: torch.Generator, scale: float) -> torch.Tensor:
    return scale * torch.randn(ROWS, LENGTH, generator=generator)


def _reward_cases(generator: torch.Generator, functions: list[str]) -> list[dict]:
    answer = (torch.rand(ROWS, generator=generator) < 0.5).float()
    style = torch.rand(ROWS, generator=generator)
    style[3] = float("nan")  # a style reward that could not score a row
    columns = torch.stack([answer, style], dim=1)
    cases = [
        {
            "name": f"rewards.combined_{i}",
            "stage": "rewards",
            "call": "combine_rewards",
            "inputs": {"rewards_per_func": columns, "reward_weights": weights},
        }
        for i, weights in enumerate(([1.0, 0.1], [0.5, 2.0]))
    ]
    words = torch.randint(0, len(WORDS), (ROWS, LENGTH), generator=generator).tolist()
    sizes = torch.randint(0, LENGTH, (ROWS,), generator=generator).tolist()
    completions = [" ".join(WORDS[w] for w in row[:n]) for row, n in zip(words, sizes, strict=True)]
    ids = [row[:n] + [99] for row, n in zip(words, sizes, strict=True)]
    prompts = [f"{d} =" for d in range(ROWS)]
    answers = [WORDS[row[0]] if i % 2 else str(i % 10) for i, row in enumerate(words)]
    for function in functions:
        cases.append(
            {
                "name": f"rewards.function.{function.partition(':')[2]}",
                "stage": "rewards",
                "call": "reward_function",
                "function": function,
                "inputs": {
                    "prompts": prompts,
                    "completions": completions,
                    "answer": answers,
                    "completion_ids": ids,
                },
            }
        )
    return cases


def _advantage_cases(generator: torch.Generator) -> list[dict]:
    levels = torch.tensor([0.0, 2.0, 5.0]).repeat_interleave(G)
    spread = levels + torch.rand(ROWS, generator=generator)
    equal = spread.clone()
    equal[G : 2 * G] = 1.0  # one group whose rewards are all equal
    return [
        {
            "name": f"advantages.{name}",
            "stage": "advantages",
            "call": "compute_advantages",
            "inputs": {"rewards": rewards, "num_generations": groups},
        }
        for name, rewards, groups in (
            ("spread", spread, G),
            ("equal_group", equal, G),
            ("pairs", spread, 2),
        )
    ]


def _masking_cases(generator: torch.Generator) -> list[dict]:
    """Completions as `generate` returns them (the tiny vocabulary: EOS is id 1, words 3-16):
    rows that stop at each position, and rows that never stop."""
    ids = torch.randint(3, 17, (ROWS, LENGTH), generator=generator)
    stops = torch.randint(0, LENGTH + 2, (ROWS,), generator=generator)
    stops[:3] = torch.tensor([0, LENGTH - 1, LENGTH])
    for row, stop in enumerate(stops.tolist()):
        if stop < LENGTH:
            ids[row, stop] = 1
    return [
        {
            "name": f"masking.{name}",
            "stage": "masking",
            "call": "completion_mask",
            "inputs": {"completion_ids": ids, "eos_token_ids": [1], **extra},
        }
        for name, extra in (
            ("default", {}),
            ("truncation_flag", {"mask_truncated_completions": True}),
        )
    ]


def _reference_cases(generator: torch.Generator) -> list[dict]:
    """Training steps with a reference model: prompts `d =` (ids 3-12, then `=` 13), sampled
    completions ending in EOS (id 1) at various lengths, rewards per completion."""
    digits = torch.randint(3, 13, (PROMPTS,), generator=generator).repeat_interleave(G)
    prompt_ids = torch.stack([digits, torch.full_like(digits, 13)], dim=1)
    completion_ids = torch.randint(3, 17, (ROWS, LENGTH), generator=generator)
    stops = torch.randint(1, LENGTH, (ROWS,), generator=generator)
    completion_ids[torch.arange(ROWS), stops] = 1
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "rewards": torch.rand(ROWS, generator=generator),
        "num_generations": G,
        "eos_token_ids": [1],
        "probe_ids": torch.randint(3, 17, (2, 6), generator=generator),
        # Each update moves the policy by this drift per parameter (standard normal draws from
        # the seed), in place of the loss's gradient: the policy the reference is synced from is
        # then the same whatever the other stages compute (user_probes._reference_sync).
        "drift": 0.01,
        "drift_seed": int(torch.randint(0, 2**31 - 1, (1,), generator=generator)),
        # Non-zero, so the reference is scored and synced as in training.
        "beta": 0.04,
    }
    return [
        {
            "name": "reference_model.sync",
            "stage": "reference_model",
            "call": "reference_sync",
            "inputs": inputs,
        },
        # A soft sync at another mix than the default: mixed the wrong way round with its
        # default moved to 1 - alpha, a trainer matches the first case but not this one.
        {
            "name": "reference_model.mix_quarter",
            "stage": "reference_model",
            "call": "reference_sync",
            "inputs": inputs,
            "args": {"ref_sync_alpha": 0.25},
        },
    ]


def _long_rows(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs, mask and old log-probs of ROWS rows of LONG * 7 / 8 to LONG tokens (see LONG)."""
    logps = -(0.1 + 2.5 * torch.rand(ROWS, LONG, generator=generator))
    lengths = torch.randint(LONG * 7 // 8, LONG + 1, (ROWS,), generator=generator)
    mask = (torch.arange(LONG) < lengths[:, None]).long()
    direction = torch.where(torch.arange(ROWS) % 2 == 0, 1.0, -1.0)[:, None]
    old = logps - direction * DRIFT + 0.01 * torch.randn(ROWS, LONG, generator=generator)
    return logps, mask, old


def _loss_case(stage: str, name: str, generator: torch.Generator, **settings) -> dict:
    if settings.pop("long", False):
        logps, mask, old_logps = _long_rows(generator)
    else:
        logps, mask, old_logps = _logps(generator), _mask(generator), None
    inputs = {
        "per_token_logps": logps,
        "advantages": _advantages(generator),
        "completion_mask": mask,
    }
    if old_logps is not None:
        inputs["old_per_token_logps"] = old_logps
    if settings.pop("filtered_row", False):  # a row left out of the loss (all-zero mask)
        inputs["completion_mask"][-1] = 0
    if settings.pop("negative", False):  # every advantage below 0
        inputs["advantages"] = -inputs["advantages"].abs()
    args = settings.pop("args", None)
    old, ref = settings.pop("old", None), settings.pop("ref", None)
    if old is not None:
        inputs["old_per_token_logps"] = logps + _offsets(generator, old)
    if ref is not None:
        inputs["ref_per_token_logps"] = logps + _offsets(generator, ref)
    case = {
        "name": f"{stage}.{name}",
        "stage": stage,
        "call": "compute_loss",
        "inputs": inputs | settings,
    }
    if args is not None:
        case["args"] = args
    return case


def _loss_cases(generator: torch.Generator, stages: set[str]) -> list[dict]:
    """Loss cases per stage, each run where the other stages' conventions do not change it:
    ratio, clipping and kl on one micro-batch (gradient_accumulation_steps = 1), ratio and
    clipping without the KL term, kl with given old log-probs, loss_aggregation with given old
    log-probs and no KL term: the driver's two accumulated micro-batches, completions padded to
    less than `max_completion_length` (TRL pads to the batch's longest), one micro-step of a
    window of 4."""
    one = {"gradient_accumulation_steps": 1}
    cases = []
    if "ratio" in stages:
        cases += [
            _loss_case("ratio", "on_policy", generator, beta=0.0, **one),
            _loss_case("ratio", "second_pass", generator, beta=0.0, old=0.05, **one),
            _loss_case("ratio", "long_rows", generator, beta=0.0, long=True, **one),
        ]
    if "clipping" in stages:
        cases.append(_loss_case("clipping", "far", generator, beta=0.0, old=0.6, **one))
        # Negative advantages far off policy, with a dual clip (`dual_clip`, Ye et al.'s c) of
        # 1.1 where a trainer has one: ratios between c and 1 + c tell the two caps apart.
        cases.append(
            _loss_case(
                "clipping",
                "dual_clip",
                generator,
                beta=0.0,
                old=0.6,
                negative=True,
                args={"dual_clip": 1.1},
                **one,
            )
        )
    if "kl" in stages:
        cases += [
            _loss_case("kl", f"beta_{beta}", generator, beta=beta, old=0.0, ref=0.4, **one)
            for beta in (0.04, 0.2)
        ]
    if "loss_aggregation" in stages:
        cases += [
            _loss_case("loss_aggregation", "accumulated", generator, beta=0.0, old=0.05),
            _loss_case(
                "loss_aggregation", "filtered_row", generator, beta=0.0, old=0.05, filtered_row=True
            ),
            _loss_case(
                "loss_aggregation",
                "below_the_limit",
                generator,
                beta=0.0,
                old=0.05,
                max_completion_length=LENGTH + 3,
                **one,
            ),
            _loss_case(
                "loss_aggregation",
                "window",
                generator,
                beta=0.0,
                old=0.05,
                gradient_accumulation_steps=4,
            ),
        ]
    return cases


def make_job(stages: list[str], trainer: dict, seed: int) -> dict:
    """The child's job: the workspace's trainer, config and reward functions (`trainer`, from
    task.json) and every case of `stages` with its inputs, drawn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    wanted = set(stages)
    cases = []
    if "rewards" in wanted:
        cases += _reward_cases(generator, trainer.get("reward_functions", []))
    if "advantages" in wanted:
        cases += _advantage_cases(generator)
    if "masking" in wanted:
        cases += _masking_cases(generator)
    if "reference_model" in wanted:
        cases += _reference_cases(generator)
    cases += _loss_cases(generator, wanted)
    for case in cases:
        case["inputs"] = {name: plain.encode(value) for name, value in case["inputs"].items()}
    return {
        "trainer": trainer["class"],
        "config_class": trainer["config_class"],
        "config_values": trainer.get("config_values"),
        "cases": cases,
    }


def judge(job: dict, seen: dict, intended: dict) -> dict[str, list[str]]:
    """{stage: problems}: each case's reported inputs must be the job's, and its output what
    the intended code gave for them."""
    problems: dict[str, list[str]] = {}
    for case in job["cases"]:
        found = problems.setdefault(case["stage"], [])
        name = case["name"]
        got = seen.get(name)
        expected = intended.get(name, {}).get("output", {"error": "the intended code did not run"})
        given = {k: plain.decode(v) for k, v in case["inputs"].items()}
        if not isinstance(got, dict) or "output" not in got:
            found.append(f"{name}: not observed")
        elif not same(got.get("inputs"), given):
            found.append(f"{name}: the trainer reported inputs other than the verifier's")
        elif not same(got["output"], expected):
            found.append(f"{name}: {difference(expected, got['output'])}")
    return problems
