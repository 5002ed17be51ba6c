"""`grpo-check skill ...`: install, uninstall, validate and list the grpo Agent Skill."""

from __future__ import annotations

from pathlib import Path

import click

from skill_installer.agents import AGENTS
from skill_installer.install import (
    InstallRefused,
    find_installations,
    install_skill,
    uninstall_skill,
)
from skill_installer.source import SkillSourceNotFound, skill_source
from skill_installer.validate import validate_skill

AGENT_CHOICE = click.Choice(list(AGENTS))
SCOPE_OPTION = click.option(
    "--scope",
    type=click.Choice(["project", "user"]),
    default="project",
    show_default=True,
    help="project: folders under --dir; user: folders under your home directory.",
)
DIR_OPTION = click.option(
    "--dir",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The project root.",
)


def _fail(message: str, status: int = 1) -> None:
    click.echo(f"grpo-check skill: {message}", err=True)
    raise SystemExit(status)


def _chosen_agents(agent_names: tuple[str, ...], all_agents: bool) -> list[str] | None:
    if all_agents or not agent_names:
        return None
    return list(agent_names)


@click.group("skill")
def skill() -> None:
    """Install, uninstall, validate and list the grpo skill for coding agents."""


@skill.command("install")
@click.option("--agent", "agent_names", type=AGENT_CHOICE, multiple=True, help="Repeatable.")
@click.option("--all", "all_agents", is_flag=True, help="Every supported agent (the default).")
@SCOPE_OPTION
@DIR_OPTION
@click.option(
    "--force", is_flag=True, help="Replace a folder not installed by us, or edited since."
)
@click.option("--link", is_flag=True, help="Symlink instead of copying (some agents skip links).")
def install_command(agent_names, all_agents, scope, project_dir, force, link) -> None:
    """Copy the skill into each agent's skill folder, then confirm that it loads."""
    try:
        report = install_skill(
            project_dir.resolve(),
            _chosen_agents(agent_names, all_agents),
            scope,
            force=force,
            link=link,
        )
    except (InstallRefused, SkillSourceNotFound, ValueError, OSError) as exc:
        _fail(str(exc))
    for result in report.folders:
        click.echo(f"{result.action}: {result.folder}")
        click.echo(f"  loaded by: {', '.join(result.agents) or 'no supported agent'}")
        if result.load_problems:
            click.echo(f"  DOES NOT LOAD: {'; '.join(result.load_problems)}")
        else:
            click.echo(
                "  loads: SKILL.md parsed, name matches folder, description present, references found"
            )
        if result.created_root:
            click.echo("  new skills folder: restart running agents so that they see it")
    for warning in report.duplicates:
        click.echo(f"warning: {warning}")
    if report.duplicates:
        click.echo(
            "  Claude Code reads only .claude/skills, and Codex and Gemini do not read it, so serving"
            " them all takes two folders; an agent reading both keeps one copy by name. Uninstall"
            " the copies you do not need if an agent lists the skill twice."
        )
    if link:
        click.echo(
            "note: Codex and Copilot CLI have ignored symlinked skills; copy if they miss it"
        )
    if not report.loads:
        raise SystemExit(1)


@skill.command("uninstall")
@click.option("--agent", "agent_names", type=AGENT_CHOICE, multiple=True, help="Repeatable.")
@click.option("--all", "all_agents", is_flag=True, help="Every supported agent (the default).")
@SCOPE_OPTION
@DIR_OPTION
@click.option(
    "--force", is_flag=True, help="Also remove copies we installed that were edited since."
)
def uninstall_command(agent_names, all_agents, scope, project_dir, force) -> None:
    """Remove the copies this command installed; never a folder it did not install."""
    try:
        results = uninstall_skill(
            project_dir.resolve(), _chosen_agents(agent_names, all_agents), scope, force=force
        )
    except (InstallRefused, SkillSourceNotFound, ValueError, OSError) as exc:
        _fail(str(exc))
    for result in results:
        click.echo(
            f"{'removed' if result.action == 'removed' else 'not installed'}: {result.folder}"
        )


@skill.command("validate")
@click.argument("path", required=False, type=click.Path(path_type=Path))
def validate_command(path: Path | None) -> None:
    """Check a skill folder (default: the grpo skill this package ships); exit 1 on errors."""
    if path is None:
        try:
            path = skill_source()
        except SkillSourceNotFound as exc:
            _fail(str(exc), status=2)
    if path.name == "SKILL.md":
        path = path.parent
    if not path.exists():
        _fail(f"no such folder: {path}", status=2)
    problems = validate_skill(path.resolve())
    for problem in problems:
        click.echo(str(problem), err=problem.level == "error")
    errors = sum(problem.level == "error" for problem in problems)
    if errors:
        click.echo(f"{path}: {errors} error(s); agents may skip or misload this skill", err=True)
        raise SystemExit(1)
    click.echo(f"valid: {path}")


@skill.command("list")
@DIR_OPTION
def list_command(project_dir: Path) -> None:
    """Every grpo skill folder in this project and for this user, who loads it, and its status."""
    try:
        installations = find_installations(project_dir.resolve())
    except SkillSourceNotFound as exc:
        _fail(str(exc), status=2)
    if not installations:
        click.echo("no grpo skill installed here or for this user; run: grpo-check skill install")
        return
    for found in installations:
        click.echo(f"{found.status:9} {found.folder}")
        click.echo(f"          loaded by: {', '.join(found.agents)}")
    click.echo(
        "current = same as this package; stale = an older copy (re-run install); "
        "modified = edited after install; foreign = not installed by grpo-check"
    )
