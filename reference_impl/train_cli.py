"""The training demo: GRPO on a toy task with a progress bar and a reward curve in the terminal.

python -m reference_impl.train_cli --task succ
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reference_impl.errors import GRPOInputError
from reference_impl.protocol import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, SCALE_REWARDS
from reference_impl.tiny import TinySpec
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


def field_docs(cls: type) -> dict[str, str]:
    """{field: the docstring written under it} for a dataclass (PEP 257 attribute docstrings)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


class FloatList(click.ParamType):
    """Comma-separated numbers, e.g. `1,0.5`."""

    name = "x,y,..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            return [float(part) for part in value.split(",")]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of numbers", param, ctx)


# Options whose values come from a fixed vocabulary.
CHOICES = {
    "task": sorted(TOY_TASKS),
    "loss_type": list(LOSS_TYPES),
    "scale_rewards": list(SCALE_REWARDS),
    "importance_sampling_level": list(IMPORTANCE_SAMPLING_LEVELS),
}


def _option(name: str, annotation: object, default: object, doc: str, prefix: str = ""):
    """One click option for a dataclass field, typed and documented from the field itself."""
    flag = "--" + (prefix + name).replace("_", "-")
    base = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    kind = base[0]
    if kind is bool:
        flag = f"{flag}/--no-{flag[2:]}"
        return click.option(flag, prefix + name, default=default, show_default=True, help=doc)
    if name in CHOICES and not prefix:
        kind = click.Choice(CHOICES[name])
    elif typing.get_origin(kind) is list:
        kind = FloatList()
    shown = "the task's value" if default is None and name in TASK_DEFAULTS else True
    return click.option(
        flag, prefix + name, type=kind, default=default, show_default=shown, help=doc
    )


# TrainConfig fields whose None means "the toy task's measured value".
TASK_DEFAULTS = {"learning_rate", "prompts_per_step", "num_generations", "max_completion_length"}


def config_options(function):
    """Decorate `function` with one option per TrainConfig field (TinySpec's as --tiny-*)."""
    hints, docs = typing.get_type_hints(TrainConfig), field_docs(TrainConfig)
    tiny_hints, tiny_docs = typing.get_type_hints(TinySpec), field_docs(TinySpec)
    options = []
    for item in dataclasses.fields(TrainConfig):
        if item.name == "tiny":
            for sub in dataclasses.fields(TinySpec):
                options.append(
                    _option(
                        sub.name, tiny_hints[sub.name], sub.default, tiny_docs[sub.name], "tiny_"
                    )
                )
            continue
        options.append(_option(item.name, hints[item.name], item.default, docs[item.name]))
    for option in reversed(options):
        function = option(function)
    return function


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@config_options
def main(**options) -> None:
    """Train a tiny model with the reference GRPO loop and show the reward curve.

    Every option is a field of `reference_impl.train.TrainConfig` (or of its tiny-model
    `TinySpec`, as --tiny-*); defaults follow TRL 1.16's GRPOConfig unless a toy task sets them.
    """
    tiny = {
        name[len("tiny_") :]: options.pop(name)
        for name in list(options)
        if name.startswith("tiny_")
    }
    try:
        result = run_training_demo(TrainConfig(**options, tiny=TinySpec(**tiny)))
    except GRPOInputError as error:
        raise click.ClickException(str(error)) from None
    raise SystemExit(0 if result.reached_target else 1)


if __name__ == "__main__":
    main()
