"""Each rlzero task's own conventions: the choices its intended trainer makes where GRPO trainers
legitimately differ, drawn per task so that one task's fixed trainer does not solve another.

All rlzero tasks start from one pristine trainer (`task_harness/trainers/rlzero/`). Were that
trainer every task's intended one, any task's oracle would be every task's answer (trials that
can reach each other could share it). So each task states, in its NOTES.md and as `setup`
patches applied to both its workspace and its intended trainer, its own:

- `adv_eps`, the epsilon added to the group std (GRPO, arXiv:2402.03300, eq. 3);
- `std`, the group std's estimator: "population" (divide by n) or "sample" (by n - 1, as
  `torch.std` does by default and TRL's `nanstd` does);
- `clip_low`, `clip_high`, the trust region (DAPO's clip-higher, arXiv:2503.14476, when
  clip_high > clip_low; always asymmetric here, so the `asymmetric_band` decoy keeps meaning);
- `loss_normaliser`: "rows x max_new_tokens" (Dr. GRPO, arXiv:2503.20783, a constant; rlzero's
  `loss_type` "dr_grpo") or "tokens" (DAPO's token-level mean over the batch's counted tokens;
  `loss_type` "dapo").

The verifier judges a task's stages against its intended trainer, so a sibling's trainer fails
every stage whose probes see one of these (advantages, clipping, ratio, update, kl,
reference_model, loss_aggregation); tests/test_tasks_conventions.py measures the swap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PRISTINE_EPS = 1e-6
EPSILONS = (1e-6, 1e-5, 1e-4, 1e-3)
BANDS = ((0.2, 0.28), (0.2, 0.3), (0.15, 0.25), (0.15, 0.3), (0.1, 0.2), (0.1, 0.3), (0.25, 0.35))
NORMALISERS = ("rows x max_new_tokens", "tokens")
STDS = ("population", "sample")
# What a decoy checks fixes a convention: its probes must keep meaning what its name says.
DECOY_NEEDS = {
    "population_std": {"std": "population"},
    "length_independent_loss": {"loss_normaliser": "rows x max_new_tokens"},
}


# What NOTES.md says of everything the conventions leave out: the verifier's probes hold rlzero to
# reference_impl (TRL 1.16's GRPOTrainer) there, so an agent is told so rather than left to guess
# whether a behaviour its docstring calls deliberate is a convention too.
BEYOND_CONVENTIONS = (
    "These are all of them: everywhere else its GRPO computations (rewards, advantages, "
    "log-probs, masks, ratio, clipping, KL, loss, gradient accumulation) are meant to match TRL "
    "1.16's GRPOTrainer for the same settings."
)
# Where the pristine trainer departs from TRL 1.16's defaults in every rz task, stated beside the
# drawn conventions (trainers/rlzero_protocol.yaml declares the same to grpo-check): the
# batch-wide advantage scale divides by n (TRL's scale_rewards="batch" by n - 1), and the KL is
# plain k3 (TRL multiplies it by the ratio unless use_bias_correction_kl=False).
PRISTINE_DEPARTURES = (
    'the population std for advantage_estimator "batch", the KL as plain k3 (not multiplied by '
    "the ratio: TRL's use_bias_correction_kl=False)"
)


@dataclass(frozen=True)
class Conventions:
    adv_eps: float = PRISTINE_EPS
    std: str = "population"
    clip_low: float = 0.2
    clip_high: float = 0.28
    loss_normaliser: str = "rows x max_new_tokens"

    def notes(self) -> str:
        """The sentence of NOTES.md that states them, in the user's words."""
        std = {
            "population": "population std (divide by n)",
            "sample": "sample std (divide by n - 1)",
        }[self.std]
        loss = {
            "rows x max_new_tokens": "a loss normalised by rows x max_new_tokens",
            "tokens": "a loss normalised by the number of counted tokens in the batch",
        }[self.loss_normaliser]
        return (
            "rlzero is our own small GRPO trainer (see its package docstring for the layout). "
            f"Its conventions are deliberate: {std} for the group advantages with "
            f"adv_eps {_number(self.adv_eps)}, {PRISTINE_DEPARTURES}, an asymmetric trust region (clip_low {self.clip_low:g}, "
            f"clip_high {self.clip_high:g}), and {loss}. {BEYOND_CONVENTIONS}"
        )


def draw(rng: random.Random, decoy: str | None = None) -> Conventions:
    """Conventions drawn with `rng`, keeping what `decoy` checks."""
    clip_low, clip_high = rng.choice(BANDS)
    drawn = {
        "adv_eps": rng.choice(EPSILONS),
        "std": rng.choice(STDS),
        "clip_low": clip_low,
        "clip_high": clip_high,
        "loss_normaliser": rng.choice(NORMALISERS),
    }
    return Conventions(**(drawn | DECOY_NEEDS.get(decoy or "", {})))


def _number(value: float) -> str:
    """`value` as Python source, small ones as `1e-4`."""
    return f"{value:.0e}".replace("e-0", "e-") if value < 1e-2 else repr(value)


def _patch(id_: str, file: str, find: str, replace: str) -> dict:
    return {"id": id_, "kind": "setup", "file": file, "find": find, "replace": replace}


def setup_patches(c: Conventions) -> list[dict]:
    """The `setup` patches (patches.yaml entries) that give the pristine rlzero conventions `c`;
    none where `c` keeps the pristine choice."""
    patches = []
    if c.adv_eps != PRISTINE_EPS:
        patches.append(
            _patch(
                "convention_adv_eps",
                "rlzero/config.py",
                "    adv_eps: float = 1e-6\n",
                f"    adv_eps: float = {_number(c.adv_eps)}\n",
            )
        )
        patches.append(
            _patch(
                "convention_adv_eps_default",
                "rlzero/advantages.py",
                "group_size: int, eps: float = 1e-6)",
                f"group_size: int, eps: float = {_number(c.adv_eps)})",
            )
        )
    if c.std == "sample":
        patches.append(
            _patch(
                "convention_sample_std",
                "rlzero/advantages.py",
                "    std = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()\n",
                "    std = (centred.pow(2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()\n",
            )
        )
        patches.append(
            _patch(
                "convention_sample_std_doc",
                "rlzero/advantages.py",
                "    std_g is the population std (divide by n, as `numpy.std` does): the group is all "
                "the samples\n    of that prompt there are, not a sample of a larger population.",
                "    std_g is the sample std (divide by n - 1, as `torch.std` does): the group is a "
                "sample of the\n    completions the policy could give that prompt.",
            )
        )
    if (c.clip_low, c.clip_high) != (0.2, 0.28):
        patches.append(
            _patch(
                "convention_clip_band",
                "rlzero/config.py",
                "    clip_low: float = 0.2\n",
                f"    clip_low: float = {c.clip_low!r}\n",
            )
        )
        patches.append(
            _patch(
                "convention_clip_high",
                "rlzero/config.py",
                "    clip_high: float = 0.28\n",
                f"    clip_high: float = {c.clip_high!r}\n",
            )
        )
    if c.loss_normaliser == "tokens":
        patches.append(
            _patch(
                "convention_loss_type",
                "rlzero/config.py",
                '    loss_type: str = "dr_grpo"\n',
                '    loss_type: str = "dapo"\n',
            )
        )
        patches.append(
            _patch(
                "convention_loss_type_default",
                "rlzero/objective.py",
                '    loss_type: str = "dr_grpo",\n',
                '    loss_type: str = "dapo",\n',
            )
        )
    return patches
