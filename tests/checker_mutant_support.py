"""Apply a reference mutant to a private copy of reference_impl and run grpo-check on it.

The copy is renamed (`reference_impl` -> `grpo_mutant_<id>`) so that it can be imported next to
the real reference, which the checker compares against. The repository is never modified.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from checker.candidate import CandidateSpec
from checker.checks import CheckResult, all_checks
from checker.diagnosis import diagnose
from checker.sandbox import run_in_process
from task_harness.installed import package_dir
from task_harness.mutants import Mutant

SEED = 1234


def mutated_package(mutant: Mutant, root: Path) -> Path:
    """Copy reference_impl under root, apply the mutant, rename the package; returns __init__.py."""
    name = f"grpo_mutant_{mutant.id}"
    package = root / name
    shutil.copytree(
        package_dir("reference_impl"), package, ignore=shutil.ignore_patterns("__pycache__")
    )
    target = package / Path(mutant.file).relative_to("reference_impl")
    target.write_text(mutant.apply_to_text(target.read_text()))
    for source in package.glob("*.py"):
        source.write_text(source.read_text().replace("reference_impl", name))
    return package / "__init__.py"


def check_package(init_file: Path) -> tuple[list[CheckResult], dict | None]:
    spec = CandidateSpec(str(init_file), "functions", path=str(init_file))
    results = run_in_process(spec, all_checks(), SEED)
    return results, diagnose(results)
