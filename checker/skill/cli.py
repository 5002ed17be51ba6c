"""`grpo-check skill ...`: placeholder until the installer lands (issue: the grpo skill)."""

import click


@click.group("skill")
def skill() -> None:
    """Install, uninstall, validate and list the grpo skill (not implemented yet)."""
