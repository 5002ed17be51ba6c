"""The `grpo-check` command line.

`grpo-check TARGET [options]` checks a trainer (the contract's main form); `demo` is the engine's
own subcommand. `skill` and `tasks` belong to other products (the skill installer, the task
harness) and are found through the `grpo_check.commands` entry-point group, so the engine never
imports them and `grpo-check tasks` exists only where the task harness is installed. A first
argument that is not a subcommand name is taken as a TARGET.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import click

from checker import __version__

NEXT_STEPS = """\
grpo-check: no target given. What to do next:

  grpo-check trl                      check the GRPOTrainer of the TRL that Python imports here
  grpo-check verl                     check verl's core_algos (advantage, policy losses, agg_loss, KL)
  grpo-check my_trainer.py:MyTrainer  check your GRPOTrainer subclass (--config cfg.py:CONFIG)
  grpo-check path/to/my_grpo.py       check a from-scratch trainer's stage functions
  grpo-check my_trainer.yaml          the same, with renamed functions or declared conventions
  grpo-check profile my_grpo.py       measure its conventions (--write my_trainer.yaml)
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
    grpo-check TARGET [--kind auto|functions|trl|verl] [--stage STAGE]... [--json]
                      [--junit-xml PATH] [--seed N] [--timeout SECONDS]
                      [--config FILE.py:NAME] [--strict]
    grpo-check profile TARGET [--kind ...] [--json] [--write PATH]
    grpo-check skill ...   install, uninstall, validate, list the grpo skill
    grpo-check tasks ...   list, verify, run, export the debug tasks
    """


# Where each product's subcommand comes from, for the message shown when it is not installed.
PRODUCTS = {
    "skill": "the skill installer (part of grpo-skill)",
    "tasks": "the task harness: pip install grpo-skill-tasks (in a checkout: make test installs it)",
}


def _missing(name: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        raise click.UsageError(f"`grpo-check {name}` needs {PRODUCTS[name]}")

    command.help = f"(not installed) {PRODUCTS[name]}"
    return command


def _register_subcommands() -> None:
    from checker.check_cli import check, profile
    from checker.demo import demo

    for command in (check, profile, demo):
        main.add_command(command)
    for entry in entry_points(group="grpo_check.commands"):
        main.add_command(entry.load(), entry.name)
    for name in PRODUCTS.keys() - main.commands.keys():
        main.add_command(_missing(name))


_register_subcommands()
