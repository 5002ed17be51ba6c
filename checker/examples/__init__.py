"""Example trainers for `grpo-check demo` and the README: `buggy_grpo` has three real-world bugs."""
