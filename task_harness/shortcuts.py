"""The shortcut baselines of `tasks verify`: scripted agents that score without debugging.

A debug task measures debugging only if copying a known-good implementation over the workspace
does not score. Two such agents run on every task they apply to:

- `upstream-restore` (trl family): replaces every file of the workspace's TRL fork by the same
  file of upstream TRL at the fork's version, downloaded from the package registry (as an agent
  with network can) and cached under `<project cache>/upstream/`.
- `upstream-hunks` (trl family): the same release, restored hunk by hunk as an agent that
  diffs the fork with it would: every hunk of `diff -u` (3 lines of context) that carries no
  fork comment (`# ... fork ...`) and names nothing NOTES.md names in backticks goes back to
  upstream's text; the others, the fork's customisations as the agent reads them, stay.
- `reference-copy` (reference family): puts `reference_impl`'s stage functions in place of the
  trainer's, as an agent that found grpo-skill's reference would: its modules under
  `<package>/_reference/` and, appended to each of the trainer's modules, functions of the
  trainer's names that call them (`trainers/<trainer>_reference_copy.py`).

- `stock-trainer` (user family): removes every override of the user's GRPOTrainer subclass (its
  class body becomes `pass`), as an agent that "goes back to upstream" would: the trainer is
  then TRL's own, whose defaults are not the user's conventions.

All run on the runner's side, like `oracle`: they are ours, not an outside agent.
"""

from __future__ import annotations

import difflib
import keyword
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from task_harness.installed import package_dir

SHORTCUTS = ("upstream-restore", "upstream-hunks", "reference-copy", "stock-trainer")
# Which family a shortcut applies to; `tasks verify` omits it elsewhere.
FAMILY = {
    "upstream-restore": "trl",
    "upstream-hunks": "trl",
    "reference-copy": "reference",
    "stock-trainer": "user",
}
# The hunks `upstream-hunks` reads: `diff -u`'s, with 3 lines of context either side.
HUNK_CONTEXT = 3
FORK_COMMENT = re.compile(r"#.*\bfork\b", re.IGNORECASE)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


class ShortcutUnavailable(RuntimeError):
    """The shortcut cannot be taken here (the registry is unreachable, the fork has no version)."""


def applies(shortcut: str, family: str) -> bool:
    return FAMILY[shortcut] == family


def take(shortcut: str, workspace: Path, task: dict) -> list[str]:
    """Apply `shortcut` to `workspace` of the built task (its `task.json`), leaving the files the
    instruction forbids editing alone; the files it replaced, relative to the workspace."""
    keep = frozenset(task["protected"])
    if shortcut in ("upstream-restore", "upstream-hunks"):
        version = fork_version(workspace) or task.get("fork_version")
        if not version:
            raise ShortcutUnavailable("the fork says no TRL version")
        if shortcut == "upstream-hunks":
            notes = workspace / "NOTES.md"
            names = notes_names(notes.read_text() if notes.is_file() else "")
            return restore_upstream_hunks(workspace, version, names, keep)
        return restore_upstream_trl(workspace, version, keep)
    if shortcut == "stock-trainer":
        return strip_overrides(workspace / task["package"], keep)
    if shortcut == "reference-copy":
        return copy_reference_mapped(workspace, task["trainer"], keep)
    raise ValueError(f"unknown shortcut {shortcut!r}; known: {', '.join(SHORTCUTS)}")


def strip_overrides(package: Path, keep: frozenset[str] = frozenset()) -> list[str]:
    """Every class of `package` that derives from GRPOTrainer left with its docstring and
    `pass`: stock GRPOTrainer under the user's class name. The files it rewrote."""
    import ast

    rewritten = []
    for path in sorted(package.rglob("*.py")):
        relative = str(path.relative_to(package.parent))
        text = path.read_text()
        if relative in keep or "GRPOTrainer" not in text:
            continue
        lines = text.splitlines(keepends=True)
        classes = [
            node
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ClassDef)
            and any(
                getattr(base, "id", getattr(base, "attr", "")) == "GRPOTrainer"
                for base in node.bases
            )
        ]
        for node in sorted(classes, key=lambda n: n.lineno, reverse=True):
            body = node.body
            has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            start = body[1].lineno if has_doc and len(body) > 1 else body[0].lineno
            if has_doc and len(body) == 1:
                continue
            indent = " " * body[0].col_offset
            lines[start - 1 : node.end_lineno] = [f"{indent}pass\n"]
        if classes:
            path.write_text("".join(lines))
            rewritten.append(relative)
    return rewritten


def fork_version(workspace: Path) -> str | None:
    """The release the workspace's TRL fork states (`trl/trl/__init__.py`'s __version__ literal,
    as releases up to 0.2x write it); None when it reads the version from installed metadata."""
    init = workspace / "trl" / "trl" / "__init__.py"
    match = VERSION_LINE.search(init.read_text()) if init.is_file() else None
    return match.group(1) if match else None


def upstream_trl(version: str) -> Path:
    """The `trl` package folder of upstream release `version`, from the registry, cached."""
    from reference_impl.tiny import cache_root

    final = cache_root() / "upstream" / f"trl-{version}"
    if (final / "trl" / "__init__.py").is_file():
        return final / "trl"
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--disable-pip-version-check", "--only-binary", ":all:"]
        command += ["--dest", scratch, f"trl=={version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(scratch).glob("trl-*.whl"))
        if done.returncode != 0 or not wheels:
            cause = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise ShortcutUnavailable(f"cannot download trl=={version}: {cause[:200]}")
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(unpacked)
        if not final.exists():  # another process may have finished the same download first
            unpacked.rename(final)
    return final / "trl"


def restore_upstream_trl(
    workspace: Path, version: str, keep: frozenset[str] = frozenset()
) -> list[str]:
    """Every file of the fork that upstream release `version` also has, replaced by upstream's."""
    fork = workspace / "trl" / "trl"
    if not fork.is_dir():
        raise ShortcutUnavailable(f"the workspace has no TRL fork at {fork}")
    upstream = upstream_trl(version)
    replaced = []
    for theirs in sorted(upstream.rglob("*")):
        ours = fork / theirs.relative_to(upstream)
        relative = str(ours.relative_to(workspace))
        if relative in keep or not (theirs.is_file() and ours.is_file()):
            continue
        if ours.read_bytes() != theirs.read_bytes():
            shutil.copyfile(theirs, ours)
            replaced.append(relative)
    return replaced


def notes_names(notes: str) -> frozenset[str]:
    """The identifiers the project notes name in backticks (`GRPOConfig.scale_rewards` names
    GRPOConfig and scale_rewards), without Python keywords and words of fewer than 3 letters."""
    quoted = re.findall(r"`([^`\n]+)`", notes)
    words = {word for span in quoted for word in IDENTIFIER.findall(span)}
    return frozenset(w for w in words if len(w) >= 3 and not keyword.iskeyword(w))


def kept_hunk(lines: list[str], fork_lines: list[str], names: frozenset[str]) -> bool:
    """A hunk an agent keeps as the fork's own: one of its fork-side lines is a fork comment, or
    one of its lines (either side, context included) names what the notes name."""
    if any(FORK_COMMENT.search(line) for line in fork_lines):
        return True
    return any(word in names for line in lines for word in IDENTIFIER.findall(line))


def revert_hunks(upstream: str, fork: str, names: frozenset[str]) -> str:
    """`fork` with every hunk of its diff against `upstream` that `kept_hunk` does not keep put
    back to upstream's text."""
    theirs, ours = upstream.splitlines(keepends=True), fork.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, theirs, ours, autojunk=False)
    # A copy: get_grouped_opcodes trims the first and last `equal` of the matcher's own list.
    opcodes = list(matcher.get_opcodes())
    revert = set()
    for group in matcher.get_grouped_opcodes(HUNK_CONTEXT):
        fork_lines = [line for _, _, _, j1, j2 in group for line in ours[j1:j2]]
        changed = [line for tag, i1, i2, _, _ in group if tag != "equal" for line in theirs[i1:i2]]
        if not kept_hunk(fork_lines + changed, fork_lines, names):
            revert |= {op for op in group if op[0] != "equal"}
    out = []
    for op in opcodes:
        _, i1, i2, j1, j2 = op
        out += theirs[i1:i2] if op in revert else ours[j1:j2]
    return "".join(out)


def restore_upstream_hunks(
    workspace: Path, version: str, names: frozenset[str], keep: frozenset[str] = frozenset()
) -> list[str]:
    """Every fork file that upstream release `version` also has, with the hunks `kept_hunk`
    does not keep reverted to upstream's."""
    fork = workspace / "trl" / "trl"
    if not fork.is_dir():
        raise ShortcutUnavailable(f"the workspace has no TRL fork at {fork}")
    upstream = upstream_trl(version)
    replaced = []
    for theirs in sorted(upstream.rglob("*.py")):
        ours = fork / theirs.relative_to(upstream)
        relative = str(ours.relative_to(workspace))
        if relative in keep or not ours.is_file():
            continue
        text = ours.read_text()
        restored = revert_hunks(theirs.read_text(), text, names)
        if restored != text:
            ours.write_text(restored)
            replaced.append(relative)
    return replaced


def copy_reference_mapped(workspace: Path, trainer: str, keep: frozenset[str] = frozenset()):
    """reference_impl as `<trainer>/_reference/`, and the shims of `trainer` appended to its
    modules, so each of the trainer's stage functions is reference_impl's under the trainer's
    name."""
    import importlib

    shims = importlib.import_module(f"task_harness.trainers.{trainer}_reference_copy").SHIMS
    target = workspace / trainer
    if not target.is_dir():
        raise ShortcutUnavailable(f"the workspace has no package {trainer}/")
    copied = target / "_reference"
    shutil.copytree(
        package_dir("reference_impl"), copied, ignore=shutil.ignore_patterns("__pycache__")
    )
    for module in copied.rglob("*.py"):
        module.write_text(module.read_text().replace("reference_impl", f"{trainer}._reference"))
    replaced = [str(copied.relative_to(workspace))]
    for relative, shim in shims.items():
        path = workspace / relative
        if relative in keep or not path.is_file():
            continue
        path.write_text(path.read_text() + "\n" + shim)
        replaced.append(relative)
    return replaced
