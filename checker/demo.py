"""`grpo-check demo`: placeholder replaced below."""

import click


@click.command("demo")
def demo() -> None:
    """Run grpo-check on a built-in buggy trainer and on the reference, then train the toy task."""
