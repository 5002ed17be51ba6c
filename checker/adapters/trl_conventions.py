"""The conventions of the imported TRL release: what the checker compares its GRPOTrainer against.

Keyword defaults come from the release's own `GRPOConfig` (so bnpo, a bool scale_rewards, beta 0.04
and temperature 0.9 where the release has them); a field the release lacks is the behaviour it has
without it (no `delta`: no cap; no `importance_sampling_level`: token ratios; no
`use_bias_correction_kl`: the bare k3 term). Semantics no keyword names are declared by name and
decided by the release number (the release table, `reference_impl/trl_semantics.py`), never by
reading the code, so that a fork that changes them is still compared with its release:

| name | protocol | before |
| --- | --- | --- |
| `nan_rewards` | "excluded": a row whose reward functions all returned None stays NaN and is left out of the group statistics | 1.6.0: "zero", the row's reward is 0 and counts |
| `empty_batch_normaliser` | "clamped": dapo / cispo divide by max(num_items_in_batch, 1) | 1.9.2: "unclamped", a batch with no completion token gives 0 / 0 |
| `eos_token_ids` | "all": every id of the list ends a completion | 1.14.2: "first", the tokenizer's one EOS id |
"""

from __future__ import annotations

from typing import Any

from checker.adapters.trl_shims import RELEASE
from reference_impl.protocol import LOSS_TYPES
from reference_impl.trl_driver import bool_scale_rewards, config_defaults, config_fields
from reference_impl.trl_semantics import loss_types, value

# dapo's and cispo's num_items_in_batch counts the whole generation batch (S micro-batches); from
# 1.10.0 the normaliser is rescaled by GA / S to one accumulation window, before it is not (the
# two agree at S = GA, the default).
DAPO_WINDOW_RESCALE = value("dapo_window_rescale", RELEASE)
# The semantics no keyword names, by release (the module docstring's table).
NAMED_SEMANTICS = ("nan_rewards", "empty_batch_normaliser", "eos_token_ids")


def _scale_rewards(default: bool | str) -> str:
    """Up to 0.21 scale_rewards is a bool: True divides by the group std ("group")."""
    if isinstance(default, bool):
        return "group" if default else "none"
    return default


def conventions(config_cls: type, declared: dict[str, Any] | None = None) -> dict[str, Any]:
    """The release's keyword defaults, overlaid with the `declared` values of a user's GRPOConfig,
    and the named semantics (see the module docstring)."""
    defaults = {**config_defaults(config_cls), **(declared or {})}
    return {
        "loss_type": defaults["loss_type"],
        "scale_rewards": _scale_rewards(defaults["scale_rewards"]),
        "beta": defaults["beta"],
        "epsilon_low": defaults["epsilon"],
        "epsilon_high": defaults["epsilon_high"],
        "delta": defaults.get("delta"),
        "importance_sampling_level": defaults.get("importance_sampling_level", "token"),
        "use_bias_correction_kl": defaults.get("use_bias_correction_kl", False),
        "sapo_temperature_pos": defaults.get("sapo_temperature_pos", 1.0),
        "sapo_temperature_neg": defaults.get("sapo_temperature_neg", 1.05),
        "mask_truncated_completions": defaults["mask_truncated_completions"],
        "temperature": defaults["temperature"],
        **{name: value(name, RELEASE) for name in NAMED_SEMANTICS},
    }


def with_declared(conventions: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """`conventions` with the keyword values declared beside a subclass (YAML `config:`, the
    protocol's names) in place of its GRPOConfig's. A check passes no keyword equal to the
    candidate's declared value, so the adapter's default must be that value: `epsilon_high: 0.28`
    declared over a config that leaves it None would otherwise be driven at the 0.2 TRL resolves
    None to. The named semantics stay the release's (the candidate's config carries the rest)."""
    keywords = {k: v for k, v in declared.items() if k in conventions and k not in NAMED_SEMANTICS}
    return conventions | keywords


def supported(config_cls: type) -> dict[str, list]:
    """The values of each keyword the release can take; checks that need others are skipped."""
    have = config_fields(config_cls)
    values: dict[str, list] = {
        "loss_type": [t for t in LOSS_TYPES if t in loss_types(RELEASE)],
    }
    if bool_scale_rewards(config_cls):
        values["scale_rewards"] = ["group", "none"]
    if "delta" not in have:
        values["delta"] = [None]
    if "importance_sampling_level" not in have:
        values["importance_sampling_level"] = ["token"]
    if "use_bias_correction_kl" not in have:
        values["use_bias_correction_kl"] = [False]
    return values
