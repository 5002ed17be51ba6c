"""Running the rlzero probes in the test process on one rlzero tree at a time, as the verifier's
child runs them on the agent's (tests/test_tasks_rlzero.py, tests/test_tasks_conventions.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from task_harness.verifier import rlzero_probes


def purge() -> None:
    """Forget every imported rlzero module, so that the next import reads another tree."""
    for name in [m for m in sys.modules if m == "rlzero" or m.startswith("rlzero.")]:
        del sys.modules[name]


def _with_tree(root: Path, run: Callable):
    purge()
    sys.path.insert(0, str(root))
    try:
        return run()
    finally:
        sys.path.remove(str(root))
        purge()


def observe(
    root: Path, stages: list[str], probes: list[str] | None = None, inputs: dict | None = None
) -> dict:
    """The probes of `stages` (and `probes`) on the rlzero under `root`, with the probes'
    `inputs` (the intended rlzero's, as the verifier passes them; None: `root` makes its own)."""
    return _with_tree(root, lambda: rlzero_probes.observe(stages, probes, inputs))


def inputs_of(root: Path) -> dict:
    """The probes' inputs as the rlzero under `root` makes them (verify.intended_inputs)."""
    return _with_tree(root, lambda: {"loop": rlzero_probes.loop_inputs()})
