"""`grpo-check tasks ...`: placeholder until the task suite lands (issue: debug tasks)."""

import click


@click.group("tasks")
def tasks() -> None:
    """List, verify, run, report and export the debug tasks (not implemented yet)."""
