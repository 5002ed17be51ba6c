"""The verifier's short training run: the rules that tell a fixed trainer's first steps from a
buggy one's, on the log lines `train.py` prints."""

from __future__ import annotations

from task_harness.verifier.verify import _step_figures, learning_problems

RULE = {"steps": 40, "window": 10, "threshold": 0.3}


def _steps(n: int, reward: float, loss: float = 0.02, kl: float | None = None) -> list[dict]:
    row = {"reward": reward, "loss": loss} | ({} if kl is None else {"kl": kl})
    return [dict(row) for _ in range(n)]


def test_a_step_line_gives_its_figures_and_other_lines_none():
    line = "step   3  reward 0.055  loss +0.0123  length 2.00  kl 0.0011\n"
    assert _step_figures(line) == [{"reward": 0.055, "loss": 0.0123, "kl": 0.0011}]
    assert _step_figures("reached target: True after 39 steps") == []
    logged = "step   3  reward 0.055  loss +0.0123  length 2.00  entropy 2.7  grad_norm 1.2000\n"
    assert _step_figures(logged) == [{"reward": 0.055, "loss": 0.0123, "grad_norm": 1.2}]


def test_a_run_that_learns_passes_and_one_that_does_not_fails():
    assert learning_problems(_steps(40, 0.7), RULE, "") == []
    (problem,) = learning_problems(_steps(40, 0.06), RULE, "")
    assert "mean reward 0.060" in problem and "does not learn" in problem


def test_a_task_rule_on_the_loss_catches_a_run_whose_reward_still_rises():
    """A KL sign bug (figures of the retired minigrpo task ref-kl-masking): the reward rises,
    the loss goes negative."""
    rule = RULE | {"min_loss": -0.1}
    assert learning_problems(_steps(40, 0.66, loss=0.18), rule, "") == []
    (problem,) = learning_problems(_steps(40, 0.60, loss=-0.39), rule, "")
    assert "mean loss -0.390" in problem


def test_a_task_rule_on_the_kl_needs_the_kl_printed():
    rule = RULE | {"max_kl": 1.4}
    assert learning_problems(_steps(40, 0.7, kl=0.96), rule, "") == []
    assert "mean kl 1.920" in learning_problems(_steps(40, 0.7, kl=1.92), rule, "")[0]
    assert "kl missing" in learning_problems(_steps(40, 0.7), rule, "")[0]


def test_a_task_rule_on_the_kl_from_below_catches_a_reference_that_moves_with_the_policy():
    """rz-kl-anchor: the fixed run's kl is 1.9 over rollouts 31-40, the buggy one's 0.04."""
    rule = RULE | {"min_kl": 0.5, "max_kl": 3.0}
    assert learning_problems(_steps(40, 0.96, kl=1.91), rule, "") == []
    (problem,) = learning_problems(_steps(40, 0.94, kl=0.043), rule, "")
    assert "mean kl 0.043" in problem and "not at least 0.5" in problem


def test_a_run_that_reached_its_target_early_is_judged_on_what_it_printed():
    assert learning_problems(_steps(39, 0.9), RULE, "reached target", ended_early=True) == []
    (cut_short,) = learning_problems(_steps(39, 0.9), RULE, "Killed")
    assert "printed 39 step lines of the 40" in cut_short
    (too_short,) = learning_problems(_steps(5, 0.9), RULE, "reached target", ended_early=True)
    assert "printed 5 step lines" in too_short


def test_non_finite_figures_fail():
    steps = _steps(40, 0.7)
    steps[-1]["reward"] = float("nan")
    assert "not finite" in learning_problems(steps, RULE, "")[0]


# --- the trl family's gate: the first logged dicts of train_grpo.py -----------------------------
TRL_RULE = {
    "steps": 3,
    "window": 3,
    "nonzero": ["reward", "grad_norm", "clip_ratio"],
    "max_reward": 1.1,
}


def _logged(reward: float, grad_norm: float, clip: float) -> dict:
    return {"reward": reward, "loss": 0.01, "grad_norm": grad_norm, "clip_ratio": clip}


def test_a_trl_logged_dict_gives_the_gate_figures_and_the_summary_none():
    line = (
        "{'loss': 0.0123, 'grad_norm': 0.61, 'learning_rate': 0.003, 'reward': 0.25, "
        "'clip_ratio/region_mean': 0.02, 'kl': 0.0, 'epoch': 0.1}\n"
    )
    (figures,) = _step_figures(line)
    gate = {"reward": 0.25, "loss": 0.0123, "grad_norm": 0.61, "kl": 0.0, "clip_ratio": 0.02}
    assert figures == gate | {"learning_rate": 0.003, "clip_ratio/region_mean": 0.02, "epoch": 0.1}
    # transformers 5 prints each float as a string of 4 significant digits
    printed = "{'loss': '0.0123', 'grad_norm': '0.61', 'reward': '0.25', 'mode': 'train'}"
    assert _step_figures(printed) == [{"loss": 0.0123, "grad_norm": 0.61, "reward": 0.25}]
    progress = " 13%|█▎        | 20/150 [00:09<01:01,  2.11it/s]"  # stderr, merged, no newline
    assert _step_figures(progress + line) == _step_figures(line)
    assert _step_figures("{'train_runtime': 20.1, 'train_loss': 0.01}") == []
    assert _step_figures("{'loss': __import__('os').system('true')}") == []
    assert _step_figures("{'loss': " + "[" * 5000 + "]" * 5000 + "}") == []


def test_the_trl_gate_passes_a_fixed_run_and_names_each_symptom_left():
    fixed = [_logged(0.2, 0.6, 0.03), _logged(0.4, 0.7, 0.02), _logged(0.6, 0.5, 0.04)]
    assert learning_problems(fixed, TRL_RULE, "") == []
    blank = [_logged(0.0, 0.0, 0.0)] * 3  # a decode that blanks every completion
    found = learning_problems(blank, TRL_RULE, "")
    assert len(found) == 3 and all("exactly 0" in p for p in found)
    stale = [_logged(0.2, 0.6, 0.0)] * 3  # a second pass against the current policy's log-probs
    (problem,) = learning_problems(stale, TRL_RULE, "")
    assert "clip_ratio is exactly 0" in problem
    unweighted = [_logged(0.2, 0.6, 0.03), _logged(1.4, 0.6, 0.03), _logged(0.5, 0.6, 0.03)]
    (problem,) = learning_problems(unweighted, TRL_RULE, "")
    assert "above 1.1" in problem


def test_a_trl_run_that_dies_before_its_lines_fails():
    (problem,) = learning_problems([], TRL_RULE, "IndexError: list index out of range")
    assert "printed 0 step lines of the 3" in problem and "IndexError" in problem


# trl017-tempered-weights' first two logged dicts (TRL 0.17 fork, `tasks symptoms`' runs): the
# fixed trainer, and one that sums the reward functions without their weights [1.0, 0.1].
WEIGHTED_LINES = {
    "fixed": (
        "{'loss': -0.0076, 'grad_norm': 0.5409, 'rewards/answer_reward/mean': 0.11015625, "
        "'rewards/brevity_reward/mean': 0.3426432400941849, 'reward': 0.1444205716252327}",
        "{'loss': -0.0233, 'grad_norm': 0.8376, 'rewards/answer_reward/mean': 0.2125, "
        "'rewards/brevity_reward/mean': 0.3233723908662796, 'reward': 0.24483723640441896}",
    ),
    "unweighted": (
        "{'loss': -0.0008, 'grad_norm': 0.7551, 'rewards/answer_reward/mean': 0.09765625, "
        "'rewards/brevity_reward/mean': 0.39329427778720855, 'reward': 0.4909505516290665}",
        "{'loss': 0.0672, 'grad_norm': 0.9063, 'rewards/answer_reward/mean': 0.17109375, "
        "'rewards/brevity_reward/mean': 0.5975260466337204, 'reward': 0.7686198055744171}",
    ),
}
WEIGHTED_RULE = {
    "steps": 2,
    "window": 2,
    "nonzero": ["reward", "grad_norm"],
    "max_reward": 1.1,
    "weighted_reward": {"answer_reward": 1.0, "brevity_reward": 0.1},
}


def test_the_logged_reward_must_be_the_weighted_sum_of_the_functions_means():
    """Both runs pass the older rules (rewards 0.49 and 0.77 are within 1.1); only the identity
    between `reward` and the weighted `rewards/<name>/mean` tells them apart."""
    fixed = [s for line in WEIGHTED_LINES["fixed"] for s in _step_figures(line)]
    unweighted = [s for line in WEIGHTED_LINES["unweighted"] for s in _step_figures(line)]
    assert fixed[0]["rewards/brevity_reward"] == 0.3426432400941849
    assert learning_problems(fixed, WEIGHTED_RULE, "") == []
    older = {k: v for k, v in WEIGHTED_RULE.items() if k != "weighted_reward"}
    assert learning_problems(unweighted, older, "") == []
    (problem,) = learning_problems(unweighted, WEIGHTED_RULE, "")
    assert "reward 0.4910" in problem and "give 0.1370" in problem


def test_the_weighted_reward_rule_reads_the_older_key_and_needs_every_mean():
    """TRL up to 0.16 logs `rewards/<name>` without `/mean`; a line without a function's mean
    cannot show the weighting and fails."""
    line = (
        "{'loss': 0.01, 'grad_norm': 0.5, 'rewards/answer_reward': 0.5, "
        "'rewards/brevity_reward': 0.25, 'reward': 0.525}"
    )
    steps = _step_figures(line) + _step_figures(line)
    assert learning_problems(steps, WEIGHTED_RULE, "") == []
    del steps[1]["rewards/brevity_reward"]
    (problem,) = learning_problems(steps, WEIGHTED_RULE, "")
    assert "log line 2 lacks" in problem


# trl-reward-weights-clipping (TRL 1.16 fork, transformers 5): `completions/clipped_ratio` on
# log lines 3-4 (steps 21-40), fixed and with every bug, seeds 42, 1, 2, 3 (README).
CLIPPED = {"fixed": [(0.711, 0.759), (0.434, 0.259)], "every bug": [(0.031, 0.002), (0.087, 0.002)]}


def test_a_min_table_bounds_any_logged_figure_over_the_window():
    """`min = {"completions/clipped_ratio" = 0.15}`: the share of completions cut at the length
    limit, which collapses when the brevity reward counts as much as the answer."""
    rule = {"steps": 4, "window": 2, "min": {"completions/clipped_ratio": 0.15}}

    def run(lines: tuple[float, float]) -> list[dict]:
        printed = [f"{{'loss': '0.01', 'completions/clipped_ratio': '{v}'}}" for v in (0.7, 0.6)]
        printed += [f"{{'loss': '0.01', 'completions/clipped_ratio': '{v}'}}" for v in lines]
        return [s for line in printed for s in _step_figures(line)]

    for lines in CLIPPED["fixed"]:
        assert learning_problems(run(lines), rule, "") == []
    for lines in CLIPPED["every bug"]:
        (problem,) = learning_problems(run(lines), rule, "")
        assert "mean completions/clipped_ratio" in problem and "not at least 0.15" in problem


# user-long-answers' first 2 logged dicts (train_grpo.py, seed 42): its oracle and every bug, as
# transformers printed them (measured; the task's spec records the other seeds).
LONG_ANSWERS = {
    "fixed": [
        "{'loss': '0.002245', 'grad_norm': '0.04771', 'reward': '0.1171', 'kl': '0.0841'}",
        "{'loss': '-0.004215', 'grad_norm': '0.05773', 'reward': '0.1295', 'kl': '0.1642'}",
    ],
    "every bug": [
        "{'loss': '0.008128', 'grad_norm': '0.1179', 'reward': '0.1141', 'kl': '0.02127'}",
        "{'loss': '0.003458', 'grad_norm': '0.04175', 'reward': '0.1057', 'kl': '0.08904'}",
    ],
}


def test_user_long_answers_gate_passes_its_oracle_and_fails_its_bugs():
    """The task's own rule (build.learning_rule): only the KL floor tells the run whose overlong
    filter counts almost nothing from the fixed one; reward and grad_norm are alike."""
    from task_harness.build import learning_rule
    from task_harness.spec import load_tasks

    (spec,) = load_tasks(ids=["user-long-answers"])
    rule = learning_rule(spec)

    def run(lines: list[str]) -> list[dict]:
        return [s for line in lines for s in _step_figures(line)]

    assert learning_problems(run(LONG_ANSWERS["fixed"]), rule, "") == []
    (problem,) = learning_problems(run(LONG_ANSWERS["every bug"]), rule, "")
    assert "mean kl 0.055" in problem and "not at least 0.11" in problem
