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
    assert _step_figures(line) == [
        {"reward": 0.25, "loss": 0.0123, "grad_norm": 0.61, "kl": 0.0, "clip_ratio": 0.02}
    ]
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
