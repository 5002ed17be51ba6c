"""The settings of our GRPO runs."""

from dataclasses import dataclass, field

from trl import GRPOConfig


@dataclass
class TeamConfig(GRPOConfig):
    """TRL's GRPOConfig with the fields our trainer adds."""

    style_gate: bool = field(
        default=True,
        metadata={"help": "Count the style rewards only for completions whose answer is right."},
    )


# What every run of ours sets, on top of the script's batch and schedule.
TRAINING = dict(
    beta=0.04,
    epsilon=0.2,
    epsilon_high=0.28,
    temperature=1.0,
    reward_weights=[1.0, 0.1],
)
