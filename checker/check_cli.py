"""`grpo-check TARGET`: check a trainer stage by stage (the command-line contract in the README).

Exit status 0 when every check that ran passed, 1 when one failed or raised in the candidate, 2
when nothing could be checked. With `--json`, standard output holds one JSON object and nothing
else; progress goes to standard error.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console

from checker import __version__
from checker.candidate import KINDS, TargetError, resolve_target
from checker.checks import CheckResult
from checker.diagnosis import diagnose
from checker.report import print_table, to_json, write_junit
from checker.sandbox import CandidateLoadError, run_isolated
from reference_impl.protocol import STAGES

DEFAULT_SEED = 1234
DEFAULT_TIMEOUT = 60.0


def run_check(
    target: str,
    kind: str = "auto",
    stages: tuple[str, ...] = (),
    seed: int = DEFAULT_SEED,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int = 2,
    log=lambda _: None,
) -> tuple[str, list[CheckResult], dict | None]:
    """Resolve, run and diagnose; raises TargetError / CandidateLoadError when nothing can run."""
    spec = resolve_target(target, kind)
    results = run_isolated(spec, stages, seed, timeout, workers, log)
    return spec.kind, results, diagnose(results)


@click.command("check")
@click.argument("target")
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default="auto",
    show_default=True,
    help="functions: stage-protocol functions (.py, module, YAML); trl: TRL's GRPOTrainer; verl: verl's core_algos.",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(STAGES),
    help="Only run the checks of this stage (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on standard output.")
@click.option("--junit-xml", type=click.Path(dir_okay=False), help="Also write a JUnit XML report.")
@click.option(
    "--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seeds every fixture."
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds one check may take before it is reported as an error.",
)
@click.option(
    "--workers", type=click.IntRange(1, 2), default=2, show_default=True, help="Child processes."
)
def check(
    target: str,
    kind: str,
    stages: tuple[str, ...],
    as_json: bool,
    junit_xml: str | None,
    seed: int,
    timeout: float,
    workers: int,
) -> None:
    """Check TARGET: a .py file, a dotted module, a YAML file, `trl`, a TRL source tree, or `verl`."""
    err = Console(stderr=True)
    out = Console(highlight=False, soft_wrap=False, width=max(120, Console().width))
    status = err.status(f"grpo-check {target}: loading the candidate", spinner="dots")
    status.start()
    try:
        kind_found, results, diagnosis = run_check(
            target,
            kind,
            stages,
            seed,
            timeout,
            workers,
            log=lambda name: status.update(f"grpo-check {target}: {name}"),
        )
    except (TargetError, CandidateLoadError) as error:
        status.stop()
        click.echo(f"grpo-check: {error}", err=True)  # one unwrapped line, whatever the terminal
        sys.exit(2)
    status.stop()
    if junit_xml:
        write_junit(junit_xml, target, results)
    if as_json:
        click.echo(to_json(target, kind_found, __version__, results, diagnosis))
    else:
        print_table(out, target, results, diagnosis)
    sys.exit(1 if any(r.status in ("fail", "error") for r in results) else 0)
