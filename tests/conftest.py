"""Shared test set-up: offline Hugging Face, one torch thread per xdist worker."""

import os

# Nothing may reach the Hub: set before transformers, datasets or trl are imported.
for name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ.setdefault(name, "1")

import pytest  # noqa: E402
import torch  # noqa: E402

try:  # pytest 9.2's node ids; older pytest has none, and xdist's own grouping works there
    from _pytest.nodes import NodeId
except ImportError:
    NodeId = None

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: more threads per worker only adds contention.
    torch.set_num_threads(1)


def pytest_sessionstart(session: pytest.Session) -> None:
    """`make test` (xdist's controller, before the workers start): install the TRL releases the
    suite uses side by side, so a cold cache costs one wait instead of one per release."""
    if session.config.getoption("numprocesses", None) and not hasattr(
        session.config, "workerinput"
    ):
        from trl_releases import prefetch

        prefetch()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test in its `xdist_group` for `--dist loadgroup` (xdist workers only).

    xdist 3.8 groups tests by appending `@group` to `item._nodeid`, but pytest 9.2 reads a node's
    id from `item._id`, so that rewrite is lost and every test is scheduled on its own: tests
    sharing a cached computation (a TRL release's reports) then compute it on both workers.
    """
    if NodeId is None or not config.getoption("loadgroup", False):
        return
    for item in items:
        groups = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            suffixed = f"{item._id.rest}@{'_'.join(sorted(groups))}"
            item._id = NodeId(path=item._id.path, names=(suffixed,))
