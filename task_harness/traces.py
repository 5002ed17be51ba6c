"""What a bug patch must not leave in the workspace: traces that point at the patched lines.

A task is as hard as the easiest honest route to its bugs; reading text that sets the patched
files apart is such a route. A buggy workspace must look as an author who believed the bug would
have left it. Two parts of that are checkable, and checked here against the fixed workspace (the
buggy one with the oracle's files laid over it):

- no name the bug left unused: ruff's `F` rules find nothing in the buggy files that they do not
  find in the fixed ones (an import left unused, a local assigned and never read), no function,
  class or import that the fixed code reads and the buggy code no longer reads anywhere (the
  right helper left defined beside the bug), and no parameter a function no longer reads;
- one modification time for every workspace file (`task_harness/build.py`'s `stamp` gives it;
  `mtimes` reads it back).

The rest of the rule (a docstring, comment, help text or sibling branch that states the intended
behaviour at the bug site) is for the patch's author: see README.md's task-authoring section.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

RUFF_RULES = "F"


def mtimes(root: Path) -> dict[str, int]:
    """Every file under `root` (relative path) with its modification time in nanoseconds."""
    return {
        str(path.relative_to(root)): path.stat().st_mtime_ns
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def changed_files(buggy: Path, fixed: Path) -> list[str]:
    """The .py files (relative paths) whose text differs between the two trees."""
    names = {str(p.relative_to(buggy)) for p in buggy.rglob("*.py")}
    names |= {str(p.relative_to(fixed)) for p in fixed.rglob("*.py")}
    return sorted(
        name
        for name in names
        if not (buggy / name).is_file()
        or not (fixed / name).is_file()
        or (buggy / name).read_bytes() != (fixed / name).read_bytes()
    )


def _ruff() -> str:
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.exists() else shutil.which("ruff") or "ruff"


def ruff_findings(root: Path, files: list[str]) -> Counter:
    """ruff's `F` findings in `files` under `root`, as (file, rule, message) without lines."""
    present = [name for name in files if (root / name).is_file()]
    if not present:
        return Counter()
    result = subprocess.run(
        [_ruff(), "check", "--isolated", "--no-cache", "--select", RUFF_RULES]
        + ["--output-format", "json", "--exit-zero", *present],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return Counter(
        (str(Path(item["filename"]).relative_to(root.resolve())), item["code"], item["message"])
        for item in json.loads(result.stdout)
    )


def new_ruff_findings(buggy: Path, fixed: Path, files: list[str]) -> list[str]:
    """ruff `F` findings in the buggy files that the fixed files do not have."""
    extra = ruff_findings(buggy, files) - ruff_findings(fixed, files)
    return [f"{file}: {code} {message}" for file, code, message in sorted(extra)]


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return None


def _loaded(tree: ast.AST) -> set[str]:
    """Names read in `tree`: bare names and attribute names (a method read as `self.name`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _defined(tree: ast.AST) -> set[str]:
    """Functions, classes and imports defined in `tree`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _parameters(tree: ast.AST) -> dict[str, tuple[set[str], set[str]]]:
    """Each function (qualified by its enclosing classes and functions): its parameters but
    `self` and `cls`, and those of them that its body reads."""
    found: dict[str, tuple[set[str], set[str]]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                args = child.args
                params = {
                    a.arg
                    for a in args.posonlyargs
                    + args.args
                    + args.kwonlyargs
                    + [args.vararg, args.kwarg]
                    if a is not None
                } - {"self", "cls"}
                body = ast.Module(body=child.body, type_ignores=[])
                found[name] = (params, params & _loaded(body))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


def _mentions(text: str, names: set[str]) -> tuple[set[str], set[str]]:
    """Of `names`, those source `text` reads (mentions outside a def, class or import of them;
    a mention in a comment counts, so this errs towards "read") and those it defines."""
    alternatives = "|".join(map(re.escape, sorted(names)))
    words = Counter(re.findall(rf"\b({alternatives})\b", text))
    defining = Counter(re.findall(rf"\b(?:def|class)\s+({alternatives})\b", text))
    for statement in IMPORT.findall(text):
        defining.update(re.findall(rf"\b({alternatives})\b", statement))
    return {n for n in words if words[n] > defining[n]}, set(defining)


def unread_names(
    buggy: Path, fixed: Path, files: list[str], others: list[Path] | None = None
) -> list[str]:
    """Names the bug left unread: a function, class or import the fixed tree reads that no .py
    file of the buggy tree reads any more; a parameter a changed function no longer reads.
    `others`: the .py files the bugs leave unchanged (default: the rest of the buggy tree)."""
    trees = {name: (_parse(buggy / name), _parse(fixed / name)) for name in files}
    lost, defined = set(), set()
    unread = []
    for name, (after, before) in trees.items():
        if after is None or before is None:
            continue
        lost |= _loaded(before) - _loaded(after)
        defined |= _defined(after)
        read_before = {f: read for f, (_, read) in _parameters(before).items()}
        for function, (params, read) in sorted(_parameters(after).items()):
            for param in sorted(params & read_before.get(function, set()) - read):
                unread.append(f"{name}: parameter `{param}` of {function} is never read")
    for after, _ in trees.values():
        lost -= _loaded(after) if after is not None else set()
    if others is None:
        others = [p for p in buggy.rglob("*.py") if str(p.relative_to(buggy)) not in files]
    for path in others:
        if lost:
            read, defines = _mentions(path.read_text(errors="replace"), lost)
            lost -= read
            defined |= defines
    unread += [f"`{name}` is defined and no longer read" for name in sorted(lost & defined)]
    return unread


def unused_by_bugs(buggy: Path, fixed: Path, others: list[Path] | None = None) -> list[str]:
    """Everything the buggy tree leaves unused that the fixed tree uses (empty: no trace)."""
    files = changed_files(buggy, fixed)
    return new_ruff_findings(buggy, fixed, files) + unread_names(buggy, fixed, files, others)


def fixed_workspace(built: Path, target: Path) -> Path:
    """The workspace of the built task `built` with the oracle's files laid over it, at `target`."""
    shutil.copytree(built / "environment" / "workspace", target, symlinks=True)
    shutil.copytree(built / "solution" / "files", target, dirs_exist_ok=True)
    return target


def _source(spec) -> tuple[Path, str]:
    """The tree task `spec` patches, and the folder its patches' paths are relative to inside it."""
    from task_harness.build import TRAINERS, fork_source
    from task_harness.installed import package_dir

    if spec.trainer in ("rlzero", "mygrpo"):
        return TRAINERS / spec.trainer, ""
    if spec.family == "trl":
        return fork_source(spec), "trl"
    return package_dir("reference_impl"), "reference_impl"


def spec_traces(spec) -> list[str]:
    """What the bugs of task `spec` leave unused (`unused_by_bugs`); empty: no trace. The files
    its patches touch are copied and patched twice (setup only, setup and bugs); the others are
    read where they are."""
    import tempfile

    from task_harness.build import _apply

    source, prefix = _source(spec)
    touched = {f for patch in spec.patches for f in patch.mutant.files}
    with tempfile.TemporaryDirectory(prefix=f"grpo-traces-{spec.id}-") as scratch:
        buggy, fixed = Path(scratch) / "buggy", Path(scratch) / "fixed"
        for root in (buggy, fixed):
            for relative in touched:
                inside = Path(relative).relative_to(prefix) if prefix else Path(relative)
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source / inside, root / relative)
        _apply(fixed, spec, ("setup",))
        _apply(buggy, spec, ("setup", "bug"))
        others = [
            path
            for path in source.rglob("*.py")
            if str(Path(prefix) / path.relative_to(source)) not in touched
        ]
        return unused_by_bugs(buggy, fixed, others)
