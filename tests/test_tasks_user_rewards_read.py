"""The user family's rewards probe reads the subclass's combined reward whatever it names its
advantages.

grpo-check reads a subclass's combined `rewards` from its `_generate_and_score_completions` once
the local `advantages` is bound (TRL's names). A blind agent on user-gspo-filter (2026-12-06)
fixed the unscored row and named the advantages `all_advantages`: the subclass never bound
`advantages`, the probe read TRL's own ungated sum from the base method's frame, and the correct
fix scored 0. A frame that never binds `advantages` now has `rewards` read when it returns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from task_harness.build import build_task
from task_harness.spec import load_tasks
from task_harness.verifier import jail
from tests.user_task_scoring import bug_score

pytestmark = [
    pytest.mark.xdist_group("tasks-user-rewards-read"),
    pytest.mark.skipif(
        not jail.available(), reason="the verifier's children need root and unshare"
    ),
]

NAMED_ADVANTAGES = (
    "        advantages = self.group_advantages(rewards)\n"
    '        output["advantages"] = advantages\n'
)
OWN_NAME = (
    "        all_advantages = self.group_advantages(rewards)\n"
    '        output["advantages"] = all_advantages\n'
)
NAN_KEPT = (
    "        scores = torch.nan_to_num(rewards_per_func, nan=0.0) * weights\n",
    "        scores = rewards_per_func * weights\n",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["user-gspo-filter"])
    return build_task(spec, tmp_path_factory.mktemp("built"))


def _rewards_score(built: Path, tmp_path: Path, rewrite) -> tuple[float, str]:
    """The verifier's score of the rewards bug alone on the oracle with its advantages renamed
    and `rewrite` applied."""

    def renamed(source: str) -> str:
        assert NAMED_ADVANTAGES in source
        return rewrite(source.replace(NAMED_ADVANTAGES, OWN_NAME))

    return bug_score(built, tmp_path, "unscored_rows_nan", renamed)


def test_advantages_of_another_name_keep_the_subclass_reward_read(built, tmp_path):
    score, log = _rewards_score(built, tmp_path, lambda source: source)
    assert score == 1.0, log


def test_the_unscored_row_still_fails_under_another_name(built, tmp_path):
    def keep_nan(source: str) -> str:
        assert NAN_KEPT[0] in source
        return source.replace(*NAN_KEPT)

    score, log = _rewards_score(built, tmp_path, keep_nan)
    assert score == 0.0, log
    assert "rewards.combined_0" in log
