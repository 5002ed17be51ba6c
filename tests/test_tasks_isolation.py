"""What the agent can see, per condition, under the local runner and in the Harbor image.

no-skill: nothing of this project (no grpo-check, no checker or reference_impl, no skill, no
harness, no verifier, no task spec). skill: the skill and grpo-check (checker, reference_impl),
still no task spec, patch, harness, verifier or oracle.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from task_harness.agent_env import GRPO_LIBRARIES
from task_harness.build import build_task
from task_harness.export import export_harbor
from task_harness.runner import run_trial
from task_harness.spec import load_tasks
from task_harness.verifier import jail

pytestmark = pytest.mark.xdist_group("tasks-isolation")

# Task internals: never visible to the agent, whatever the condition.
TASK_INTERNALS = [
    r"/task_harness(/|$)",
    r"grpo_skill_tasks",
    r"patches\.yaml$",
    r"/task\.json$",
    r"/solve\.sh$",
    # Outside /usr and site-packages: system and third-party packages (a cloud SDK's
    # `domains/verify.py`, HF kernels' `_internals/verify.py`) hold files of that name; the
    # harness's own copy in site-packages is matched by `/task_harness/` above.
    r"^/(?!usr/)(?!.*/site-packages/).*/verify\.py$",
    r"^/(?!usr/)(?!.*/site-packages/).*_probes\.py$",
    r"/expected/(rlzero|mygrpo)(/|$)",
    r"^/work(/|$)",
    r"grpo-trial-",
]
# The product: visible only with --skill.
PRODUCT = [
    r"/(checker|reference_impl|skill_installer)(/|$)",
    r"grpo_skill-",
    r"grpo-check$",
    r"/skills/grpo(/|$)",
    r"/share/grpo-skill",
    # Any copy of our skill; third-party packages ship skills of their own (typer's SKILL.md).
    r"/grpo[^/]*/SKILL\.md$",
]
FORBIDDEN = {"no-skill": TASK_INTERNALS + PRODUCT, "skill": TASK_INTERNALS}
ROOTS = "/app /home /tmp /opt /root /etc /usr /var /srv /mnt /run /work"

LIST_EVERYTHING = (
    f"find {ROOTS} -readable 2>/dev/null > /home/agent/files.txt; "
    'python -c "import importlib.metadata as m; '
    "print('\\n'.join(sorted(d.metadata['Name'] for d in m.distributions())))\" "
    "> /home/agent/dists.txt; "
    "python -c 'import checker' > /home/agent/import.txt 2>&1; echo $? >> /home/agent/import.txt; "
    "id -u > /home/agent/uid.txt; env > /home/agent/env.txt; "
    "cat /proc/self/mountinfo > /home/agent/mounts.txt; true"
)


def forbidden_paths(paths: list[str], condition: str) -> list[str]:
    patterns = [re.compile(p) for p in FORBIDDEN[condition]]
    return [p for p in paths if any(rule.search(p) for rule in patterns)]


def test_the_rules_see_a_leak():
    """Not vacuous: each condition's rules flag what it must not see, and pass what it may."""
    product = ["/opt/venv/lib/python3.11/site-packages/checker/cli.py", "/opt/grpo/SKILL.md"]
    internals = ["/tmp/x/tests/task.json", "/tmp/grpo/tests/verify.py", "/home/a/rlzero_probes.py"]
    internals += ["/tmp/x/tests/expected/rlzero/advantages.py"]
    internals += ["/opt/venv/lib/python3.11/site-packages/task_harness/verifier/verify.py"]
    assert forbidden_paths(product + internals, "no-skill") == product + internals
    assert forbidden_paths(product + internals, "skill") == internals
    harmless = ["/app/rlzero/objective.py", "/usr/bin/python3", "/usr/lib/sdk/domains/verify.py"]
    harmless += ["/opt/venv/lib/python3.11/site-packages/typer/.agents/skills/typer/SKILL.md"]
    harmless += ["/opt/venv/lib/python3.11/site-packages/kernels/_internals/verify.py"]
    assert forbidden_paths(harmless, "no-skill") == []


@pytest.fixture(scope="module")
def reference_task(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["rz-format-stop"])
    return build_task(spec, tmp_path_factory.mktemp("built"))


@pytest.mark.skipif(not jail.available(), reason="the runner's isolation needs root and unshare")
@pytest.mark.parametrize("condition", ["no-skill", "skill"])
def test_the_local_runners_agent_sees_only_its_condition(reference_task, tmp_path, condition):
    os.environ["GRPO_RUNNER_ONLY"] = "runner"  # a variable of the runner's: must not reach it
    try:
        run_trial(
            reference_task, LIST_EVERYTHING, skill=condition == "skill", keep=tmp_path, timeout=300
        )
    finally:
        del os.environ["GRPO_RUNNER_ONLY"]
    (kept,) = tmp_path.iterdir()
    home = kept / "agent" / "home"
    files = (home / "files.txt").read_text().splitlines()
    assert len(files) > 1000, "the listing saw almost nothing: the test would pass vacuously"
    assert "/app/train.py" in files
    assert forbidden_paths(files, condition) == []
    dists = (home / "dists.txt").read_text().split()
    assert "torch" in dists and "transformers" in dists
    assert [d for d in dists if d.lower() in GRPO_LIBRARIES] == []  # no second implementation
    assert ("grpo-skill" in dists) == (condition == "skill")
    assert "grpo-skill-tasks" not in dists
    imported = (home / "import.txt").read_text().split()
    assert (imported[-1] == "0") == (condition == "skill")
    assert (home / "uid.txt").read_text().strip() == str(jail.UID)
    env = (home / "env.txt").read_text()
    assert "GRPO_RUNNER_ONLY" not in env and "PYTHONPATH" not in env and "GRPO_" not in env
    mounts = (home / "mounts.txt").read_text()
    assert "/app" in mounts, "no mount table read: the check below would pass vacuously"
    assert reference_task.name not in mounts, "the view's mount table names the task"
    if condition == "skill":
        assert "/app/.claude/skills/grpo/SKILL.md" in files
        assert "/opt/venv/bin/grpo-check" in files


LIST_TRL = (
    'python -c "import importlib.metadata as m, trl; print(trl.__file__); '
    "print(m.version('trl')); print(sorted(m.distribution('trl').files or []))\" "
    "> /home/agent/trl.txt 2>&1; find / -path /proc -prune -o -name grpo_trainer.py -print 2>/dev/null "
    "> /home/agent/copies.txt; true"
)


@pytest.mark.skipif(not jail.available(), reason="the runner's isolation needs root and unshare")
def test_a_trl_task_has_only_its_fork_installed_as_trl(tmp_path_factory, tmp_path):
    """`import trl` gives the workspace's fork, the release it came from is named, and no other
    TRL source (and no RECORD of upstream's file hashes) is anywhere the agent can read."""
    (spec,) = load_tasks(ids=["trl-never-stops"])
    built = build_task(spec, tmp_path_factory.mktemp("built-trl"))
    result = run_trial(built, LIST_TRL, keep=tmp_path, timeout=300)
    assert result.status == "ok", result.detail
    (kept,) = tmp_path.iterdir()
    home = kept / "agent" / "home"
    module, version, files = (home / "trl.txt").read_text().splitlines()
    assert module == "/app/trl/trl/__init__.py"
    assert version == json.loads((built / "tests" / "task.json").read_text())["fork_version"]
    assert "RECORD" not in files
    copies = (home / "copies.txt").read_text().split()
    assert copies == ["/app/trl/trl/trainer/grpo_trainer.py"]


def image_contents(environment: Path, root: Path) -> list[str]:
    """The files the Dockerfile's COPY steps put in the image (the pip-installed third-party
    stack aside), as absolute paths; RUN steps must not fetch anything of this project."""
    lines = (environment / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    for line in lines:
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "COPY":
            source, target = environment / words[1], root / words[2].lstrip("/")
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
        elif words[0] == "RUN":
            for made in re.findall(r"> (/\S+)", line):  # files a RUN step writes
                (root / made.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                (root / made.lstrip("/")).touch()
    return ["/" + str(p.relative_to(root)) for p in root.rglob("*")]


@pytest.mark.parametrize("condition", ["no-skill", "skill"])
def test_the_harbor_image_holds_only_its_condition(tmp_path, condition):
    specs = load_tasks(ids=["rz-format-stop", "trl-never-stops"])
    for folder in export_harbor(specs, tmp_path / "export", skill=condition == "skill"):
        environment = folder / "environment"
        contents = image_contents(environment, tmp_path / "image" / folder.name)
        assert "/app/NOTES.md" in contents
        assert forbidden_paths(contents, condition) == []
        context = ["/" + str(p.relative_to(environment)) for p in environment.rglob("*")]
        assert forbidden_paths(context, condition) == []  # the build context is uploaded too
        dockerfile = (environment / "Dockerfile").read_text()
        assert "pip uninstall -y trl" in dockerfile  # no GRPO library beside the trainer
        is_trl = folder.name.startswith("trl-")
        assert ("echo /app/trl > /usr/local/lib/python3.11/site-packages/" in dockerfile) == is_trl
        has_checker = any(p.endswith("/checker/cli.py") for p in contents)
        assert has_checker == (condition == "skill")
        assert ("/usr/local/bin/grpo-check" in contents) == (condition == "skill")


def test_the_environment_digest_sees_a_startup_hook_and_an_edit(tmp_path):
    """The runner's second line of defence: a .pth added to a site-packages folder, or a module
    rewritten, changes the digest of the environment."""
    from task_harness.verifier.digest import environment_digest

    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "module.py").write_text("x = 1\n")
    before = environment_digest([tmp_path])
    (site / "zz.pth").write_text("import os\n")
    with_hook = environment_digest([tmp_path])
    assert with_hook != before
    (site / "zz.pth").unlink()
    assert environment_digest([tmp_path]) == before
    (site / "module.py").write_text("x = 22\n")
    assert environment_digest([tmp_path]) != before


def test_two_threads_building_one_env_each_get_it_whole(tmp_path, monkeypatch):
    """`tasks verify --jobs 2` builds a family's env from two threads of one process; a staging
    folder named for the pid alone let one build clear the other's, and a venv whose torch
    lacked `torch.utils` was cached."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from task_harness.agent_env import agent_env

    monkeypatch.setenv("GRPO_SKILL_CACHE", str(tmp_path))
    with ThreadPoolExecutor(max_workers=2) as pool:
        envs = list(pool.map(lambda _: agent_env("no-skill"), range(2)))
    assert envs[0] == envs[1]
    assert [p.name for p in tmp_path.joinpath("agent-env").iterdir()] == [envs[0].name]
    assert envs[0].stat().st_mode & 0o777 == 0o755  # the jail's agent user runs its Python
    site_packages = next(envs[0].glob("lib/python*/site-packages"))
    runner_torch = Path(torch.__file__).parent
    assert sorted(
        p.name for p in (site_packages / "torch").iterdir() if p.name != "__pycache__"
    ) == sorted(p.name for p in runner_torch.iterdir() if p.name != "__pycache__")
