"""`grpo-check tasks ...`: list, verify, run, report, export and generate the debug tasks."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from task_harness.spec import TASKS_DIR, TaskSpecError, load_tasks


def _load(ids: tuple[str, ...], tasks_dir: Path):
    try:
        return load_tasks(tasks_dir, list(ids) or None)
    except TaskSpecError as error:
        raise click.ClickException(str(error)) from None


def _build_errors():
    """Turn a patch that no longer applies, or a spec that no longer builds, into a one-line
    error instead of a traceback."""
    from contextlib import contextmanager

    from task_harness.mutants import MutantError

    @contextmanager
    def guard():
        try:
            yield
        except (MutantError, TaskSpecError) as error:
            raise click.ClickException(f"cannot build the task: {error}") from None

    return guard()


tasks_dir_option = click.option(
    "--tasks-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=TASKS_DIR,
    show_default=False,
    help="Folder holding the task specs (default: the tasks shipped with the harness).",
)


@click.group("tasks")
def tasks() -> None:
    """List, verify, run, report, export and generate the debug tasks."""


@tasks.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array, one object per task.")
@tasks_dir_option
def list_command(as_json: bool, tasks_dir: Path) -> None:
    """The tasks, their family, stages and bugs."""
    summaries = [spec.summary() for spec in _load((), tasks_dir)]
    if as_json:
        click.echo(json.dumps(summaries, indent=2))
        return
    for s in summaries:
        bugs = ", ".join(
            f"{b['id']} ({b['weight']:g}{', decoy' if b['kind'] == 'decoy' else ''})"
            for b in s["bugs"]
        )
        click.echo(f"{s['id']:<34} {s['family']:<10} {','.join(s['stages']):<36} {bugs}")


@tasks.command("verify")
@click.argument("task_ids", nargs=-1)
@click.option(
    "--json", "as_json", is_flag=True, help="A JSON array of {id, oracle, nop, baselines, ok}."
)
@click.option("--jobs", default=2, show_default=True, help="Tasks verified in parallel.")
@tasks_dir_option
def verify_command(task_ids: tuple[str, ...], as_json: bool, jobs: int, tasks_dir: Path) -> None:
    """Score oracle (must get 1.0), nop (0 on every bug) and the shortcut baselines (at most 0.5,
    never every bug fixed): upstream-restore and upstream-hunks on trl tasks, reference-copy on
    reference tasks."""
    from task_harness.baselines import verify_tasks

    specs = _load(task_ids, tasks_dir)
    with _build_errors():
        rows = verify_tasks(specs, jobs=jobs, progress=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    sys.exit(0 if all(row["ok"] for row in rows) else 1)


@tasks.command("difficulty")
@click.argument("task_ids", nargs=-1)
@click.option(
    "--baselines",
    "verify_json",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A `tasks verify --json` output to take the baselines' rewards from (else they are run).",
)
@click.option("--write", is_flag=True, help="Record the measurement and label in each task.toml.")
@tasks_dir_option
def difficulty_command(task_ids, verify_json: Path | None, write: bool, tasks_dir: Path) -> None:
    """Measure each task's difficulty: the share of its bugs grpo-check's output localises and the
    best shortcut baseline's reward; where blind agent trials are recorded, the label is theirs
    (task_harness/difficulty.py gives the rules). Exit 1 when a task.toml's label differs from
    the one that follows (unless --write)."""
    from task_harness import difficulty
    from task_harness.build import build_task

    specs = _load(task_ids, tasks_dir)
    verified = {}
    if verify_json:
        rows = json.loads(verify_json.read_text())
        verified = {row["id"]: row["baselines"] for row in rows}
    stale = []
    with tempfile.TemporaryDirectory(prefix="grpo-difficulty-") as scratch, _build_errors():
        for spec in specs:
            built = build_task(spec, Path(scratch))
            best = verified.get(spec.id)
            if best is None:
                best = difficulty.baseline_rewards(spec, built)
            try:
                measured = difficulty.measure(spec, built, best)
            except difficulty.DifficultyError as error:
                raise click.ClickException(str(error)) from None
            stated = spec.toml["metadata"]["difficulty"]
            label = difficulty.stated_label(spec, measured)
            trials = difficulty.recorded_trials(spec)
            bugs = [b for b in spec.bugs if b.kind == "bug"]
            click.echo(
                f"{spec.id:<28} checker {len(measured.checker_found)}/{len(bugs)} bugs, "
                f"{measured.checker_share:.2f} of the weight "
                f"(found: {', '.join(measured.checker_found) or 'none'})  "
                f"baselines {measured.baseline_max:.2f}  "
                + (
                    _trial_words(measured.difficulty, trials["no_skill"])
                    if "no_skill" in trials
                    else ""
                )
                + f"-> {label}"
                + ("" if stated == label else f"  (task.toml: {stated})")
            )
            if write:
                difficulty.write(spec, measured)
            elif stated != label:
                stale.append(spec.id)
    sys.exit(1 if stale else 0)


@tasks.command("trials")
@click.argument("task_ids", nargs=-1)
@tasks_dir_option
def trials_command(task_ids, tasks_dir: Path) -> None:
    """The blind agent trials recorded in each task.toml, and the headline they give: the mean
    reward per condition over the tasks neither diff-solvable nor solved by reading, against the
    suite's target (README, "The headline, measured"). Runs nothing."""
    from task_harness import difficulty

    specs = _load(task_ids, tasks_dir)
    left_out = difficulty.left_out_of_uplift(specs)
    recorded = [(spec, difficulty.recorded_trials(spec)) for spec in specs]
    recorded = [(spec, trials) for spec, trials in recorded if trials]
    if not recorded:
        raise click.ClickException("no task here records a blind trial")
    click.echo(f"{'task':<22} {'no skill':<36} {'skill':<20} label")
    for spec, trials in recorded:
        reason = left_out.get(spec.id)
        click.echo(
            f"{spec.id:<22} {_trial_cell(trials.get('no_skill')):<36} "
            f"{_trial_cell(trials.get('skill')):<20} {spec.toml['metadata']['difficulty']}"
            + (f" (left out: {reason})" if reason else "")
        )
    everything = difficulty.headline(specs, {})
    counted = difficulty.headline(specs, left_out)
    if counted is not None:
        verdict = "met" if counted.met else "not met"
        click.echo(
            f"headline, {len(counted.tasks)} tasks: {_means(counted)}; target (no skill <="
            f" {difficulty.TARGET_NO_SKILL:.2f}, gap >= {difficulty.TARGET_GAP:.2f}) {verdict}"
        )
    if everything is not None and everything != counted:
        click.echo(f"every task with trials, {len(everything.tasks)}: {_means(everything)}")


def _trial_cell(trial) -> str:
    """'1.00 in 13.1 min (fastest full 3.7)', or '-' when the condition has no trial."""
    if trial is None:
        return "-"
    fastest = "" if trial.fastest_full is None else f" (fastest full {trial.fastest_full:g})"
    return f"{trial.reward:.2f} in {trial.minutes:g} min{fastest}"


def _means(headline) -> str:
    return f"no skill {headline.no_skill:.3f}, skill {headline.skill:.3f}, gap {headline.gap:+.3f}"


@tasks.command("symptoms")
@click.argument("task_ids", nargs=-1, required=True)
@click.option(
    "--lines",
    type=int,
    default=None,
    help="Log lines per run (default: 50 rollouts of train.py, 6 lines = 60 steps of train_grpo.py).",
)
@tasks_dir_option
def symptoms_command(task_ids, lines: int | None, tasks_dir: Path) -> None:
    """Run each task's training script fixed, with every bug, and with each bug alone, and say in
    which logged columns each run departs from the fixed one (task_harness/symptoms.py)."""
    from task_harness import symptoms
    from task_harness.generate import TARGET

    for spec in _load(task_ids, tasks_dir):
        with _build_errors():
            runs = symptoms.measure_task(spec, lines)
        fixed = runs.pop("fixed")
        rewards = fixed.blocks("reward")
        click.echo(
            f"{spec.id}: fixed run {len(fixed.steps)} log lines, reward "
            f"{symptoms.summary_span(rewards)}" + (f", died: {fixed.crash}" if fixed.crash else "")
        )
        bugs = {b.id: b for b in spec.bugs}
        for name, run in runs.items():
            bug = bugs.get(name)
            label = name if bug is None else f"{name} ({bug.stage}, {bug.weight}"
            label += "" if bug is None else (f", {bug.condition})" if bug.condition else ")")
            click.echo(f"  {label}: {symptoms.summary(run, fixed, TARGET)}")


@tasks.command("run")
@click.argument("task_ids", nargs=-1, required=True)
@click.option(
    "--agent",
    required=True,
    help="oracle, nop, upstream-restore, upstream-hunks, reference-copy, or a command template, e.g."
    " 'claude -p \"$(cat {instruction})\"'.",
)
@click.option(
    "--skill/--no-skill", default=False, help="Install the grpo skill in the workspace first."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("task-runs"),
    show_default=True,
)
@click.option(
    "--timeout",
    default=1800.0,
    show_default=True,
    help="Seconds before the agent, and everything it started, is killed.",
)
@click.option("--trials", default=1, show_default=True, help="Trials per task.")
@click.option("--resume", is_flag=True, help="Skip trials already recorded in OUT/results.jsonl.")
@click.option(
    "--pass-env",
    multiple=True,
    metavar="NAME",
    help="An environment variable the agent gets (an API key); it gets no other. Repeatable.",
)
@click.option(
    "--agent-files",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder of the agent's own (its tools, a scripted agent's payload), shown read-only"
    " at /opt/agent; nothing else outside the workspace is visible to the agent.",
)
@click.option(
    "--network",
    type=click.Choice(["none", "host"]),
    default="none",
    show_default=True,
    help="none: the agent's view has a loopback of its own and no other network. host: the"
    " host's network, for an agent that calls its model's API from inside the view; weaker, as"
    " it can reach the host's services and other trials' loopback servers.",
)
@tasks_dir_option
def run_command(
    task_ids, agent, skill, out, timeout, trials, resume, pass_env, agent_files, network, tasks_dir
) -> None:
    """Run AGENT on tasks; one JSON line per trial in OUT/results.jsonl as each trial ends."""
    from task_harness.build import build_task
    from task_harness.runner import IsolationUnavailable, append_result, finished_trials, run_trial

    specs = _load(task_ids, tasks_dir)
    if agent_files is not None and (leak := _run_output_in(agent_files, out)):
        raise click.ClickException(
            f"--agent-files {agent_files} holds a run's output ({leak}): the agent would read its"
            " verifier's expected files there; keep --out and earlier runs outside it"
        )
    results = out / "results.jsonl"
    done = finished_trials(results) if resume else set()
    condition = "skill" if skill else "no-skill"
    with tempfile.TemporaryDirectory(prefix="grpo-tasks-") as scratch:
        for spec in specs:
            pending = [t for t in range(trials) if (spec.id, agent, condition, t) not in done]
            if not pending:
                click.echo(f"{spec.id}: {trials} trial(s) already recorded, skipped")
                continue
            with _build_errors():
                built = build_task(spec, Path(scratch))
            for trial in pending:
                try:
                    result = run_trial(
                        built,
                        agent,
                        skill=skill,
                        trial=trial,
                        timeout=timeout,
                        keep=out / "trials",
                        pass_env=pass_env,
                        agent_files=agent_files,
                        host_network=network == "host",
                    )
                except IsolationUnavailable as error:
                    raise click.ClickException(str(error)) from None
                append_result(results, result)
                click.echo(
                    f"{spec.id} [{condition}] trial {trial}: reward {result.reward:.4f} ({result.status}, {result.seconds:.0f} s)"
                )


@tasks.command("report")
@click.argument(
    "folders",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--json", "as_json", is_flag=True, help="The same figures as one JSON object.")
@click.option(
    "--condition",
    "conditions",
    multiple=True,
    metavar="JOB=skill|no-skill",
    help="Condition of a Harbor job folder (by name) whose skill was baked into the image.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write report.png and report.html (default: the first FOLDER).",
)
def report_command(folders, as_json: bool, conditions, out: Path | None) -> None:
    """Reward, time and fix rates per task, agent and condition, with 95% bootstrap intervals,
    and the skill's uplift; from local results folders and Harbor job folders."""
    from task_harness.difficulty import left_out_of_uplift
    from task_harness.report import CHART_HINT, draw, render_tables
    from task_harness.report_data import ReportInputError, load_trials
    from task_harness.report_stats import summarise

    try:
        trials = load_trials(list(folders), _condition_map(conditions))
    except ReportInputError as error:
        raise click.ClickException(str(error)) from None
    if not trials:
        raise click.ClickException(f"no finished trials in {', '.join(map(str, folders))}")
    summary = summarise(trials, left_out_of_uplift(load_tasks()))
    tables = render_tables(summary)
    charts = draw(summary, tables, out or folders[0])
    if as_json:
        summary["charts"] = [str(path) for path in charts] if charts else None
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(tables)
    click.echo(f"\ncharts: {charts[0]}, {charts[1]}" if charts else f"\n{CHART_HINT}")


def _trial_words(alone: str, no_skill) -> str:
    """'(alone: medium; blind trial without the skill: 1.00 in 13.1 min, fastest full 3.7) '."""
    fastest = "" if no_skill.fastest_full is None else f", fastest full {no_skill.fastest_full:g}"
    return (
        f"(alone: {alone}; blind trial without the skill: {no_skill.reward:.2f} in"
        f" {no_skill.minutes:g} min{fastest}) "
    )


def _condition_map(pairs: tuple[str, ...]) -> dict[str, str]:
    """--condition JOB=skill|no-skill, repeated, as {job folder name: condition}."""
    mapping = {}
    for pair in pairs:
        job, _, condition = pair.partition("=")
        if not job or condition not in ("skill", "no-skill"):
            raise click.BadParameter(
                f"{pair!r}: expected JOB=skill or JOB=no-skill", param_hint="--condition"
            )
        mapping[Path(job).name] = condition
    return mapping


@tasks.command("export")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["harbor"]), default="harbor", show_default=True)
@click.option(
    "--skill/--no-skill", default=False, help="Place the grpo skill in the agents' folders."
)
@click.argument("task_ids", nargs=-1)
@tasks_dir_option
def export_command(out: Path, fmt: str, skill: bool, task_ids, tasks_dir: Path) -> None:
    """Write every task fully expanded in Harbor's layout under OUT."""
    from task_harness.export import export_harbor

    with _build_errors():
        folders = export_harbor(_load(tuple(task_ids), tasks_dir), out, skill=skill)
    for folder in folders:
        click.echo(folder)


@tasks.command("generate")
@click.option(
    "--seed", required=True, type=int, help="Seeds the draw; the same seed gives the same task."
)
@click.option(
    "--bugs", "num_bugs", default=2, show_default=True, help="Bugs to draw (distinct stages)."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="the current folder",
    help="Where to write gen-s<SEED>-k<K>/ (never inside the installed package).",
)
@click.option(
    "--no-verify",
    is_flag=True,
    help="Skip scoring nop and reference-copy and measuring the difficulty (the symptoms are "
    "still measured).",
)
def generate_command(seed: int, num_bugs: int, out: Path, no_verify: bool) -> None:
    """Draw K bugs of the shipped rlzero tasks into a new rlzero task: its training script is run
    fixed, with every bug and with each alone, a bug with no visible effect is redrawn, and the
    instruction reports what the runs showed (task_harness/generate.py)."""
    from task_harness.generate import GenerateError, generate_task

    try:
        folder = generate_task(seed, num_bugs, out, verify=not no_verify)
    except GenerateError as error:
        raise click.ClickException(str(error)) from None
    click.echo(folder)


def _run_output_in(agent_files: Path, out: Path) -> Path | None:
    """Where `agent_files` holds a trial's output (this run's --out, or an earlier run's
    results.jsonl or kept verifier files), which the agent would see at /opt/agent."""
    folder = agent_files.resolve()
    if out.resolve().is_relative_to(folder):
        return out
    return next(folder.rglob("results.jsonl"), None) or next(folder.rglob("tests/expected"), None)
