"""rlzero: a small GRPO trainer for toy verifiable-reward tasks, one module per concern.

    config.py      RunConfig, every knob with its default, checked when built
    cli.py         `python -m rlzero --option value`: a RunConfig from the command line
    data.py        the dataset -> each rollout's prompts (shuffled passes), the group layout
    sampling.py    G completions per prompt, and which of their tokens count
    rewards.py     reward functions' outputs -> one reward per completion
    shaping.py     DAPO's soft overlong punishment, added to the rewards
    advantages.py  rewards -> advantages (group-relative, batch-scaled, mean-only, leave-one-out)
    scoring.py     per-token log-probabilities (and entropies) of completions under a model
    objective.py   the clipped surrogate with a KL penalty, aggregated as one of four loss types
    reference.py   the reference policy: a frozen copy, optionally synced towards the policy
    learner.py     the loop: rollout -> advantages -> passes of (accumulated) optimizer steps
    evaluation.py  greedy answers to a set of prompts, scored
    metrics.py     what a step logs, gathered over micro-batches; a JSON-lines log file
    checkpoint.py  save and resume a run; export the trained policy
    toy_tasks.py, tiny.py   the experiment (prompts, reward, model); not part of the trainer

See NOTES.md for the conventions this project chose and why.
"""
