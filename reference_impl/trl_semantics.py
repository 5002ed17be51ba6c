"""What TRL's GRPOTrainer does differently from one release to the next (0.17 to 1.16): one table.

Every part of grpo-skill that drives or judges a TRL release reads it here: the checker's `trl`
kind (`checker/adapters/trl_conventions.py`), the task harness (`task_harness/releases.py`: what a
fork's release needs installed; `task_harness/build.py`: the semantics a fork is judged against)
and the task verifier (`trl_judge.py`, shipped with this package inside a task's `tests/`).
`trl_driver.py` beside it drives the release's GRPOTrainer where its methods differ.

Plain Python, no import of TRL: the verifier and the harness decide by the release number a fork
states, without importing the fork. Each row is one change, with the release that made it and
where it shows in that release's `trl/trainer/grpo_config.py` or `grpo_trainer.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, ...]


@dataclass(frozen=True)
class Change:
    """`name` is `before` up to the release preceding `since`, `after` from `since` on."""

    name: str
    since: Release
    before: object
    after: object
    where: str


CHANGES = (
    Change("temperature", (0, 18, 2), 0.9, 1.0, "GRPOConfig.temperature default"),
    Change("delta", (0, 18, 2), False, True, "GRPOConfig.delta (the two-sided ratio cap) exists"),
    Change(
        "old_logps_need_iterations",
        (0, 19, 0),
        True,
        False,
        "0.17-0.18 `_compute_loss` reads old_per_token_logps only when num_iterations > 1",
    ),
    Change("beta", (0, 19, 1), 0.04, 0.0, "GRPOConfig.beta default"),
    Change(
        "importance_sampling_level",
        (0, 20, 0),
        False,
        True,
        "GRPOConfig.importance_sampling_level (GSPO's sequence ratio) exists",
    ),
    Change("loss_type", (0, 22, 2), "bnpo", "dapo", "GRPOConfig.loss_type default"),
    Change(
        "scale_rewards",
        (0, 22, 2),
        ["group", "none"],
        ["group", "batch", "none"],
        "GRPOConfig.scale_rewards is a bool before (True: the group std)",
    ),
    Change(
        "bias_correction_field",
        (0, 26, 2),
        False,
        True,
        "GRPOConfig.use_bias_correction_kl exists (before: the bare k3 term)",
    ),
    Change(
        "nan_rewards",
        (1, 6, 0),
        "zero",
        "excluded",
        "a row every reward function left None: 0 counted in its group, then NaN left out",
    ),
    Change(
        "empty_batch_normaliser",
        (1, 9, 2),
        "unclamped",
        "clamped",
        "dapo / cispo divide by num_items_in_batch, then by max(num_items_in_batch, 1)",
    ),
    Change(
        "dapo_window_rescale",
        (1, 10, 0),
        False,
        True,
        "dapo's num_items_in_batch rescaled by GA / S to one accumulation window (PR #6024)",
    ),
    Change(
        "use_bias_correction_kl",
        (1, 10, 0),
        False,
        True,
        "GRPOConfig.use_bias_correction_kl default",
    ),
    Change(
        "eos_token_ids",
        (1, 14, 2),
        "first",
        "all",
        "a list of EOS ids (`self.eos_token_ids`), before the tokenizer's one `eos_token_id`",
    ),
)

# The release each `loss_type` value first appears in.
LOSS_TYPE_SINCE: dict[str, Release] = {
    "grpo": (0, 17),
    "bnpo": (0, 17),
    "dr_grpo": (0, 17),
    "dapo": (0, 22, 2),
    "cispo": (0, 26, 2),
    "sapo": (0, 26, 2),
}

# The releases whose GRPOTrainer grpo-check drives (every patch release of each minor), and those
# that need triton to train (1.15's GRPOTrainer imports its kernels unconditionally; a CPU torch has
# no triton). (first minor, last minor)
SUPPORTED_MINORS: tuple[Release, Release] = ((0, 17), (1, 16))
TRITON_MINORS: tuple[Release, Release] = ((1, 15), (1, 15))
# What a release needs beside it to import: TRL 0.17-0.26 import only with transformers 4 (in
# transformers 5 `_is_package_available("vllm")` is a tuple, always true, 0.17.0
# `trl/import_utils.py`); 0.29-1.8 import `requests` without declaring it (1.8.0
# `trl/trainer/utils.py`). (first minor, last minor)
TRANSFORMERS4_MINORS: tuple[Release, Release] = ((0, 17), (0, 26))
UNDECLARED_REQUESTS_MINORS: tuple[Release, Release] = ((0, 29), (1, 8))

# The GRPOConfig fields whose values are conventions the checks compare against (a user's
# GRPOConfig sets them); every other field is how a run is executed.
CONVENTION_FIELDS = (
    "loss_type",
    "scale_rewards",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "importance_sampling_level",
    "use_bias_correction_kl",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "mask_truncated_completions",
    "temperature",
)


def parse(version: str) -> Release:
    """`"0.22.2"` -> (0, 22, 2); a local or pre-release suffix is ignored (`1.16.0.dev0` -> (1, 16, 0))."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def value(name: str, release: Release) -> object:
    """The value of CHANGES' `name` in `release`."""
    change = next(c for c in CHANGES if c.name == name)
    return change.after if release >= change.since else change.before


def loss_types(release: Release) -> list[str]:
    """The `loss_type` values `release` takes, in LOSS_TYPE_SINCE's order."""
    return [name for name, since in LOSS_TYPE_SINCE.items() if release >= since]


def semantics(version: str) -> dict:
    """Every row of CHANGES at release `version`, its loss types, and the decode rule (plain: no
    release strips reasoning from completions): what the verifier judges a fork of that release
    against (a task's `[grpo.intended]` overrides them with the fork's own customisations)."""
    release = parse(version)
    return {
        "release": version,
        **{change.name: value(change.name, release) for change in CHANGES},
        "loss_types": loss_types(release),
        "decode": "plain",
    }


def _minor_in(version: str, minors: tuple[Release, Release]) -> bool:
    return minors[0] <= parse(version)[:2] <= minors[1]


def supported(version: str) -> bool:
    """True for the releases grpo-check drives (SUPPORTED_MINORS)."""
    return _minor_in(version, SUPPORTED_MINORS)


def needs_triton(version: str) -> bool:
    """True for the releases (1.15) whose GRPOTrainer cannot train without triton."""
    return _minor_in(version, TRITON_MINORS)


def needs_transformers4(version: str) -> bool:
    """True for the releases (0.17 to 0.26) that only import with transformers 4."""
    return _minor_in(version, TRANSFORMERS4_MINORS)


def imports_undeclared_requests(version: str) -> bool:
    """True for the releases (0.29 to 1.8) that import `requests` without declaring it."""
    return _minor_in(version, UNDECLARED_REQUESTS_MINORS)
