"""rlzero: a small GRPO trainer for toy verifiable-reward tasks, one module per concern.

    config.py      RunConfig, every knob with its default
    rewards.py     reward functions' outputs -> one reward per completion
    advantages.py  rewards -> group-relative advantages
    sampling.py    G completions per prompt, and which of their tokens count
    scoring.py     per-token log-probabilities of completions under a model
    objective.py   the clipped surrogate with a KL penalty, as one scalar
    learner.py     the loop: rollout -> advantages -> a few passes of updates
    toy_tasks.py, tiny.py   the experiment (prompts, reward, model); not part of the trainer

See NOTES.md for the conventions this project chose and why.
"""
