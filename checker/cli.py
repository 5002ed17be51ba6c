"""The `grpo-check` command line.

`grpo-check TARGET [options]` checks a trainer (the contract's main form); `skill`, `tasks` and
`demo` are subcommands. A first argument that is not a subcommand name is taken as a TARGET.
"""

from __future__ import annotations

import click

from checker import __version__

NEXT_STEPS = """\
grpo-check: no target given. What to do next:

  grpo-check trl                      check the GRPOTrainer of the TRL that Python imports here
  grpo-check path/to/my_grpo.py       check a from-scratch trainer's stage functions
  grpo-check my_trainer.yaml          the same, with renamed functions or declared conventions
  grpo-check demo                     see a buggy trainer localised, and the reference pass
  grpo-check skill install --all      install the grpo skill for your coding agents
  grpo-check tasks list               the debug tasks for evaluating agents

  grpo-check --help                   every option
"""


class _TargetOrCommand(click.Group):
    """A group whose first positional word is either a subcommand or the target to check."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args:
            click.echo(NEXT_STEPS, nl=False)
            ctx.exit(0)
        first = args[0]
        if first not in self.commands and first not in ("--help", "-h", "--version"):
            args = ["check", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_TargetOrCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="grpo-check")
def main() -> None:
    """Check a GRPO trainer stage by stage against a reference implementation.

    \b
    grpo-check TARGET [--kind auto|functions|trl] [--stage STAGE]... [--json]
                      [--junit-xml PATH] [--seed N] [--timeout SECONDS]
    grpo-check skill ...   install, uninstall, validate, list the grpo skill
    grpo-check tasks ...   list, verify, run, export the debug tasks
    """


def _register_subcommands() -> None:
    from checker.check_cli import check
    from checker.demo import demo
    from checker.skill.cli import skill
    from checker.tasks.cli import tasks

    for command in (check, demo, skill, tasks):
        main.add_command(command)


_register_subcommands()
