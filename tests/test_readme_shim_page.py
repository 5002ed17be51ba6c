"""The README's "Writing a shim" page states what the checks really pass each protocol function.

A recording candidate wraps `reference_impl`'s tensor functions and logs the rank and dtype of
every argument the light checks give it; each claim of the page's input table is then compared
with what was logged, so the page cannot promise a shape (say, `[B, T]` advantages) that no check
ever passes, or leave out one that a check does pass.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from checker.candidate import CandidateSpec
from checker.checks import all_checks
from checker.sandbox import run_in_process

README = Path(__file__).resolve().parent.parent / "README.md"
RECORDER = """
import json, os, torch
import reference_impl as ref

LOG = os.environ["SHIM_PAGE_LOG"]


def _shape(value):
    if isinstance(value, torch.Tensor):
        return {"rank": value.dim(), "dtype": str(value.dtype).removeprefix("torch.")}
    return {"type": type(value).__name__}


def _recorded(name):
    function = getattr(ref, name)

    def wrapped(*args, **kwargs):
        with open(LOG, "a") as log:
            log.write(json.dumps([name, [_shape(a) for a in args],
                                  {k: _shape(v) for k, v in kwargs.items()}]) + "\\n")
        return function(*args, **kwargs)

    return wrapped


for _name in ("combine_rewards", "compute_advantages", "selective_log_softmax",
              "completion_logps", "completion_mask", "per_token_kl", "compute_loss"):
    globals()[_name] = _recorded(_name)
"""


def shim_table() -> dict[str, str]:
    """The page's input table: function name -> its inputs cell."""
    page = README.read_text().split("### Writing a shim", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+)\(.*?\)` \| (.+?) \| .+? \|$", page, flags=re.MULTILINE)
    return dict(rows)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, list]:
    folder = tmp_path_factory.mktemp("shim_page")
    (folder / "recorder.py").write_text(RECORDER)
    log = folder / "calls.jsonl"
    spec = CandidateSpec(str(folder / "recorder.py"), "functions", path=str(folder / "recorder.py"))
    stages = ("rewards", "advantages", "logprobs", "masking", "ratio", "clipping", "kl")
    checks = [c for c in all_checks(stages) if not c.heavy]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIM_PAGE_LOG", str(log))
        run_in_process(spec, checks, seed=1234)
    sys.modules.pop("recorder", None)
    calls: dict[str, list] = {}
    for line in log.read_text().splitlines():
        name, args, kwargs = json.loads(line)
        calls.setdefault(name, []).append((args, kwargs))
    return calls


def ranks(calls: list, position: int) -> set[int]:
    return {args[position]["rank"] for args, _ in calls if len(args) > position}


def dtypes(calls: list, position: int) -> set[str]:
    return {args[position]["dtype"] for args, _ in calls if len(args) > position}


def test_the_page_lists_every_tensor_function():
    assert set(shim_table()) >= {
        "combine_rewards",
        "compute_advantages",
        "selective_log_softmax",
        "completion_logps",
        "completion_mask",
        "per_token_kl",
        "compute_loss",
    }


def test_advantages_reach_compute_loss_one_per_completion(recorded):
    """The checks pass compute_loss `[B]` float advantages and never `[B, T]`: a trainer that
    takes token advantages expands them in its shim, and the page must say `[B]` alone."""
    assert ranks(recorded["compute_loss"], 1) == {1}
    assert dtypes(recorded["compute_loss"], 2) == {"int32"}  # the mask
    cell = shim_table()["compute_loss"]
    assert "advantages `[B]`" in cell and "[B, T]`)" not in cell, cell


def test_logits_ranks_and_index_dtype(recorded):
    """selective_log_softmax gets 3-D and 2-D logits and int64 indices of the leading shape."""
    assert ranks(recorded["selective_log_softmax"], 0) == {2, 3}
    assert dtypes(recorded["selective_log_softmax"], 1) == {"int64"}
    cell = shim_table()["selective_log_softmax"]
    assert "3-D `[B, T, V]` and 2-D `[B, V]`" in cell and "int64 `index`" in cell, cell


def test_flat_rewards_and_masks(recorded):
    """compute_advantages gets flat `[N]` float32 rewards and an int group size; combine_rewards
    `[N, K]`; completion_mask int64 `[B, T]` ids and a list of EOS ids; completion_logps 3-D
    logits, int64 ids and an int mask."""
    table = shim_table()
    advantages = recorded["compute_advantages"]
    assert ranks(advantages, 0) == {1} and dtypes(advantages, 0) == {"float32"}
    assert {args[1]["type"] for args, _ in advantages} == {"int"}
    assert "`[N]`" in table["compute_advantages"] and "an int" in table["compute_advantages"]
    assert ranks(recorded["combine_rewards"], 0) == {2}
    assert "`[N, K]`" in table["combine_rewards"]
    masks = recorded["completion_mask"]
    assert ranks(masks, 0) == {2} and dtypes(masks, 0) == {"int64"}
    assert {args[1]["type"] for args, _ in masks} == {"list"}
    assert "int64 `[B, T]`, a list of EOS ids" in table["completion_mask"]
    logps = recorded["completion_logps"]
    assert (ranks(logps, 0), dtypes(logps, 1), dtypes(logps, 2)) == ({3}, {"int64"}, {"int32"})
    assert "`[B, L, V]`, int64 `[B, L]`, int `[B, T]`" in table["completion_logps"]
