"""Validate a skill folder against the Agent Skills spec and the stricter limits of real clients.

Every rule is one small function that returns the problems it found. Errors make a skill fail
to load in at least one client (or fail the spec); warnings are portability and size advice.
Sources: agentskills.io specification, skills-ref 0.1.1, the Codex loader, Anthropic's upload
rules and `quick_validate.py`, `gh skill publish`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from skill_installer.source import IGNORED_NAMES, skill_files

ALLOWED_FIELDS = {"name", "description", "license", "allowed-tools", "metadata", "compatibility"}
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
NAME_MAX = 64
DESCRIPTION_MAX = 1024  # the spec's limit, and a hard skip in Codex
COMPATIBILITY_MAX = 500
RESERVED_WORDS = ("anthropic", "claude")  # rejected in names by Anthropic's skill upload
BODY_MAX_LINES = 500
BODY_MAX_TOKENS = 5000
TOC_AFTER_LINES = 100  # Anthropic's authoring advice: long reference files start with a contents
FILE_MAX_CHARS = 100_000  # well past what agents' file viewers show in one read
# Markdown links `[text](target)`; the target's first word, without an `#anchor`.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>#]*)[^)]*\)")


@dataclass(frozen=True)
class Problem:
    level: str  # "error" or "warning"
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"


@dataclass
class SkillDocument:
    frontmatter: dict
    body: str


class FrontmatterError(ValueError):
    """SKILL.md has no parseable YAML frontmatter."""


def parse_skill_md(text: str) -> SkillDocument:
    """Split SKILL.md into its YAML frontmatter (a mapping) and the Markdown body.

    Strict like Codex and skills-ref: `---` must be the very first line (no BOM, no blank line),
    the frontmatter ends at the next line that is exactly `---`, and the YAML must be a mapping.
    """
    if text.startswith("\ufeff"):
        raise FrontmatterError(
            "SKILL.md starts with a byte-order mark; save it as UTF-8 without BOM"
        )
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        raise FrontmatterError("SKILL.md must start with a '---' line opening the YAML frontmatter")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.rstrip("\r") == "---")
    except StopIteration:
        raise FrontmatterError("the frontmatter has no closing '---' line") from None
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (frontmatter line {mark.line + 1})" if mark else ""
        raise FrontmatterError(
            f"the frontmatter is not valid YAML{where}: {getattr(exc, 'problem', exc)}; "
            "quote values that contain ': '"
        ) from None
    if not isinstance(data, dict):
        raise FrontmatterError("the frontmatter must be a YAML mapping of fields")
    return SkillDocument(frontmatter=data, body="\n".join(lines[end + 1 :]))


def check_fields(meta: dict) -> list[Problem]:
    """Only the six spec fields are allowed (skills-ref rejects any other key)."""
    extra = sorted(str(key) for key in meta if key not in ALLOWED_FIELDS)
    if extra:
        return [Problem("error", f"unexpected frontmatter field(s) {', '.join(extra)}")]
    return []


def check_name(meta: dict, folder: Path) -> list[Problem]:
    """name: 1-64 of a-z 0-9 and single hyphens, no reserved word, equal to the folder name."""
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        return [Problem("error", "'name' is missing or not a non-empty string")]
    problems = []
    if len(name) > NAME_MAX:
        problems.append(
            Problem("error", f"name is {len(name)} characters; the limit is {NAME_MAX}")
        )
    if not NAME_PATTERN.match(name):
        problems.append(
            Problem("error", f"name {name!r} must be lowercase a-z, 0-9 and single inner hyphens")
        )
    problems += [
        Problem("error", f"name {name!r} contains the reserved word {word!r}")
        for word in RESERVED_WORDS
        if word in name
    ]
    if name != folder.name:
        problems.append(Problem("error", f"name {name!r} differs from the folder {folder.name!r}"))
    return problems


def check_description(meta: dict) -> list[Problem]:
    """description: a non-empty string of at most 1024 characters with no angle brackets."""
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        return [Problem("error", "'description' is missing or not a non-empty string")]
    problems = []
    if len(description) > DESCRIPTION_MAX:
        problems.append(
            Problem(
                "error",
                f"description is {len(description)} characters; Codex skips skills over {DESCRIPTION_MAX}",
            )
        )
    if "<" in description or ">" in description:
        problems.append(Problem("error", "description contains '<' or '>' (rejected by Anthropic)"))
    return problems


def check_optional_fields(meta: dict) -> list[Problem]:
    """license, compatibility and allowed-tools are strings; metadata maps strings to strings."""
    problems = []
    for key in ("license", "compatibility", "allowed-tools"):
        if key in meta and not isinstance(meta[key], str):
            problems.append(Problem("error", f"'{key}' must be a string"))
    compatibility = meta.get("compatibility")
    if isinstance(compatibility, str) and len(compatibility) > COMPATIBILITY_MAX:
        problems.append(
            Problem(
                "error",
                f"compatibility is {len(compatibility)} characters; limit {COMPATIBILITY_MAX}",
            )
        )
    metadata = meta.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        problems.append(
            Problem("error", "'metadata' must map strings to strings (quote values like \"0.1\")")
        )
    if "license" not in meta:
        problems.append(Problem("warning", "no 'license' field"))
    return problems


def check_body_size(body: str) -> list[Problem]:
    """The body should stay under 500 lines and about 5,000 tokens (about 4 characters a token)."""
    problems = []
    lines = body.count("\n") + 1
    if lines > BODY_MAX_LINES:
        problems.append(
            Problem("warning", f"SKILL.md body has {lines} lines; keep it under {BODY_MAX_LINES}")
        )
    tokens = len(body) // 4
    if tokens > BODY_MAX_TOKENS:
        problems.append(
            Problem(
                "warning",
                f"SKILL.md body is about {tokens} tokens; keep it under {BODY_MAX_TOKENS}",
            )
        )
    return problems


def local_links(markdown: str) -> list[str]:
    """Targets of Markdown links that point at files (not URLs, not same-file anchors)."""
    return [
        target
        for target in LINK.findall(markdown)
        if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)
    ]


def check_references(folder: Path, body: str) -> list[Problem]:
    """Files linked from SKILL.md exist inside the skill, and do not link on (one level deep)."""
    problems = []
    root = folder.resolve()
    for target in sorted(set(local_links(body))):
        path = (folder / target).resolve()
        if not path.is_relative_to(root):
            problems.append(Problem("error", f"SKILL.md links outside the skill: {target}"))
        elif not path.is_file():
            problems.append(Problem("error", f"SKILL.md links to a missing file: {target}"))
        elif path.suffix == ".md":
            nested = [t for t in local_links(path.read_text(encoding="utf-8")) if t.endswith(".md")]
            if nested:
                problems.append(
                    Problem(
                        "error", f"{target} links on to {nested[0]}; keep references one level deep"
                    )
                )
    return problems


def check_files(folder: Path) -> list[Problem]:
    """Every file is UTF-8 text of a readable size; long references start with a contents list."""
    problems = []
    for relative in skill_files(folder):
        path = folder / relative
        if path.is_symlink():
            problems.append(
                Problem("warning", f"{relative} is a symlink; several installers drop them")
            )
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary assets are allowed
        if len(text) > FILE_MAX_CHARS:
            problems.append(
                Problem(
                    "warning", f"{relative} is {len(text)} characters; agents may read it truncated"
                )
            )
        if relative.parts[0] == "references" and text.count("\n") > TOC_AFTER_LINES:
            head = "\n".join(text.split("\n")[:40]).lower()
            if "contents" not in head:
                problems.append(
                    Problem("warning", f"{relative} is long and has no contents list near the top")
                )
    return problems


def validate_skill(folder: Path) -> list[Problem]:
    """Every problem of the skill in `folder`; no errors means it loads in every client we know."""
    if not folder.is_dir():
        return [Problem("error", f"not a folder: {folder}")]
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        hint = (
            " (found skill.md: the name must be exactly SKILL.md)"
            if (folder / "skill.md").exists()
            else ""
        )
        return [Problem("error", f"no SKILL.md in {folder}{hint}")]
    try:
        document = parse_skill_md(skill_md.read_text(encoding="utf-8"))
    except (FrontmatterError, UnicodeDecodeError) as exc:
        return [Problem("error", str(exc))]
    meta = document.frontmatter
    hidden = [
        name
        for name in (p.name for p in folder.iterdir())
        if name.startswith((".", "_")) and name not in IGNORED_NAMES
    ]
    extra = [
        Problem("warning", f"{name} starts with '.' or '_'; some installers drop it")
        for name in hidden
    ]
    return (
        check_fields(meta)
        + check_name(meta, folder)
        + check_description(meta)
        + check_optional_fields(meta)
        + check_body_size(document.body)
        + check_references(folder, document.body)
        + check_files(folder)
        + extra
    )


def confirm_loads(folder: Path) -> list[str]:
    """Re-read an installed folder the way agents do; the reasons it would not load (empty = loads).

    Agents parse the frontmatter strictly, use the folder name as the skill's identity, skip a
    skill without a description, and follow SKILL.md's links to the references.
    """
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        return [f"no SKILL.md file in {folder}"]
    try:
        document = parse_skill_md(skill_md.read_text(encoding="utf-8"))
    except (FrontmatterError, UnicodeDecodeError) as exc:
        return [str(exc)]
    checks = check_name(document.frontmatter, folder) + check_description(document.frontmatter)
    checks += check_references(folder, document.body)
    return [p.message for p in checks if p.level == "error"]
