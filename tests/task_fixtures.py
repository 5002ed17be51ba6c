"""Task folders the tests use besides the shipped suite."""

from pathlib import Path

# The reference_impl-based (minigrpo) tasks, kept as test fixtures: copying reference_impl solves
# them, so the shipped suite holds rlzero tasks instead (tasks/rz-*).
MINIGRPO_TASKS = Path(__file__).resolve().parent / "data" / "tasks"
