"""Debug tasks whose fork is an older TRL release (`[grpo] trl_version`): built from that
release's package, scored against its semantics, in an agent environment that holds that
release's dependencies and no TRL but the fork (an xdist group of its own)."""

from __future__ import annotations

import json
import subprocess

import pytest

from task_harness.agent_env import agent_env, release_folders
from task_harness.build import build_task
from task_harness.releases import ReleaseUnavailable
from task_harness.runner import run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-old-release")
TASK = "trl017-tempered-weights"


def _or_skip(function, *args):
    try:
        return function(*args)
    except ReleaseUnavailable as error:  # the claims are about the release, not the network
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    (spec,) = load_tasks(ids=[TASK])
    return _or_skip(build_task, spec, tmp_path_factory.mktemp("built"))


def test_the_fork_is_the_named_release_and_judged_by_its_semantics(built):
    task = json.loads((built / "tests" / "task.json").read_text())
    assert task["fork_version"] == "0.17.0"
    init = (built / "environment" / "workspace" / "trl" / "trl" / "__init__.py").read_text()
    assert '__version__ = "0.17.0"' in init
    # TRL 0.17's own defaults, then the fork's intended customisation
    assert task["conventions"]["beta"] == 0.04 and task["conventions"]["temperature"] == 0.9
    assert task["conventions"]["nan_rewards"] == "excluded"
    dockerfile = (built / "environment" / "Dockerfile").read_text()
    assert "trl==0.17.0" in dockerfile and "transformers==4.57.6" in dockerfile


def test_oracle_scores_one_and_nop_scores_zero_on_every_bug(built):
    oracle = run_trial(built, "oracle")
    nop = run_trial(built, "nop")
    assert oracle.reward == 1.0, oracle.detail
    assert nop.reward == 0.0
    assert nop.bugs["scoring_ignores_temperature"] == 0.0
    assert nop.bugs["reward_weights_dropped"] == 0.0


def test_the_agent_env_of_an_old_release_holds_no_trl_but_the_fork():
    env = _or_skip(agent_env, "no-skill", "trl", "0.17.0")
    (site,) = env.glob("lib/python*/site-packages")
    trl_entries = sorted(e.name for e in site.iterdir() if e.name.lower().startswith("trl"))
    assert trl_entries == ["trl-0.17.0.dist-info", "trl-fork.pth"]
    assert not (site / "trl-0.17.0.dist-info" / "RECORD").exists()
    assert (site / "trl-fork.pth").read_text().strip() == "/app/trl"
    transformers = [e.name for e in site.glob("transformers-*.dist-info")]
    assert transformers == ["transformers-4.57.6.dist-info"]
    code = (
        "import importlib.util, transformers; "
        "print(importlib.util.find_spec('trl'), transformers.__version__)"
    )
    out = subprocess.run(
        [str(env / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-500:]
    # outside a workspace there is no /app/trl: nothing else answers `import trl`
    assert out.stdout.split() == ["None", "4.57.6"]
    assert release_folders("trl", "1.16.0") == []
