"""What a training run's log shows (task_harness/symptoms.py): rlzero's rollout lines and TRL's
logged dicts parsed, a visible departure from the fixed run named, and put in a user's words."""

from __future__ import annotations

import math

from test_tasks_spec import MECHANISM_WORDS

from task_harness import symptoms


def _log(rewards, ratio=None, kl=None, loss=0.01) -> str:
    lines = []
    for i, reward in enumerate(rewards, 1):
        extra = "" if ratio is None else f"  ratio_max {ratio:.4f}"
        extra += "" if kl is None else f"  kl {kl:.4f}"
        lines.append(f"step {i:3d}  reward {reward:.3f}  loss {loss:+.4f}  length 2.00{extra}")
    return "\n".join(lines)


FIXED = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.0), "", 0)


def test_a_log_is_parsed_with_its_extra_columns_and_its_crash():
    run = symptoms.parse(
        _log([0.5, 0.7], ratio=1.2, kl=0.3, loss=float("nan")),
        "Traceback (most recent call last):\n  ...\nRuntimeError: probability tensor contains nan\n",
        1,
    )
    assert [s["reward"] for s in run.steps] == [0.5, 0.7]
    assert run.steps[0]["ratio_max"] == 1.2 and run.steps[1]["kl"] == 0.3
    assert run.nan_loss and run.crash == "RuntimeError: probability tensor contains nan"
    assert symptoms.parse(_log([0.5]), "", -9).crash == ""  # cut by us, not a crash


def test_a_run_like_the_fixed_one_shows_nothing_and_each_symptom_is_seen():
    assert symptoms.differences(FIXED, FIXED, 0.9) == []
    flat = symptoms.parse(_log([0.1] * 50, ratio=1.0), "", -9)
    assert {"reward", "target"} <= set(symptoms.differences(flat, FIXED, 0.9))
    off_policy = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.28), "", 0)
    assert symptoms.differences(off_policy, FIXED, 0.9) == ["ratio_max"]
    crashed = symptoms.parse(_log([0.1], loss=math.nan), "RuntimeError: boom", 1)
    assert {"crash", "nan"} <= set(symptoms.differences(crashed, FIXED, 0.9))


def test_the_description_reports_outcomes_in_a_users_words():
    flat = symptoms.parse(_log([0.1] * 50, ratio=1.3, kl=0.02), "", -9)
    fixed = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.0, kl=0.5), "", 0)
    text = " ".join(symptoms.describe(flat, fixed, 0.9))
    assert (
        "by rollout 29" in text
    )  # 0.6 + 9 x 0.95 over rollouts 20-29 and "between 0.100 and 0.100" in text
    assert "`ratio_max`" in text and "`kl` averages 0.020" in text
    assert not MECHANISM_WORDS.findall(text)


def test_a_trl_log_is_parsed_per_logged_line_and_its_crash_is_the_exception_line():
    log = "\n".join(
        [
            "{'loss': 0.0012, 'grad_norm': 0.51, 'reward': 0.12, 'kl': 0.003, "
            "'completions/mean_length': 3.5, 'epoch': 0.1}",
            "{'loss': '0.0021', 'grad_norm': '0.9', 'reward': '0.4', 'kl': '0.02', "
            "'completions/mean_length': '2.5', 'epoch': 0.2}",
            "{'train_runtime': 12.0, 'train_loss': 0.001}",
        ]
    )
    stderr = (
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "IndexError: list index out of range\n  0%|          | 0/150 [00:01<?, ?it/s]\n"
    )
    run = symptoms.parse(log, stderr, 1)
    assert run.block_size == 1 and [s["reward"] for s in run.steps] == [0.12, 0.4]
    assert run.steps[1]["length"] == 2.5 and run.steps[0]["grad_norm"] == 0.51
    assert run.crash == "IndexError: list index out of range"
    flat = symptoms.parse(log.replace("0.4", "0.12").replace("'0.9'", "'0.001'"), "", 0)
    assert "grad_norm 0.001-0.510 vs 0.510-0.900" in symptoms.summary(flat, run, 0.9)
    assert symptoms.summary(run, run, 0.9) == "no visible difference"
