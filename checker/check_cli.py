"""`grpo-check TARGET`: check a trainer stage by stage (the command-line contract in the README);
`grpo-check profile TARGET`: measure its conventions (checker.profile).

Exit status 0 when every check that ran passed, 1 when one failed or raised in the candidate (or,
with `--strict`, when a stage had no check that ran), 2 when nothing could be checked. With
`--json`, standard output holds one JSON object and nothing else; progress goes to standard error.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from checker import __version__
from checker.candidate import KINDS, CandidateSpec, TargetError, resolve_target
from checker.checks import CheckResult, all_checks
from checker.coverage import uncovered
from checker.diagnosis import diagnose
from checker.profile import (
    PROFILE_TIMEOUT,
    ProfileError,
    finding_results,
    run_profile,
    yaml_text,
)
from checker.report import print_table, shown, to_json, write_junit
from checker.sandbox import CandidateLoadError, run_in_process, run_isolated
from reference_impl.protocol import DEFAULTS, STAGES

DEFAULT_SEED = 1234
DEFAULT_TIMEOUT = 60.0
# A subclass failing this many checks across this many stages more likely keeps conventions of
# its own than has that many bugs: the summary suggests declaring them first.
MANY_FAILURES, MANY_STAGES = 5, 3


def run_check(
    target: str,
    kind: str = "auto",
    stages: tuple[str, ...] = (),
    seed: int = DEFAULT_SEED,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int = 2,
    log=lambda _: None,
    grpo_config: str | None = None,
) -> tuple[CandidateSpec, list[CheckResult], dict | None]:
    """Resolve, run and diagnose; raises TargetError / CandidateLoadError when nothing can run."""
    spec = resolve_target(target, kind, grpo_config)
    results = collect_results(spec, stages, seed, timeout, workers, log)
    return spec, results, diagnose(results)


# What a trainer subclass raises when it reads a field of its own config class from a plain
# GRPOConfig, the one grpo-check builds when no --config names the team's.
MISSING_FIELD = re.compile(r"'GRPOConfig' object has no attribute '(\w+)'")


def check_hint(
    spec: CandidateSpec, grpo_config: str | None, results: list[CheckResult]
) -> str | None:
    """The one line printed after the verdict, if any: the missing config class first (nothing
    else can be judged while the trainer cannot read its own fields), then profile."""
    return config_class_hint(spec, grpo_config, results) or profile_hint(spec, grpo_config, results)


def config_class_hint(
    spec: CandidateSpec, grpo_config: str | None, results: list[CheckResult]
) -> str | None:
    """For a trainer subclass checked with a plain GRPOConfig (no --config, no `grpo_config:`)
    whose code reads a field GRPOConfig does not have: pass the team's config."""
    if spec.trainer is None or grpo_config or spec.grpo_config:
        return None
    fields = sorted(
        {
            m.group(1)
            for r in results
            if r.status == "error"
            for m in [MISSING_FIELD.search(r.message)]
            if m
        }
    )
    if not fields:
        return None
    names = ", ".join(f"args.{name}" for name in fields)
    return (
        f"the trainer reads {names}, which a plain GRPOConfig lacks: pass the team's config"
        " class, --config FILE.py:CLASS (or an instance of it)"
    )


def profile_hint(
    spec: CandidateSpec, grpo_config: str | None, results: list[CheckResult]
) -> str | None:
    """For a GRPOTrainer subclass named directly (FILE.py:CLASS, module:CLASS: no YAML declares
    its conventions yet) that fails at least MANY_FAILURES checks across MANY_STAGES stages: the
    `profile --write` command that measures and declares its team's conventions, so that the
    next check reports what differs from them rather than from TRL's defaults."""
    if spec.trainer is None or spec.target.endswith((".yaml", ".yml")):
        return None
    failing = [r for r in results if r.status in ("fail", "error")]
    stages = {r.stage for r in failing}
    if len(failing) < MANY_FAILURES or len(stages) < MANY_STAGES:
        return None
    where = spec.target.rpartition(":")[0]
    written = f"{Path(where).stem if where.endswith('.py') else where.rpartition('.')[2]}.yaml"
    config = f" --config {grpo_config}" if grpo_config else ""
    return (
        f"{len(failing)} checks fail across {len(stages)} stages: if some of them are your "
        "team's conventions rather than bugs, declare those first, then check the YAML: "
        f"grpo-check profile {spec.target}{config} --write {written} && grpo-check {written}"
    )


def collect_results(
    spec,
    stages: tuple[str, ...] = (),
    seed: int = DEFAULT_SEED,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int = 2,
    log=lambda _: None,
    isolated: bool = True,
) -> list[CheckResult]:
    """What every front end reports (the CLI, the pytest plugin): the checks' results, then each
    profile finding the YAML keeps (`findings:`) as a failure. `isolated=False` runs the checks in
    this process."""
    if isolated:
        results = run_isolated(spec, stages, seed, timeout, workers, log)
    else:
        results = run_in_process(spec, all_checks(stages), seed)
    return results + finding_results(spec, stages)


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
@click.option(
    "--strict", is_flag=True, help="Exit 1 when a stage had no check that ran (all skipped)."
)
@click.option(
    "--config",
    "grpo_config",
    metavar="FILE.py:NAME",
    help="The GRPOConfig (an instance, a subclass at its defaults, or a dict of its fields) a trainer (FILE.py:CLASS, trl) is checked with.",
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
    strict: bool,
    grpo_config: str | None,
) -> None:
    """Check TARGET: a .py file, a dotted module, a YAML file, `trl`, a TRL source tree, `verl`,
    or a GRPOTrainer subclass as FILE.py:CLASS or module:CLASS."""
    err = Console(stderr=True)
    out = Console(highlight=False, soft_wrap=False, width=max(120, Console().width))
    status = err.status(f"grpo-check {target}: loading the candidate", spinner="dots")
    status.start()
    try:
        spec, results, diagnosis = run_check(
            target,
            kind,
            stages,
            seed,
            timeout,
            workers,
            log=lambda name: status.update(f"grpo-check {target}: {name}"),
            grpo_config=grpo_config,
        )
    except (TargetError, CandidateLoadError) as error:
        status.stop()
        click.echo(f"grpo-check: {error}", err=True)  # one unwrapped line, whatever the terminal
        sys.exit(2)
    status.stop()
    if junit_xml:
        write_junit(junit_xml, target, results)
    if as_json:
        click.echo(to_json(target, spec.kind, __version__, results, diagnosis))
    else:
        print_table(out, target, results, diagnosis, strict, check_hint(spec, grpo_config, results))
    failed = any(r.status in ("fail", "error") for r in results)
    sys.exit(1 if failed or (strict and uncovered(results)) else 0)


@click.command("profile")
@click.argument("target")
@click.option("--kind", type=click.Choice(KINDS), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on standard output.")
@click.option(
    "--write",
    "write_path",
    type=click.Path(dir_okay=False),
    help="Write the measured conventions as the stage protocol's YAML.",
)
@click.option("--timeout", type=float, default=PROFILE_TIMEOUT, show_default=True)
@click.option(
    "--config",
    "grpo_config",
    metavar="FILE.py:NAME",
    help="The GRPOConfig (an instance, a subclass at its defaults, or a dict of its fields) a trainer (FILE.py:CLASS, trl) is built with.",
)
def profile(
    target: str,
    kind: str,
    as_json: bool,
    write_path: str | None,
    timeout: float,
    grpo_config: str | None,
) -> None:
    """Measure TARGET's conventions (advantage epsilon and std, aggregation, clipping, KL, ...).

    TARGET is what `grpo-check TARGET` takes, a GRPOTrainer subclass with its `--config` among
    them. Known bugs are reported as findings (exit 1) and never written as conventions.
    """
    try:
        spec = resolve_target(target, kind, grpo_config)
        if write_path and spec.kind != "functions" and spec.trainer is None:
            raise TargetError(
                f"--write needs a .py, module, YAML or FILE.py:CLASS target, not the {spec.kind} kind"
            )
        if write_path and not Path(write_path).resolve().parent.is_dir():
            raise TargetError(f"--write {write_path}: no such folder")
        with Console(stderr=True).status(f"grpo-check profile {target}", spinner="dots"):
            measured = run_profile(spec, timeout)
    except (TargetError, ProfileError) as error:
        click.echo(f"grpo-check: {error}", err=True)
        sys.exit(2)
    if write_path:
        try:
            Path(write_path).write_text(yaml_text(spec, measured, Path(write_path)))
        except OSError as error:
            click.echo(f"grpo-check: --write {write_path}: {error.strerror}", err=True)
            sys.exit(2)
    if as_json:
        document = {"target": target, "kind": spec.kind, "version": __version__}
        document |= {"conventions": measured.conventions, "findings": measured.findings}
        document["supported"] = measured.supported
        click.echo(json.dumps(document, indent=2))
    else:
        print_profile(Console(highlight=False), target, measured, write_path)
    sys.exit(1 if measured.findings else 0)


def print_profile(console: Console, target: str, measured, write_path: str | None) -> None:
    """The measured conventions (those that differ from TRL's bold), then the findings."""
    table = Table(title=f"grpo-check profile {target}", title_justify="left")
    for column in ("convention", "value", "TRL 1.16", "measured from"):
        table.add_column(column, overflow="fold")
    for key, how in measured.evidence.items():
        if key.startswith("supported "):  # an option the loss takes and ignores
            only = measured.supported[key.removeprefix("supported ")]
            value = Text(f"{', '.join(shown(v) for v in only)} only", style="bold")
            table.add_row(key, value, "all", how)
            continue
        value = measured.conventions.get(key, "-")
        differs = key in measured.conventions and DEFAULTS.get(key) != value
        style = "bold" if differs else ""
        trl = shown(DEFAULTS.get(key, "-"))
        table.add_row(key, Text(shown(value), style=style), trl, how)
    console.print(table)
    for finding in measured.findings:
        console.print(Text(f"finding: {finding}", style="bold red"), soft_wrap=True)
    if write_path:
        console.print(f"wrote {write_path}: review it, then run grpo-check {write_path}")
