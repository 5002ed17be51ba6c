"""`grpo-check TARGET`: placeholder until the checker lands (issue: grpo-check)."""

import click


@click.command("check")
@click.argument("target")
def check(target: str) -> None:
    """Check TARGET (not implemented yet)."""
    raise click.ClickException("the checker is not implemented yet")
