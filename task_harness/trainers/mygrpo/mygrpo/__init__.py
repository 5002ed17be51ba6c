"""Our GRPO setup on top of TRL: the trainer, its config, the rewards and the data."""
