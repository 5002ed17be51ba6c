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
    # 2 temperature (the trainer patches policy and reference with its T), 4 kernel forward,
    # 1 kernel backward, 2 advantage checks
    assert len(lines_with(result.stdout, "PASS")) == 9
    assert "decode: no helper" in result.stdout  # TRL 1.16 has no decode helper


def test_probe_passes_on_stock_trl_0_17():
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(trl_release_path("0.17.0")), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TRL 0.17.0" in result.stdout
    assert not lines_with(result.stdout, "FAIL") and not lines_with(result.stdout, "ERROR")
    # 2 for the trainer's own scoring (values at T, gradient), 4 for the helper, 2 advantage and
    # the plain-text decode check; upstream's helper has no reasoning handling, so the two
    # reasoning cases are skipped, not passed.
    assert len(lines_with(result.stdout, "PASS")) == 9
    assert len(lines_with(result.stdout, "SKIP")) == 2


def test_probe_runs_on_trl_0_14_whose_trainer_scores_rewards_inline():
    """TRL 0.14 calls the reward functions inside `compute_loss`: the advantage probe runs only
    the lines after them, and the log-prob probe says why it cannot run (no helper to call)."""
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(trl_release_path("0.14.0")), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    advantages = [line for line in lines_with(result.stdout, "PASS") if " advantages " in line]
    assert len(advantages) == 2, result.stdout
    assert "TRL 0.14 computes log-probs inline" in result.stdout


def test_probe_finds_the_three_skillsbench_bugs(skillsbench_fork):
    env = {**os.environ, "PYTHONPATH": str(transformers4_path())}
    result = run_probe("--trl", str(skillsbench_fork), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert str(skillsbench_fork) in result.stdout  # the fork, not an installed TRL
    failed = lines_with(result.stdout, "FAIL")
    expected_failures = [
        "_get_per_token_logps at T = 0.7: equals",  # bug 1, through the trainer's fp32 scoring
        "_get_per_token_logps at T = 0.7: its gradient",  # bug 1
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
        # temperature dropped from the kernel: values stay <= 0 but no longer match at T = 0.7,
        # and the backward, which scales by the same inv_t, is wrong too
        (
            '"inv_t": 1 / temperature,',
            '"inv_t": 1.0,',
            ["float32: equals", "bfloat16: equals", "backward float32"],
        ),
        # the hand-written backward forgets the 1 / T of the chain rule: only the backward fails
        (
            "    grad = grad * inv_t\n    if HAS_SOFTCAP:\n        grad = grad * (1 - t * t)\n    tile.copy_",
            "    if HAS_SOFTCAP:\n        grad = grad * (1 - t * t)\n    tile.copy_",
            ["backward float32"],
        ),
    ],
    ids=["sign", "temperature", "backward"],
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


# ---------------------------------------------------------------------------------------------
# Issue 22: the version of the tree checked, the trainer's own temperature scaling on every
# release, exit 2 when nothing ran, and a declarable population std.


def release_copy(tmp_path: Path, version: str, with_metadata: bool = True) -> Path:
    """A copy of release `version` as a checkout root (`<root>/trl/...`), with its dist-info."""
    root = tmp_path / f"trl-{version}"
    source = trl_release_path(version)
    shutil.copytree(source / "trl", root / "trl")
    if with_metadata:
        for info in source.glob("trl-*.dist-info"):
            shutil.copytree(info, root / info.name)
    return root


def test_probe_reports_the_version_of_the_tree_it_checks(tmp_path):
    """TRL 1.x reads `__version__` from the installed metadata: a 1.14.2 tree imported under the
    venv's TRL 1.16 must still be reported as 1.14.2, and a tree with no record as unknown."""
    result = run_probe("--trl", str(trl_release_path("1.14.2")))
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("TRL 1.14.2 from ") and "trl-1.14.2" in first, first
    bare = release_copy(tmp_path, "1.14.2", with_metadata=False)
    first = run_probe("--trl", str(bare)).stdout.splitlines()[0]
    assert first.startswith("TRL unknown (the tree records no version") and "1.16.0" in first


def scoring_lines(output: str, status: str) -> list[str]:
    return [line for line in lines_with(output, status) if "logprobs GRPOTrainer." in line]


@pytest.mark.parametrize(
    "version,old,new,failing",
    [
        # TRL 0.19.1 divides the logits by T in its own method: delete it, the method fails
        ("0.19.1", "            logits = logits / self.temperature\n", "", 2),
        # TRL 1.14.2 hands T to its helpers: drop it from the policy pass, that pass fails
        (
            "1.14.2",
            "                    entropy_requires_grad=self._entropy_bonus_enabled,\n"
            "                    temperature=self.temperature,\n",
            "                    entropy_requires_grad=self._entropy_bonus_enabled,\n",
            2,
        ),
    ],
    ids=["0.19.1", "1.14.2"],
)
def test_probe_tests_the_trainers_own_temperature_scaling(tmp_path, version, old, new, failing):
    """Up to 1.14 the trainer scales by T itself: the probe runs that method, so removing the
    scaling fails (the helper alone, given logits already divided by T, would still pass)."""
    root = release_copy(tmp_path, version)
    env = import_environment(version)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    stock = run_probe("--trl", str(root), env=env)
    assert stock.returncode == 0, stock.stdout + stock.stderr
    assert f"TRL {version} from" in stock.stdout
    assert len(scoring_lines(stock.stdout, "PASS")) >= 2 and not scoring_lines(stock.stdout, "FAIL")
    patch(root / "trl" / "trainer" / "grpo_trainer.py", old, new)
    result = run_probe("--trl", str(root), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = lines_with(result.stdout, "FAIL")
    assert len(failed) == failing == len(scoring_lines(result.stdout, "FAIL")), result.stdout
    assert any("equals log_softmax(logits / 0.7)" in line for line in failed)
    assert any("its gradient" in line for line in failed)


def test_probe_tests_the_temperature_trl_1_16_patches_its_head_with(tmp_path):
    """From 1.15 the kernel applies the T the trainer patched the model with: a trainer that
    patches its policy at T = 1 fails, though the kernel alone is right."""
    root = release_copy(tmp_path, "1.16.0")
    trainer = root / "trl" / "trainer" / "grpo_trainer.py"
    patch(
        trainer,
        "            temperature=self.temperature,\n            cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,\n            outputs=",
        "            cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,\n            outputs=",
    )
    result = run_probe("--trl", str(root))
    assert result.returncode == 1, result.stdout + result.stderr
    (failed,) = lines_with(result.stdout, "FAIL")
    assert "patches its model with its temperature (grpo_trainer.py:L1068)" in failed
    assert "temperature=(none: 1.0)" in failed


def test_probe_exits_2_when_nothing_was_checked(tmp_path):
    module = tmp_path / "empty.py"
    module.write_text("def unrelated():\n    return 0\n")
    result = run_probe("--module", str(module))
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines_with(result.stdout, "SKIP")) == 3 and not lines_with(result.stdout, "PASS")
    assert "nothing was checked" in result.stdout


@pytest.mark.parametrize("declared,expected_status", [(None, 1), ("population", 0)])
def test_probe_takes_a_declared_population_std(tmp_path, declared, expected_status):
    """A trainer that means population std fails TRL's unbiased default, passes when declared."""
    module = tmp_path / "trainer.py"
    module.write_text(
        SCRATCH_TRAINER.replace("{epsilon}", "1e-4").replace(
            "grouped.std(1, keepdim=True)", "grouped.std(1, keepdim=True, correction=0)"
        )
    )
    options = ["--std", declared] if declared else []
    result = run_probe("--module", str(module), "--name", "advantages=normalize", *options)
    assert result.returncode == expected_status, result.stdout + result.stderr
    rewards_line = next(line for line in result.stdout.splitlines() if "rewards [0, 1]" in line)
    if declared:
        assert rewards_line.startswith("PASS") and "population std" in rewards_line
        assert "[-0.9998, 0.9998]" in rewards_line
    else:
        assert rewards_line.startswith("FAIL") and "expected: [-0.707, 0.707]" in rewards_line
