"""`grpo-check demo` (`make demo`): grpo-check on a buggy trainer and on the reference, then training.

1. checks `checker/examples/buggy_grpo.py`, a from-scratch trainer with three bugs real trainers
   shipped, and shows each one localised to its stage with its likely cause;
2. checks `reference_impl`, which passes every check;
3. trains the tiny model on the toy task with the reference loop (progress bar and reward curve).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click
from rich.console import Console
from rich.rule import Rule

from checker.check_cli import run_check
from checker.report import print_table, summary

EXAMPLES = Path(__file__).resolve().parent / "examples"
REFERENCE = Path(importlib.util.find_spec("reference_impl").origin)


@click.command("demo")
@click.option("--no-training", is_flag=True, help="Stop after the two checks.")
def demo(no_training: bool) -> None:
    """Run grpo-check on a built-in buggy trainer and on the reference, then train the toy task."""
    console = Console()
    buggy = EXAMPLES / "buggy_grpo.py"
    console.print(Rule("1. grpo-check on a buggy from-scratch trainer"))
    console.print(f"$ grpo-check {_short(buggy)}", style="bold")
    with console.status("checking (two child processes, one check at a time each)..."):
        _, results, diagnosis = run_check(str(buggy))
    print_table(console, _short(buggy), results, diagnosis)

    console.print(Rule("2. grpo-check on the reference implementation"))
    console.print(f"$ grpo-check {_short(REFERENCE)}", style="bold")
    with console.status("checking..."):
        _, results, diagnosis = run_check(str(REFERENCE))
    counts = summary(results)
    console.print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors, "
        f"{counts['skip']} skipped over {len({r.stage for r in results})} stages"
        + (": every check passes" if diagnosis is None else ": UNEXPECTED FAILURES"),
        style="green" if diagnosis is None else "bold red",
    )
    if diagnosis is not None:
        print_table(console, _short(REFERENCE), results, diagnosis)
    if no_training:
        return
    console.print(Rule("3. training the tiny model with the reference GRPO loop"))
    from reference_impl.train_cli import run_training_demo

    run_training_demo(console=console)


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
