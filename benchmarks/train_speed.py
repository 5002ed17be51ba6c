"""Optimizer steps per second and peak memory: the reference loop vs TRL 1.16's GRPOTrainer.

Both train the same tiny model (`reference_impl.tiny`, fp32 CPU) on the same toy task and reward
function (`reference_impl.toy_tasks`, TRL's reward signature) with the same config: G, prompts per
step, max_completion_length, learning rate, AdamW betas and weight decay, constant schedule,
gradient clip 1.0, loss_type and beta. Each implementation runs in its own child process, so that
its peak RSS (VmHWM) is its own, imports included (TRL's import alone is ~435 MiB).

Timed: the steady state, from the end of the first optimizer step to the end of the last one
(generation, rewards, log-probs, loss, backward and AdamW of steps 2..N). Not timed: imports,
model loading, trainer construction and the first step (one-time warm-up of both libraries).
The two implementations run alternately `--repeats` times and each keeps its best rate, so that
load from other processes on a shared machine penalises neither side more than the other.

Goal: reference >= 2x TRL steps/s with the same or lower peak memory.
Last line: `train_speed: reference X steps/s, trl Y steps/s, ratio R, peak_rss_mib reference A trl B`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ.setdefault(_name, "1")  # before any Hugging Face import: nothing reaches the Hub

GOAL_RATIO = 2.0
TASK = "format"
STEPS = 60
REPEATS = 3
ADAM_BETAS = (0.9, 0.99)  # the reference loop's AdamW
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, used by the reference loop
CHILD_TIMEOUT_SECONDS = 600


def peak_rss_mib() -> float:
    """This process's peak resident set size (VmHWM), in MiB."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is what other processes' load on a
    shared machine leaves unchanged, so it cross-checks the wall-clock rate."""
    return time.perf_counter(), time.process_time()


def run_reference(steps: int) -> list[tuple[float, float]]:
    """`reference_impl.train` for exactly `steps` steps; the clock at the end of each step."""
    from reference_impl.train import TrainConfig, train

    step_ends: list[tuple[float, float]] = []
    # target_fraction > 1 is never reached, so every run takes exactly `steps` steps.
    config = TrainConfig(task=TASK, max_steps=steps, target_fraction=2.0)
    train(config, on_step=lambda stats, run: step_ends.append(clock()))
    return step_ends


def run_trl(steps: int) -> list[tuple[float, float]]:
    """TRL's `GRPOTrainer` with the reference loop's settings; the clock at the end of each step."""
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from reference_impl.tiny import tiny_model_path
    from reference_impl.toy_tasks import TOY_TASKS
    from reference_impl.train import TrainConfig

    run = TrainConfig(task=TASK).resolved()
    step_ends: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(clock())

    model_path = tiny_model_path(run.base.tiny)
    with tempfile.TemporaryDirectory(prefix="train-speed-") as output_dir:
        args = GRPOConfig(
            output_dir=output_dir,
            # fp32 on CPU like the reference loop (TRL defaults to bf16 autocast and checkpointing)
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            per_device_train_batch_size=run.prompts_per_step * run.num_generations,
            num_generations=run.num_generations,
            max_completion_length=run.max_completion_length,
            temperature=run.base.temperature,
            learning_rate=run.learning_rate,
            lr_scheduler_type="constant",
            adam_beta1=ADAM_BETAS[0],
            adam_beta2=ADAM_BETAS[1],
            weight_decay=WEIGHT_DECAY,
            max_grad_norm=run.base.max_grad_norm,
            loss_type=run.base.loss_type,
            beta=run.base.beta,
            scale_rewards=run.base.scale_rewards,
            max_steps=steps,
            seed=run.base.seed,
            logging_steps=steps,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=str(model_path),
            reward_funcs=list(run.toy.reward_funcs),
            args=args,
            train_dataset=TOY_TASKS[TASK].dataset(),
            processing_class=PreTrainedTokenizerFast.from_pretrained(model_path),
            callbacks=[StepClock()],
        )
        trainer.train()
    return step_ends


def child(implementation: str, steps: int, threads: int) -> None:
    """Run one implementation and print one JSON line with its figures."""
    import torch

    torch.set_num_threads(threads)
    runner = {"reference": run_reference, "trl": run_trl}[implementation]
    step_ends = runner(steps)
    if len(step_ends) != steps:
        raise SystemExit(f"{implementation} ran {len(step_ends)} steps, expected {steps}")
    (first_wall, first_cpu), (last_wall, last_cpu) = step_ends[0], step_ends[-1]
    result = {
        "steps_per_second": (steps - 1) / (last_wall - first_wall),
        "steps_per_cpu_second": (steps - 1) / (last_cpu - first_cpu),
        "peak_rss_mib": peak_rss_mib(),
    }
    print(json.dumps(result))


def measure(implementation: str, steps: int, threads: int) -> dict:
    """Run `implementation` in a child process; its figures (the last line it printed)."""
    completed = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            implementation,
            "--steps",
            str(steps),
            "--threads",
            str(threads),
        ],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
    )
    if completed.returncode != 0:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"{implementation} benchmark failed: {tail[0]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=STEPS, help="optimizer steps per implementation"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each child")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="alternating runs; best kept")
    parser.add_argument("--child", choices=["reference", "trl"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.steps < 2:
        parser.error(f"--steps must be at least 2 (the first step is warm-up), got {options.steps}")
    if options.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {options.repeats}")
    if options.child:
        child(options.child, options.steps, options.threads)
        return 0

    from reference_impl.train import TrainConfig

    run = TrainConfig(task=TASK).resolved()
    print(
        f"task {TASK}: {run.prompts_per_step} prompts x G={run.num_generations}, "
        f"max_completion_length {run.max_completion_length}, lr {run.learning_rate:g}, "
        f"loss_type {run.base.loss_type}, beta {run.base.beta}, {options.steps} steps, "
        f"{options.threads} torch thread(s); timed: steps 2..{options.steps}, "
        f"best of {options.repeats} alternating runs"
    )
    runs: dict[str, list[dict]] = {"reference": [], "trl": []}
    for repeat in range(options.repeats):
        for name, results in runs.items():
            results.append(measure(name, options.steps, options.threads))
            last = results[-1]
            print(
                f"run {repeat + 1} {name:<10} {last['steps_per_second']:6.2f} steps/s "
                f"({last['steps_per_cpu_second']:6.2f} per CPU second)"
            )
    figures = {
        name: {
            "steps_per_second": max(r["steps_per_second"] for r in results),
            "steps_per_cpu_second": max(r["steps_per_cpu_second"] for r in results),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
        }
        for name, results in runs.items()
    }
    print(
        f"{'implementation':<16} {'steps/s':>8} {'ms/step':>8} {'steps/CPU s':>12} {'peak RSS MiB':>13}"
    )
    for name, result in figures.items():
        rate = result["steps_per_second"]
        print(
            f"{name:<16} {rate:>8.2f} {1000 / rate:>8.1f} {result['steps_per_cpu_second']:>12.2f} "
            f"{result['peak_rss_mib']:>13.0f}"
        )
    reference, trl = figures["reference"], figures["trl"]
    ratio = reference["steps_per_second"] / trl["steps_per_second"]
    cpu_ratio = reference["steps_per_cpu_second"] / trl["steps_per_cpu_second"]
    print(
        f"speed ratio {ratio:.2f} wall, {cpu_ratio:.2f} CPU time (goal >= {GOAL_RATIO:.0f}); "
        f"peak RSS ratio {reference['peak_rss_mib'] / trl['peak_rss_mib']:.2f} (goal <= 1)"
    )
    print(
        f"train_speed: reference {reference['steps_per_second']:.2f} steps/s, "
        f"trl {trl['steps_per_second']:.2f} steps/s, ratio {ratio:.2f}, "
        f"peak_rss_mib reference {reference['peak_rss_mib']:.0f} trl {trl['peak_rss_mib']:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
