"""Find the grpo skill folder this package ships, and hash skill folders file by file."""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

from skill_installer.agents import SKILL_NAME

# Written into every folder we install; never part of the skill itself.
MANIFEST_NAME = ".grpo-skill-install.json"
# Folders and files that installers drop and agents never read.
IGNORED_NAMES = {MANIFEST_NAME, "__pycache__", ".DS_Store", ".git"}


class SkillSourceNotFound(RuntimeError):
    """The skill folder is neither in the source tree nor in the installed data files."""


def candidate_sources() -> list[Path]:
    """Where the skill may be, most specific first.

    1. `$GRPO_SKILL_SOURCE` (an explicit override, e.g. for a checkout elsewhere);
    2. `skills/grpo` next to this package (a source tree or an editable install);
    3. `<prefix>/share/grpo-skill/skills/grpo` (a wheel that ships the skill as data files).
    """
    candidates = []
    if os.environ.get("GRPO_SKILL_SOURCE"):
        candidates.append(Path(os.environ["GRPO_SKILL_SOURCE"]))
    package_root = Path(__file__).resolve().parents[1]
    candidates.append(package_root / "skills" / SKILL_NAME)
    data_root = Path(sysconfig.get_paths()["data"])
    candidates.append(data_root / "share" / "grpo-skill" / "skills" / SKILL_NAME)
    return candidates


def skill_source() -> Path:
    """The first candidate that holds a SKILL.md."""
    for candidate in candidate_sources():
        if (candidate / "SKILL.md").is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidate_sources())
    raise SkillSourceNotFound(
        f"the grpo skill folder was not found (tried {tried}); set GRPO_SKILL_SOURCE to a copy"
    )


def skill_files(folder: Path) -> list[Path]:
    """Relative paths of the regular files of a skill folder, sorted, skipping ignored names."""
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in IGNORED_NAMES for part in relative.parts):
            continue
        if path.is_file():
            files.append(relative)
    return files


def file_hashes(folder: Path) -> dict[str, str]:
    """{relative posix path: sha256 hex} of every skill file in `folder`."""
    return {
        relative.as_posix(): hashlib.sha256((folder / relative).read_bytes()).hexdigest()
        for relative in skill_files(folder)
    }
