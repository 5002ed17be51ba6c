"""Install, uninstall and list copies of the grpo skill in coding agents' skill folders.

Rules, in the order they matter:
- never destroy work: a folder we did not install, or one edited since we installed it, is left
  alone unless `force` (and a folder we did not install is never removed);
- write atomically: the copy is built in a hidden temporary folder next to the target and renamed
  into place, so an interrupted install leaves either the old folder or the new one, never half;
- copy by default: Codex, Copilot CLI and Windows junctions have lost symlinked skills;
- install once per folder even when several agents share it (`.agents/skills`).

Ownership is recorded by a manifest file inside each installed folder holding the SHA-256 of
every file, so later runs can tell "ours and untouched" from "edited" from "someone else's".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from skill_installer.agents import (
    SCOPES,
    SKILL_NAME,
    Agent,
    agents_loading,
    all_load_roots,
    resolve_agents,
)
from skill_installer.source import MANIFEST_NAME, file_hashes, skill_files, skill_source
from skill_installer.validate import confirm_loads
from skill_installer.version import __version__

TEMP_PREFIX = ".grpo-skill-tmp-"

# Status of a `grpo` folder relative to this package's skill:
ABSENT = "absent"  # nothing there
CURRENT = "current"  # installed by us, untouched, same files as the skill we ship
STALE = "stale"  # installed by us, untouched, from another version of the skill
MODIFIED = "modified"  # installed by us, then edited
FOREIGN = "foreign"  # not installed by us (no manifest, or a symlink to somewhere else)


class InstallRefused(RuntimeError):
    """Installing or uninstalling would overwrite or delete work that is not ours to replace."""


@dataclass
class FolderResult:
    folder: Path
    action: str  # installed, updated, replaced, linked, unchanged, removed, absent
    agents: list[str] = field(default_factory=list)  # "claude-code (project)", ...
    load_problems: list[str] = field(default_factory=list)
    created_root: bool = False  # the skills folder did not exist: running agents need a restart


@dataclass
class InstallReport:
    """What `install_skill` did, per target folder, and the duplicates agents will now see."""

    source: Path
    folders: list[FolderResult]
    duplicates: list[str]

    @property
    def loads(self) -> bool:
        return all(not result.load_problems for result in self.folders)


def read_manifest(folder: Path) -> dict | None:
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (
        manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None
    )


def folder_status(folder: Path, source: Path) -> str:
    """ABSENT, CURRENT, STALE, MODIFIED or FOREIGN (see the constants above)."""
    if folder.is_symlink():
        return CURRENT if os.path.realpath(folder) == os.path.realpath(source) else FOREIGN
    if not folder.exists():
        return ABSENT
    manifest = read_manifest(folder)
    if manifest is None:
        return FOREIGN
    present = file_hashes(folder)
    if present != manifest["files"]:
        return MODIFIED
    return CURRENT if present == file_hashes(source) else STALE


def install_targets(agents: list[Agent], scope: str, project_dir: Path) -> list[Path]:
    """One `.../skills/grpo` folder per distinct install root, in agent order."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    targets: dict[Path, None] = {}
    for agent in agents:
        targets.setdefault(agent.install_root(scope, project_dir) / SKILL_NAME, None)
    return list(targets)


def install_skill(
    project_dir: Path,
    agents: list[str] | None = None,
    scope: str = "project",
    *,
    force: bool = False,
    link: bool = False,
    source: Path | None = None,
) -> InstallReport:
    """Install the grpo skill so that the given agents load it; returns an `InstallReport`.

    project_dir: the project (workspace) root; used for scope "project" and to tell which
        agents see each folder.
    agents: agent names from `skill_installer.agents.AGENTS` ("claude-code", "codex", "cursor",
        "gemini", "copilot", "opencode"); None means all of them.
    scope: "project" (folders under project_dir) or "user" (folders under HOME, honouring
        CLAUDE_CONFIG_DIR, CODEX_HOME and XDG_CONFIG_HOME).
    force: replace folders we did not install or that were edited since.
    link: symlink to the source instead of copying (several agents ignore symlinked skills).
    source: the skill folder to install; default: the one this package ships.

    Raises InstallRefused (nothing written) when a target is not ours to replace, ValueError on
    an unknown agent or scope, SkillSourceNotFound when the skill folder cannot be found.
    """
    project_dir = Path(project_dir)
    source = Path(source) if source is not None else skill_source()
    targets = install_targets(resolve_agents(agents), scope, project_dir)
    statuses = {target: folder_status(target, source) for target in targets}
    refuse_unowned(statuses, force, verb="overwrite")

    results = []
    for target, status in statuses.items():
        created_root = not target.parent.exists()
        if status == CURRENT and target.is_symlink() == link:
            action = "unchanged"
        else:
            write_atomically(source, target, link=link)
            action = {ABSENT: "linked" if link else "installed", STALE: "updated"}.get(
                status, "replaced"
            )
        results.append(
            FolderResult(
                folder=target,
                action=action,
                agents=_agent_labels(target, project_dir),
                load_problems=confirm_loads(target),
                created_root=created_root,
            )
        )
    return InstallReport(source=source, folders=results, duplicates=duplicate_warnings(project_dir))


def uninstall_skill(
    project_dir: Path,
    agents: list[str] | None = None,
    scope: str = "project",
    *,
    force: bool = False,
) -> list[FolderResult]:
    """Remove the grpo folders we installed for these agents; refuse on edited or foreign ones.

    `force` allows removing a copy we installed that was edited since; a folder we never
    installed is never removed.
    """
    project_dir = Path(project_dir)
    source = skill_source()
    targets = install_targets(resolve_agents(agents), scope, project_dir)
    statuses = {target: folder_status(target, source) for target in targets}
    foreign = [str(t) for t, s in statuses.items() if s == FOREIGN]
    if foreign:
        raise InstallRefused(
            f"not removing {', '.join(foreign)}: it was not installed by grpo-check"
        )
    refuse_unowned(statuses, force, verb="remove")
    results = []
    for target, status in statuses.items():
        if status == ABSENT:
            results.append(FolderResult(folder=target, action="absent"))
            continue
        _remove(target)
        results.append(FolderResult(folder=target, action="removed"))
    return results


def refuse_unowned(statuses: dict[Path, str], force: bool, verb: str) -> None:
    """Raise InstallRefused naming every folder that is foreign or edited, unless `force`."""
    if force:
        return
    reasons = {FOREIGN: "not installed by grpo-check", MODIFIED: "edited since it was installed"}
    blocked = [f"{target} ({reasons[s]})" for target, s in statuses.items() if s in reasons]
    if blocked:
        raise InstallRefused(
            f"refusing to {verb} {'; '.join(blocked)}. Move your changes away or pass --force."
        )


def write_atomically(source: Path, target: Path, *, link: bool = False) -> None:
    """Build the new folder (or symlink) beside `target`, then swap it in with renames."""
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(parent)
    if link:
        staged = parent / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        os.symlink(os.path.realpath(source), staged, target_is_directory=True)
    else:
        staged = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=parent))
    try:
        if not link:
            copy_skill(source, staged)
        _swap_into_place(staged, target)
    except BaseException:
        _remove(staged)
        raise


def copy_skill(source: Path, destination: Path) -> None:
    """Copy the skill's files (not caches, not a manifest) and record their hashes."""
    for relative in skill_files(source):
        (destination / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / relative, destination / relative)
    manifest = {
        "installed_by": "grpo-check skill install",
        "version": __version__,
        "source": str(source),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": file_hashes(destination),
    }
    (destination / MANIFEST_NAME).write_text(
        json.dumps(manifest, indent=2) + "\n", encoding="utf-8"
    )


def _swap_into_place(staged: Path, target: Path) -> None:
    """Rename `staged` to `target`; an existing target is moved aside first and restored on failure."""
    if not (target.exists() or target.is_symlink()):
        os.rename(staged, target)
        return
    old = target.parent / f"{TEMP_PREFIX}old-{uuid.uuid4().hex}"
    os.rename(target, old)
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(old, target)
        raise
    _remove(old)


def remove_leftovers(parent: Path) -> None:
    """Delete temporary folders that a killed install left next to the target."""
    for leftover in parent.glob(f"{TEMP_PREFIX}*"):
        _remove(leftover)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def _agent_labels(folder: Path, project_dir: Path) -> list[str]:
    return [f"{agent.name} ({scope})" for agent, scope in agents_loading(folder, project_dir)]


@dataclass
class Installation:
    folder: Path
    status: str
    agents: list[str]


def find_installations(project_dir: Path) -> list[Installation]:
    """Every `grpo` skill folder in any agent's project or user skill roots, with its status."""
    source = skill_source()
    found = []
    for root in all_load_roots(Path(project_dir)):
        folder = root / SKILL_NAME
        if folder.is_symlink() or (folder / "SKILL.md").is_file():
            found.append(
                Installation(
                    folder, folder_status(folder, source), _agent_labels(folder, project_dir)
                )
            )
    return found


def duplicate_warnings(project_dir: Path) -> list[str]:
    """One line per agent that would find more than one `grpo` skill folder."""
    installed = [i.folder for i in find_installations(project_dir)]
    warnings = []
    for agent in resolve_agents(None):
        roots = {
            os.path.realpath(root)
            for scope in SCOPES
            for root in agent.load_roots(scope, project_dir)
        }
        seen = [folder for folder in installed if os.path.realpath(folder.parent) in roots]
        if len(seen) > 1:
            identical = (
                len({json.dumps(file_hashes(folder), sort_keys=True) for folder in seen}) == 1
            )
            warnings.append(
                f"{agent.title} will find the grpo skill {len(seen)} times"
                + (" (identical copies)" if identical else " (the copies DIFFER)")
                + ": "
                + ", ".join(str(folder) for folder in seen)
            )
    return warnings
