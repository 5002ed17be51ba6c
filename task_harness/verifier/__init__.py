"""The hidden verifier: these files are copied into each task's `tests/` and run from there."""
