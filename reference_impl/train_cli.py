"""The training demo: GRPO on a toy task with a progress bar and a reward curve in the terminal.

python -m reference_impl.train_cli --task succ
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reference_impl.errors import GRPOInputError
from reference_impl.loss import LOSS_TYPES
from reference_impl.toy_tasks import TOY_TASKS
from reference_impl.train import ResolvedConfig, StepStats, TrainConfig, TrainResult, train

CURVE_HEIGHT = 8
CURVE_WIDTH = 60
BLOCKS = " ▁▂▃▄▅▆▇█"


def reward_curve(rewards: list[float], max_reward: float, target: float) -> str:
    """A CURVE_HEIGHT-row chart of mean reward per step, averaged into at most CURVE_WIDTH columns."""
    width = min(CURVE_WIDTH, len(rewards))
    columns = []
    for c in range(width):
        chunk = rewards[c * len(rewards) // width : (c + 1) * len(rewards) // width]
        columns.append(sum(chunk) / len(chunk) / max_reward)
    lines = []
    for row in range(CURVE_HEIGHT, 0, -1):
        level = row / CURVE_HEIGHT
        label = (
            f"{level * max_reward:4.2f} │" if row in (CURVE_HEIGHT, CURVE_HEIGHT // 2) else "     │"
        )
        cells = []
        for value in columns:
            filled = (value - (level - 1 / CURVE_HEIGHT)) * CURVE_HEIGHT
            cells.append(BLOCKS[max(0, min(len(BLOCKS) - 1, round(filled * (len(BLOCKS) - 1))))])
        marker = " ← target" if level - 1 / CURVE_HEIGHT < target / max_reward <= level else ""
        lines.append(label + "".join(cells) + marker)
    lines.append("     └" + "─" * width)
    lines.append(f"      step 1{' ' * max(0, width - 12)}step {len(rewards)}")
    return "\n".join(lines)


def run_training_demo(
    config: TrainConfig | None = None, console: Console | None = None
) -> TrainResult:
    """Train with a live progress bar, then print the reward curve and whether the target was hit."""
    config = config or TrainConfig()
    console = console or Console(stderr=False)
    run = config.resolved()
    console.print(
        f"[bold]GRPO on toy task [cyan]{run.toy.name}[/cyan][/bold]: {run.toy.description}\n"
        f"{run.prompts_per_step} prompts x G={run.num_generations} completions per step, "
        f"loss_type={config.loss_type}, beta={config.beta}, lr={run.learning_rate:g}, "
        f"T={config.temperature}, num_iterations={config.num_iterations}"
    )
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f}  (10-step avg {task.fields[average]:.3f})"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    recent: list[float] = []

    def on_step(stats: StepStats, _: ResolvedConfig) -> None:
        recent.append(stats.mean_reward)
        average = sum(recent[-10:]) / len(recent[-10:])
        progress.update(bar, advance=1, reward=stats.mean_reward, average=average)

    with progress:
        bar = progress.add_task("training", total=config.max_steps, reward=0.0, average=0.0)
        result = train(config, on_step=on_step)
    console.print(reward_curve(result.rewards, result.max_reward, result.target))
    verdict = "[green]reached[/green]" if result.reached_target else "[red]did not reach[/red]"
    console.print(
        f"Mean reward {result.rewards[0]:.2f} → {sum(result.rewards[-10:]) / len(result.rewards[-10:]):.2f} "
        f"(10-step average) in {len(result.history)} steps, {result.seconds:.1f} s: "
        f"{verdict} the target {result.target:.2f}."
    )
    return result


@click.command()
@click.option("--task", type=click.Choice(sorted(TOY_TASKS)), default="succ", show_default=True)
@click.option("--loss-type", type=click.Choice(LOSS_TYPES), default="dapo", show_default=True)
@click.option("--beta", type=float, default=0.0, show_default=True, help="KL coefficient.")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--num-iterations", type=int, default=1, show_default=True)
@click.option("--scale-rewards", type=click.Choice(["group", "batch", "none"]), default="group")
@click.option("--max-steps", type=int, default=300, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def main(**options) -> None:
    """Train a tiny model with the reference GRPO loop and show the reward curve."""
    try:
        result = run_training_demo(TrainConfig(**options))
    except GRPOInputError as error:
        raise click.ClickException(str(error)) from None
    raise SystemExit(0 if result.reached_target else 1)


if __name__ == "__main__":
    main()
