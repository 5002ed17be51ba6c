"""Where the parts the harness builds tasks from are, in a checkout or in an installed wheel.

The harness never assumes a repository around it: `reference_impl` and the skill are found as
installed (an editable install points into the checkout), and the task specs ship inside this
package as `specs/` (the wheel) or sit in the checkout's `tasks/` folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
# The projects' packages whose code a trial must leave alone (and the task image may carry).
PROJECT_PACKAGES = ("checker", "reference_impl", "skill_installer", "task_harness")


def package_dir(name: str) -> Path:
    """The folder of the importable package `name`, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def default_tasks_dir() -> Path:
    """The shipped task specs: `task_harness/specs` in a wheel, `tasks/` in a checkout."""
    shipped = HARNESS_DIR / "specs"
    return shipped if shipped.is_dir() else HARNESS_DIR.parent / "tasks"


def guarded_trees() -> dict[str, Path]:
    """{name: folder} of the project code installed here, which an agent must not change."""
    from skill_installer import skill_source

    trees = {}
    for name in PROJECT_PACKAGES:
        try:
            trees[name] = package_dir(name)
        except ModuleNotFoundError:
            continue
    trees["skill"] = skill_source()
    return trees
