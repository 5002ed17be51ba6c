"""The repository's products stay apart, and the built wheels carry everything their commands use.

Products: `checker` (the grpo-check engine), `reference_impl` (the reference and the protocol),
`skill_installer` (`grpo-check skill`), `task_harness` (`grpo-check tasks`, its own
distribution). The import graph keeps each product's internals its own; the wheel test installs
the two built wheels in a fresh virtual environment and runs one command of each group from an
empty folder, as a new user would.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PRODUCTS = ("checker", "reference_impl", "skill_installer", "task_harness")

# Which products each product may import, and how deep: "*" any module, "top" only the package's
# public top level (`from skill_installer import install_skill`), a dotted name only that module
# and its submodules (the user family's verifier ships grpo-check's subclass driver to its
# children, `task_harness/verifier/user_probes.py`).
ALLOWED = {
    "checker": {"reference_impl": "*"},
    "reference_impl": {},
    "skill_installer": {},
    "task_harness": {
        "reference_impl": "*",
        "skill_installer": "top",
        "checker": "checker.adapters",
    },
}


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name `path` imports, at any depth of the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def violations(product: str) -> list[str]:
    found = []
    for path in sorted((REPO / product).rglob("*.py")):
        for module in imported_modules(path):
            other = module.split(".")[0]
            if other == product or other not in PRODUCTS:
                continue
            rule = ALLOWED[product].get(other)
            if rule == "*" or (rule == "top" and module == other):
                continue
            if rule and "." in rule and (module == rule or module.startswith(f"{rule}.")):
                continue
            found.append(f"{path.relative_to(REPO)} imports {module}")
    return found


@pytest.mark.parametrize("product", PRODUCTS)
def test_no_product_imports_another_products_internals(product):
    assert violations(product) == []


def test_the_import_rule_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The graph check is not vacuous: an engine module importing the harness is reported."""
    fake = tmp_path / "checker"
    fake.mkdir()
    (fake / "leak.py").write_text("def f():\n    from task_harness.runner import run_trial\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert violations("checker") == ["checker/leak.py imports task_harness.runner"]


def module_name(root: Path, path: Path) -> str:
    """`checker/checks/__init__.py` -> `checker.checks`; `checker/report.py` -> `checker.report`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges(root: Path, product: str) -> dict[str, set[str]]:
    """Module -> the product's modules it imports, at any depth of the file (a function-level
    import closes a circle as surely as a top-level one). `from a import b` is an edge to the
    module `a.b` when it exists, else to `a`; relative imports are resolved."""
    paths = sorted((root / product).rglob("*.py"))
    modules = {module_name(root, path): path for path in paths}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    targets.add(
                        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    )
        edges[name] = {t for t in targets if t in modules and t != name}
    return edges


def import_circles(root: Path, product: str) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    edges = import_edges(root, product)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(edges[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(circles)


@pytest.mark.parametrize("product", PRODUCTS)
def test_no_import_circles(product):
    assert import_circles(REPO, product) == []


def test_the_circle_rule_sees_a_circle_through_a_function_level_import(tmp_path):
    """The circle check is not vacuous: the registry -> context -> registry circle that a
    function-level import in checks/__init__.py once closed is reported."""
    checks = tmp_path / "checker" / "checks"
    checks.mkdir(parents=True)
    (tmp_path / "checker" / "__init__.py").write_text("")
    (tmp_path / "checker" / "report.py").write_text("from checker.checks import CheckResult\n")
    (checks / "__init__.py").write_text(
        "def run_one():\n    from checker.checks.context import Context\n"
    )
    (checks / "context.py").write_text("from ..report import short\n")
    circles = import_circles(tmp_path, "checker")
    assert circles == [["checker.checks", "checker.checks.context", "checker.report"]]


# ---------------------------------------------------------------------------------------------
# The wheels, installed apart from the checkout


OWN_ENTRIES = ("grpo_skill", "__editable__", "_grpo_skill", "distutils-precedence.pth", *PRODUCTS)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv holding the two built wheels; the heavy dependencies (torch, TRL, ...) are
    the development venv's, seen through a folder of links that leaves out this project's own
    installs, so nothing of the checkout can be imported."""
    root = tmp_path_factory.mktemp("wheel-install")
    wheels = root / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), "."]
        + ["./packaging/grpo-skill-tasks"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + [str(w) for w in sorted(wheels.glob("*.whl"))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    dependencies = root / "dependencies"
    dependencies.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OWN_ENTRIES):
            (dependencies / entry.name).symlink_to(entry)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "development-dependencies.pth").write_text(f"{dependencies}\n")
    # ruff, a dependency of grpo-skill-tasks, is a binary that pip puts beside the venv's python
    (venv / "bin" / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    return venv


def run_installed(venv: Path, *args: str, cwd: Path, timeout: float = 600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRPO_SKILL_SOURCE")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["HOME"] = str(cwd / "home")
    return subprocess.run(
        [str(venv / "bin" / "grpo-check"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def empty_folder(tmp_path) -> Path:
    folder = tmp_path / "empty"
    (folder / "home").mkdir(parents=True)
    return folder


# The wheel tests share one venv, so they run on one worker.
wheel_group = pytest.mark.xdist_group("wheel")


@wheel_group
def test_installed_code_comes_from_the_wheels(wheel_venv, empty_folder):
    # Every module of the four packages imports from the wheel (the trial test below runs one
    # command path; this one catches a module the wheel lacks on any other). A module may need an
    # optional library that is not installed (verl's adapter needs verl), never one of ours.
    script = (
        "import importlib, pkgutil, checker, reference_impl, skill_installer, task_harness\n"
        "ours = ('checker', 'reference_impl', 'skill_installer', 'task_harness')\n"
        "for package in (checker, reference_impl, skill_installer, task_harness):\n"
        "    for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        try:\n"
        "            importlib.import_module(module.name)\n"
        "        except ModuleNotFoundError as error:\n"
        "            if error.name.split('.')[0] in ours:\n"
        "                raise\n"
        "print(checker.__file__, task_harness.__file__)"
    )
    done = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c", script],
        cwd=empty_folder,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    assert all(str(wheel_venv) in path for path in done.stdout.split()), done.stdout


@wheel_group
def test_tasks_list_and_an_oracle_trial_from_the_wheel(wheel_venv, empty_folder):
    listed = run_installed(wheel_venv, "tasks", "list", "--json", cwd=empty_folder)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == len(list((REPO / "tasks").glob("*/task.toml")))
    # One trial: the build, the runner's view, the verifier and its judges, all from the wheel
    # (`tasks verify` adds nop and baseline trials of the same path; tests/test_tasks_verify.py).
    ran = run_installed(
        wheel_venv,
        "tasks",
        "run",
        "rz-format-stop",
        "--agent",
        "oracle",
        "--out",
        "runs",
        cwd=empty_folder,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    (row,) = [json.loads(line) for line in (empty_folder / "runs" / "results.jsonl").open()]
    assert row["reward"] == 1.0 and row["status"] == "ok", row["detail"]


@wheel_group
def test_tasks_export_and_generate_from_the_wheel(wheel_venv, empty_folder):
    # One task: the listing above reads every spec from the wheel; an export needs the image's
    # copy of grpo-skill, which is the same for every task (tests/test_tasks_export.py exports all).
    exported = run_installed(
        wheel_venv,
        "tasks",
        "export",
        "--format",
        "harbor",
        "--skill",
        "out",
        "rz-format-stop",
        cwd=empty_folder,
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    folders = sorted((empty_folder / "out").iterdir())
    assert [folder.name for folder in folders] == ["rz-format-stop"]
    image = folders[0] / "environment" / "grpo-skill"
    assert (image / "site-packages" / "checker" / "cli.py").is_file()
    assert (image / "share" / "grpo-skill" / "skills" / "grpo" / "SKILL.md").is_file()
    generated = run_installed(
        wheel_venv,
        "tasks",
        "generate",
        "--seed",
        "5",
        "--bugs",
        "1",
        "--no-verify",
        "--out",
        "gen",
        cwd=empty_folder,
    )
    assert generated.returncode == 0, generated.stderr[-2000:]
    # the instruction reports what the drawn bug's run measured (symptoms.describe), not the
    # fallback for a run nothing was measured on
    report = (empty_folder / "gen" / "gen-s5-k1" / "instruction.md").read_text().split("\n\n")[0]
    measured = " ".join(report.split()).split(" over each rollout. ", 1)[1]
    assert "rollouts" in measured and "does not learn as it used to" not in measured, report


@wheel_group
def test_skill_install_and_demo_from_the_wheel(wheel_venv, empty_folder):
    installed = run_installed(
        wheel_venv, "skill", "install", "--agent", "claude-code", cwd=empty_folder
    )
    assert installed.returncode == 0, installed.stderr
    assert (empty_folder / ".claude" / "skills" / "grpo" / "SKILL.md").is_file()
    demo = run_installed(wheel_venv, "demo", "--no-training", cwd=empty_folder)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "every check passes" in demo.stdout
