"""The agent's Python environment per condition and task family: the third-party stack without any
GRPO library, and grpo-skill only with --skill.

The runner's own environment holds this project (an editable install of the checker, the harness,
the task specs around it), so the agent never gets it. Each condition gets a venv of its own,
built once and cached: the runner's site-packages (and folders their .pth files add) without
this project's entries, linked in file by file (hard links, so torch is not copied), plus, for the skill condition only, grpo-skill
laid out exactly as the Harbor image's skill condition gets it (`export.copy_grpo_skill`) and a
`grpo-check` command. The venv is shown read-only at /opt/venv in the agent's view.

No GRPO library is installed (`GRPO_LIBRARIES`): an agent must not be able to read a second,
correct implementation beside the trainer it debugs. A reference-family task needs none; a
user-family task gets the pristine release its project pins, as `pip install trl==X` leaves
it (its upstream is public by design: its bugs are in the user's code); a
trl-family task gets its fork installed as the `trl` package, the way `pip install -e ./trl`
would: a path file pointing at `/app/trl` and a dist-info naming the fork's release, with no
RECORD of upstream's file hashes to diff against. A fork of a release that needs other versions
of its dependencies than the runner has (TRL 0.17-0.26: transformers 4.57.6, `releases.py`) gets
those in place of the runner's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

from task_harness.verifier.jail import PYTHON_ENV

# This project's entries in a site-packages folder (its packages, editable finders, dist-infos).
OWN_ENTRIES = (
    "grpo_skill",
    "__editable__",
    "_grpo_skill",
    "checker",
    "reference_impl",
    "skill_installer",
    "task_harness",
)
CONDITIONS = ("no-skill", "skill")
FAMILIES = ("reference", "trl", "user")
# Distributions that implement GRPO; none is in an agent's environment.
GRPO_LIBRARIES = ("trl", "verl", "openrlhf")
# Where the trl family's fork lies in the agent's view (the workspace's `trl/` source folder).
FORK_PATH = "/app/trl"


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_SKILL_CACHE", Path.home() / ".cache" / "grpo-skill"))


def is_grpo_library(name: str) -> bool:
    """True for a site-packages entry of a GRPO library: its package or its dist-info."""
    base = name.split("-", 1)[0].lower()
    return base in GRPO_LIBRARIES


def third_party_entries(site: Path) -> list[Path]:
    """The entries of `site` that are neither this project's nor a GRPO library's; `.pth` files
    are left out too (they run code at start-up and the stack needs none)."""
    return sorted(
        entry
        for entry in site.iterdir()
        if not entry.name.startswith(OWN_ENTRIES)
        and not is_grpo_library(entry.name)
        and entry.suffix != ".pth"
        and entry.name != "__pycache__"
    )


def site_folders() -> list[Path]:
    """The runner's site-packages folders, and the folders their `.pth` files add to the path
    (a development install may keep its dependencies in one)."""
    sites = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    added = []
    for folder in sites:
        for pth in sorted(folder.glob("*.pth")):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import")) and Path(line).is_dir():
                    added.append(Path(line))
    return sites + added


def release_folders(family: str, fork_version: str | None) -> list[Path]:
    """The folders (installed from the registry, cached) whose packages replace the runner's in
    the env of a fork of `fork_version`: none when the runner's stack serves that release."""
    if family not in ("trl", "user") or not fork_version:
        return []
    from task_harness.releases import dependency_paths

    return dependency_paths(fork_version)


def _replaced(folders: list[Path]) -> tuple[set[str], set[str]]:
    """(entry names, normalised distribution names) the `folders` provide."""
    from task_harness.releases import distributions

    names = {entry.name for folder in folders for entry in folder.iterdir()}
    return names, {name for folder in folders for name in distributions(folder)}


def _is_replaced(entry: Path, replaced: tuple[set[str], set[str]]) -> bool:
    from task_harness.releases import normalise

    names, dists = replaced
    if entry.name.endswith(".dist-info"):
        return normalise(entry.name.split("-", 1)[0]) in dists
    return entry.name in names


def _fingerprint(sites: list[Path], skill: bool) -> str:
    """Changes when the stack or (skill condition) grpo-skill changes: a new env is built."""
    from task_harness.installed import package_dir
    from task_harness.verifier.digest import tree_digest

    digest = hashlib.sha256()
    for entry in (e for folder in sites for e in third_party_entries(folder)):
        digest.update(f"{entry}:{entry.stat().st_mtime_ns}\n".encode())
    if skill:
        from skill_installer import skill_source

        for name in ("checker", "reference_impl", "skill_installer"):
            digest.update(tree_digest(package_dir(name), "*").encode())
        digest.update(tree_digest(skill_source(), "*").encode())
    return digest.hexdigest()[:16]


def _link_tree(source: Path, target: Path) -> None:
    """`target` as a copy of `source` whose files are hard links to the originals, symlinks
    followed (a full copy across devices)."""
    if target.exists():  # an earlier folder on the path wins, as it does for imports
        return
    done = subprocess.run(["cp", "-RLl", str(source), str(target)], capture_output=True)
    if done.returncode != 0:
        if target.is_dir():
            shutil.rmtree(target)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)


def _venv_site(venv: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def _add_grpo_skill(venv: Path) -> None:
    """grpo-skill as the skill condition's image has it, and `grpo-check` on the PATH."""
    from task_harness.export import copy_grpo_skill

    staged = venv.parent / f"{venv.name}.grpo-skill"
    copy_grpo_skill(staged)
    shutil.copytree(staged / "site-packages", _venv_site(venv), dirs_exist_ok=True)
    shutil.copytree(staged / "share", venv / "share", dirs_exist_ok=True)
    shutil.rmtree(staged)
    script = venv / "bin" / "grpo-check"
    script.write_text(f"#!{PYTHON_ENV}/bin/python\nfrom checker.cli import main\nmain()\n")
    script.chmod(0o755)


def _install_fork(venv: Path, version: str) -> None:
    """The trl family's fork as the `trl` package: `import trl` anywhere gives /app/trl, and
    `importlib.metadata.version("trl")` the release the fork was made from."""
    site_dir = _venv_site(venv)
    (site_dir / "trl-fork.pth").write_text(FORK_PATH + "\n")
    info = site_dir / f"trl-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: trl\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")


def _install_release(venv: Path, version: str) -> None:
    """The user family's TRL: release `version` as `pip install trl==X` leaves it (the package
    and its dist-info, from the release cache)."""
    from task_harness.releases import trl_release_path

    for entry in trl_release_path(version).iterdir():
        if entry.name == "trl" or entry.name.endswith(".dist-info"):
            _link_tree(entry, _venv_site(venv) / entry.name)


def agent_env(condition: str, family: str = "reference", fork_version: str | None = None) -> Path:
    """The cached venv of `condition` ("skill" or "no-skill") for a task of `family`, built on
    first use; a trl-family venv installs the fork of release `fork_version`."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}")
    if family not in FAMILIES or (family in ("trl", "user")) != bool(fork_version):
        raise ValueError(f"family {family!r} with fork version {fork_version!r}")
    sites = site_folders()
    extra = release_folders(family, fork_version)
    skill = condition == "skill"
    flavour = f"{condition}-{family}-{fork_version}" if fork_version else condition
    venv = cache_dir() / "agent-env" / f"{flavour}-{_fingerprint(extra + sites, skill)}"
    if (venv / "pyvenv.cfg").exists():
        return venv
    # One staging folder per call: `tasks verify --jobs N` builds from threads of one process, and
    # a folder named for the pid alone let two builds clear each other's half-linked torch.
    venv.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{venv.name}.tmp-", dir=venv.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would shut the jail's agent user out of its Python
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(staging)],
        check=True,
        capture_output=True,
    )
    replaced = _replaced(extra)
    for folder in extra + sites:
        for entry in third_party_entries(folder):
            if folder in sites and _is_replaced(entry, replaced):
                continue
            _link_tree(entry, _venv_site(staging) / entry.name)
    if skill:
        _add_grpo_skill(staging)
    if family == "trl":
        _install_fork(staging, fork_version)
    if family == "user":
        _install_release(staging, fork_version)
    try:
        staging.rename(venv)
    except OSError:  # another trial built it first; the two are identical
        shutil.rmtree(staging, ignore_errors=True)
    return venv
