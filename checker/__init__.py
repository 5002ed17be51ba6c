"""grpo-check: finds and localises bugs in GRPO trainers by comparing them with `reference_impl`."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("grpo-skill")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
