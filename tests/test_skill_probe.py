"""`skills/grpo/scripts/grpo_probe.py`: passes on stock TRL, finds the SkillsBench trio on a fork.

The fork is built like SkillsBench's `debug-trl-grpo` task: a copy of the TRL 0.17.0 release
with three planted bugs (a sign flip in the fp32 branch of `selective_log_softmax`, `std + 1e4`
in the advantage normalisation, and a reasoning-aware `decode_and_strip_padding` that blanks
plain answers). The probe runs as a child process, the way an agent would run it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skillsbench_fork import patch
from skillsbench_fork import skillsbench_fork as build_skillsbench_fork
from trl_releases import import_environment, transformers4_path, trl_release_path

PROBE = Path(__file__).resolve().parents[1] / "skills" / "grpo" / "scripts" / "grpo_probe.py"


def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PROBE), *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=300,
        cwd=PROBE.parent,  # not the repository: nothing of the project may be importable
    )


def lines_with(output: str, status: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(status)]


@pytest.fixture(scope="module")
def skillsbench_fork(tmp_path_factory) -> Path:
    """A vendored TRL 0.17.0 checkout (`<root>/trl/trainer/...`) with the three planted bugs."""
    return build_skillsbench_fork(tmp_path_factory.mktemp("app"))


def test_probe_passes_on_installed_trl_1_16():
    result = run_probe("--trl")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TRL 1.16.0" in result.stdout
    assert not lines_with(result.stdout, "FAIL") and not lines_with(result.stdout, "ERROR")
    assert len(lines_with(result.stdout, "PASS")) == 6  # 4 log-prob, 2 advantage checks
    assert "decode: no helper" in result.stdout  # TRL 1.16 has no decode helper


def test_probe_passes_on_stock_trl_0_17():
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(trl_release_path("0.17.0")), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TRL 0.17.0" in result.stdout
    assert not lines_with(result.stdout, "FAIL") and not lines_with(result.stdout, "ERROR")
    # 4 log-prob, 2 advantage and the plain-text decode check; upstream's helper has no
    # reasoning handling, so the two reasoning cases are skipped, not passed.
    assert len(lines_with(result.stdout, "PASS")) == 7
    assert len(lines_with(result.stdout, "SKIP")) == 2


def test_probe_runs_on_trl_0_14_whose_trainer_scores_rewards_inline():
    """TRL 0.14 calls the reward functions inside `compute_loss`: the advantage probe runs only
    the lines after them, and the log-prob probe says why it cannot run (no helper to call)."""
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(trl_release_path("0.14.0")), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    advantages = [line for line in lines_with(result.stdout, "PASS") if " advantages " in line]
    assert len(advantages) == 2, result.stdout
    assert "TRL 0.14 computes it inline" in result.stdout


def test_probe_finds_the_three_skillsbench_bugs(skillsbench_fork):
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(skillsbench_fork), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert str(skillsbench_fork) in result.stdout  # the fork, not an installed TRL
    failed = lines_with(result.stdout, "FAIL")
    expected_failures = [
        "float32: every value <= 0",  # bug 1, sign flip
        "float32: equals log_softmax",  # bug 1
        "rewards [0, 1], G = 2",  # bug 2, std + 1e4
        "plain text unchanged",  # bug 3, plain answers blanked
    ]
    for fragment in expected_failures:
        assert any(fragment in line for line in failed), (fragment, result.stdout)
    assert len(failed) == len(expected_failures), result.stdout
    for line in failed:
        assert "expected:" in line and "seen:" in line
    # The branches the fork got right still pass: bf16 log-probs, constant group, reasoning cases.
    passed = "\n".join(lines_with(result.stdout, "PASS"))
    for fragment in ("bfloat16: every value <= 0", "constant group", "closed block", "unclosed"):
        assert fragment in passed, (fragment, result.stdout)


SCRATCH_TRAINER = """
import torch

def selective_log_softmax(logits, index):
    return torch.log_softmax(logits.float(), -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)

def normalize(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(1, keepdim=True)
    return (centred / (grouped.std(1, keepdim=True) + {epsilon})).flatten()

def strip_reasoning(text):
    if "</think>" in text:
        return text.split("</think>", 1)[1].strip()
    return "" if "<think>" in text else text
"""


@pytest.mark.parametrize("epsilon,expected_status", [("1e-4", 0), ("1.0", 1)])
def test_probe_on_a_from_scratch_module_with_a_rename(tmp_path, epsilon, expected_status):
    module = tmp_path / "trainer.py"
    module.write_text(SCRATCH_TRAINER.replace("{epsilon}", epsilon))
    result = run_probe("--module", str(module), "--name", "advantages=normalize")
    assert result.returncode == expected_status, result.stdout + result.stderr
    assert len(lines_with(result.stdout, "PASS")) == 9 - expected_status
    if expected_status:
        assert "FAIL  advantages normalize: rewards [0, 1]" in result.stdout


def test_release_folders_import_under_their_environment():
    """The probe's 0.17 runs need transformers 4: the helper's environment must provide it."""
    env = import_environment("0.17.0")
    code = "import trl, transformers, trl.trainer.grpo_trainer; print(trl.__version__, transformers.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0.17.0", "4.57.6"]


@pytest.mark.parametrize(
    "old,new,failing",
    [
        # sign flip in the kernel's last line: both checks fail in both dtypes
        (
            "logprobs = target_logit - log_z",
            "logprobs = log_z - target_logit",
            [
                "float32: every value <= 0",
                "float32: equals",
                "bfloat16: every value <= 0",
                "bfloat16: equals",
            ],
        ),
        # temperature dropped from the kernel: values stay <= 0 but no longer match at T = 0.7
        ('"inv_t": 1 / temperature,', '"inv_t": 1.0,', ["float32: equals", "bfloat16: equals"]),
    ],
    ids=["sign", "temperature"],
)
def test_probe_checks_the_fused_head_kernel_of_trl_1_16(tmp_path, old, new, failing):
    """TRL 1.16's GRPOTrainer never calls selective_log_softmax: the probe must test the kernel."""
    root = tmp_path / "trl"
    shutil.copytree(trl_release_path("1.16.0") / "trl", root / "trl")
    kernel = root / "trl" / "kernels" / "chunked_logprob.py"
    stock = run_probe("--trl", str(root))
    assert stock.returncode == 0, stock.stdout + stock.stderr
    assert "ChunkedLogProbFunction" in stock.stdout and "selective_log_softmax" not in stock.stdout
    patch(kernel, old, new)
    result = run_probe("--trl", str(root))
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [
        line for line in lines_with(result.stdout, "FAIL") if "ChunkedLogProbFunction" in line
    ]
    assert len(failed) == len(failing) == len(lines_with(result.stdout, "FAIL")), result.stdout
    for fragment in failing:
        assert any(fragment in line for line in failed), (fragment, result.stdout)


def test_probe_on_trl_1_15_skips_a_kernel_it_cannot_import():
    """TRL 1.15's kernel module imports triton, which a CPU torch lacks: SKIP, not a crash."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        pytest.skip("triton is installed: the kernel imports")
    result = run_probe("--trl", str(trl_release_path("1.15.0")), env=import_environment("1.15.0"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIP  logprobs: cannot import the fused head's kernel" in result.stdout
    assert len([line for line in lines_with(result.stdout, "PASS") if "advantages" in line]) == 2
