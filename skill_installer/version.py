"""The version written into every install manifest: that of the installed grpo-skill distribution."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("grpo-skill")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+source"
