"""`grpo-check skill install/uninstall/list` in temporary homes and projects.

Every test runs with HOME, CLAUDE_CONFIG_DIR, CODEX_HOME and XDG_CONFIG_HOME pointing into a
temporary folder, so nothing touches the real machine. Expected paths are written out here from
the agents' documentation (facts file agent-skills.md section 3.1), not read from the code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from skill_installer import install as install_module
from skill_installer.cli import skill
from skill_installer.install import (
    CURRENT,
    FOREIGN,
    MODIFIED,
    STALE,
    InstallRefused,
    find_installations,
    folder_status,
    install_skill,
    uninstall_skill,
)
from skill_installer.source import skill_source


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """A fake home with Claude and Codex config dirs moved elsewhere, and an empty project."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": home,
        "CLAUDE_CONFIG_DIR": tmp_path / "claude-config",
        "CODEX_HOME": tmp_path / "codex-home",
        "XDG_CONFIG_HOME": tmp_path / "xdg",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    project = tmp_path / "project"
    project.mkdir()
    return {"project": project, **env}


PROJECT_TARGETS = {
    "claude-code": ".claude/skills/grpo",
    "codex": ".agents/skills/grpo",
    "cursor": ".agents/skills/grpo",
    "gemini": ".agents/skills/grpo",
    "copilot": ".agents/skills/grpo",
    "opencode": ".agents/skills/grpo",
}


@pytest.mark.parametrize("agent", sorted(PROJECT_TARGETS))
def test_project_install_goes_where_the_agent_reads(homes, agent):
    report = install_skill(homes["project"], [agent], "project")
    expected = homes["project"] / PROJECT_TARGETS[agent]
    assert [r.folder for r in report.folders] == [expected]
    assert (expected / "SKILL.md").read_bytes() == (skill_source() / "SKILL.md").read_bytes()
    assert f"{agent} (project)" in report.folders[0].agents
    assert report.loads and not expected.is_symlink()


@pytest.mark.parametrize(
    ("agent", "root"),
    [
        ("claude-code", "CLAUDE_CONFIG_DIR"),  # $CLAUDE_CONFIG_DIR/skills replaces ~/.claude/skills
        ("codex", "HOME"),  # ~/.agents/skills
        ("cursor", "HOME"),
        ("gemini", "HOME"),
        ("copilot", "HOME"),
        ("opencode", "HOME"),
    ],
)
def test_user_install_honours_config_dirs(homes, agent, root):
    report = install_skill(homes["project"], [agent], "user")
    expected = {
        "CLAUDE_CONFIG_DIR": homes["CLAUDE_CONFIG_DIR"] / "skills" / "grpo",
        "HOME": homes["HOME"] / ".agents" / "skills" / "grpo",
    }[root]
    assert [r.folder for r in report.folders] == [expected]
    assert (expected / "SKILL.md").is_file()
    assert f"{agent} (user)" in report.folders[0].agents and report.loads


def test_claude_user_scope_defaults_to_home_without_config_dir(homes, monkeypatch):
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    report = install_skill(homes["project"], ["claude-code"], "user")
    assert report.folders[0].folder == homes["HOME"] / ".claude" / "skills" / "grpo"


def test_all_agents_install_once_per_shared_folder(homes):
    report = install_skill(homes["project"], None, "project")
    folders = [r.folder for r in report.folders]
    assert folders == [
        homes["project"] / ".claude/skills/grpo",
        homes["project"] / ".agents/skills/grpo",
    ]
    shared = report.folders[1].agents
    for agent in ("codex", "cursor", "gemini", "copilot", "opencode"):
        assert f"{agent} (project)" in shared


def test_duplicates_are_reported_for_agents_reading_both_folders(homes):
    report = install_skill(homes["project"], None, "project")
    # Copilot, Cursor and OpenCode read .claude/skills as well as .agents/skills; Codex does not.
    joined = "\n".join(report.duplicates)
    for title in ("GitHub Copilot", "Cursor", "OpenCode"):
        assert title in joined
    assert "OpenAI Codex" not in joined and "Claude Code" not in joined


def test_codex_home_copy_is_listed_for_codex(homes):
    legacy = homes["CODEX_HOME"] / "skills" / "grpo"
    shutil.copytree(skill_source(), legacy)
    found = {f.folder: f for f in find_installations(homes["project"])}
    assert found[legacy].status == FOREIGN
    assert "codex (user)" in found[legacy].agents


def test_reinstall_is_unchanged_and_stale_copy_is_updated(homes):
    install_skill(homes["project"], ["codex"])
    target = homes["project"] / ".agents/skills/grpo"
    assert install_skill(homes["project"], ["codex"]).folders[0].action == "unchanged"

    other_source = homes["project"].parent / "other" / "grpo"
    shutil.copytree(skill_source(), other_source)
    (other_source / "references" / "extra.md").write_text("# extra\n")
    install_skill(homes["project"], ["codex"], source=other_source)
    assert folder_status(target, skill_source()) == STALE
    assert install_skill(homes["project"], ["codex"]).folders[0].action == "updated"
    assert folder_status(target, skill_source()) == CURRENT
    assert not (target / "references" / "extra.md").exists()


def test_refuses_to_overwrite_a_folder_it_did_not_install(homes):
    target = homes["project"] / ".agents/skills/grpo"
    target.mkdir(parents=True)
    (target / "SKILL.md").write_text("my own skill\n")
    with pytest.raises(InstallRefused, match="not installed by grpo-check"):
        install_skill(homes["project"], ["codex"])
    assert (target / "SKILL.md").read_text() == "my own skill\n"
    install_skill(homes["project"], ["codex"], force=True)
    assert folder_status(target, skill_source()) == CURRENT


def test_refuses_to_overwrite_an_edited_copy_and_writes_nothing_else(homes):
    install_skill(homes["project"], ["codex"])
    edited = homes["project"] / ".agents/skills/grpo/SKILL.md"
    edited.write_text(edited.read_text() + "\nmy note\n")
    with pytest.raises(InstallRefused, match="edited since it was installed"):
        install_skill(homes["project"], None)  # also targets .claude/skills: nothing is written
    assert not (homes["project"] / ".claude").exists()
    assert edited.read_text().endswith("my note\n")
    assert folder_status(edited.parent, skill_source()) == MODIFIED


def test_interrupted_copy_leaves_no_half_folder(homes, monkeypatch):
    calls = {"n": 0}
    real_copy = shutil.copyfile

    def failing_copy(src, dst, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(install_module.shutil, "copyfile", failing_copy)
    with pytest.raises(OSError, match="disk full"):
        install_skill(homes["project"], ["codex"])
    skills_root = homes["project"] / ".agents/skills"
    assert list(skills_root.iterdir()) == []  # neither grpo nor a temporary folder


def _raise_midway(source: Path, destination: Path) -> None:
    (destination / "SKILL.md").write_text("half")
    raise OSError("killed")


def test_interrupted_rewrite_of_a_stale_copy_keeps_it(homes, monkeypatch):
    install_skill(homes["project"], ["codex"])
    target = homes["project"] / ".agents/skills/grpo"
    other_source = homes["project"].parent / "other" / "grpo"
    shutil.copytree(skill_source(), other_source)
    (other_source / "SKILL.md").write_text((other_source / "SKILL.md").read_text() + "\n")
    monkeypatch.setattr(install_module, "copy_skill", _raise_midway)
    with pytest.raises(OSError, match="killed"):
        install_skill(homes["project"], ["codex"], source=other_source)
    assert folder_status(target, skill_source()) == CURRENT
    assert [p.name for p in target.parent.iterdir()] == ["grpo"]


def test_leftover_temporary_folder_is_cleaned_by_the_next_install(homes):
    root = homes["project"] / ".agents/skills"
    leftover = root / ".grpo-skill-tmp-killed"
    leftover.mkdir(parents=True)
    (leftover / "SKILL.md").write_text("half")
    install_skill(homes["project"], ["codex"])
    assert sorted(p.name for p in root.iterdir()) == ["grpo"]


def test_uninstall_removes_only_what_it_installed(homes):
    install_skill(homes["project"], ["codex"])
    foreign = homes["project"] / ".claude/skills/grpo"
    foreign.mkdir(parents=True)
    (foreign / "SKILL.md").write_text("someone else's\n")
    with pytest.raises(InstallRefused, match="not installed by grpo-check"):
        uninstall_skill(homes["project"], None, force=True)
    assert (homes["project"] / ".agents/skills/grpo").exists()  # nothing removed on refusal
    results = uninstall_skill(homes["project"], ["codex"])
    assert [r.action for r in results] == ["removed"]
    assert not (homes["project"] / ".agents/skills/grpo").exists()
    assert foreign.exists()


def test_uninstall_of_an_edited_copy_needs_force(homes):
    install_skill(homes["project"], ["gemini"])
    target = homes["project"] / ".agents/skills/grpo"
    (target / "notes.md").write_text("mine\n")
    with pytest.raises(InstallRefused, match="edited"):
        uninstall_skill(homes["project"], ["gemini"])
    uninstall_skill(homes["project"], ["gemini"], force=True)
    assert not target.exists()


def test_link_mode_creates_a_symlink_to_the_source(homes):
    report = install_skill(homes["project"], ["claude-code"], link=True)
    target = report.folders[0].folder
    assert target.is_symlink() and target.resolve() == skill_source().resolve()
    assert report.folders[0].action == "linked" and report.loads
    assert folder_status(target, skill_source()) == CURRENT
    assert install_skill(homes["project"], ["claude-code"]).folders[0].action == "replaced"
    assert not target.is_symlink()


def test_list_reports_status_and_agents(homes):
    install_skill(homes["project"], ["claude-code"], "user")
    install_skill(homes["project"], ["codex"], "project")
    edited = homes["project"] / ".agents/skills/grpo/SKILL.md"
    edited.write_text(edited.read_text() + "x")
    found = {f.folder: f for f in find_installations(homes["project"])}
    user_copy = homes["CLAUDE_CONFIG_DIR"] / "skills" / "grpo"
    assert found[user_copy].status == CURRENT
    assert found[user_copy].agents == ["claude-code (user)"]
    assert found[edited.parent].status == MODIFIED


def test_cli_install_list_uninstall(homes):
    runner = CliRunner()
    project = str(homes["project"])
    result = runner.invoke(
        skill, ["install", "--agent", "codex", "--agent", "claude-code", "--dir", project]
    )
    assert result.exit_code == 0, result.output
    assert "installed:" in result.output and "loads:" in result.output
    assert "codex (project)" in result.output
    assert "restart" in result.output

    result = runner.invoke(skill, ["install", "--all", "--dir", project])
    assert result.exit_code == 0
    assert (
        "warning: GitHub Copilot will find the grpo skill 2 times (identical copies)"
        in result.output
    )

    result = runner.invoke(skill, ["list", "--dir", project])
    assert result.exit_code == 0 and "current" in result.output

    result = runner.invoke(skill, ["uninstall", "--all", "--dir", project])
    assert result.exit_code == 0 and "removed:" in result.output
    assert not (homes["project"] / ".agents/skills/grpo").exists()


def test_cli_refusal_is_one_line_and_exit_1(homes):
    target = homes["project"] / ".claude/skills/grpo"
    target.mkdir(parents=True)
    (target / "SKILL.md").write_text("mine\n")
    result = CliRunner().invoke(
        skill, ["install", "--agent", "claude-code", "--dir", str(homes["project"])]
    )
    assert result.exit_code == 1
    assert "refusing to overwrite" in result.output and "Traceback" not in result.output


def test_duplicate_warning_says_when_copies_differ(homes):
    other = homes["project"] / ".claude/skills/grpo"
    other.mkdir(parents=True)
    (other / "SKILL.md").write_text("---\nname: grpo\ndescription: an older grpo skill\n---\n")
    report = install_skill(homes["project"], ["codex"])
    assert any(
        w.startswith("GitHub Copilot will find the grpo skill 2 times (the copies DIFFER)")
        for w in report.duplicates
    )


def test_readme_python_example_runs(homes, monkeypatch):
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- section:skill -->", 1)[1].split("<!-- /section:skill -->", 1)[0]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(homes["project"])
    exec(compile(example, "README.md", "exec"), {})
    assert (homes["project"] / "workspace/.claude/skills/grpo/SKILL.md").is_file()
    assert (homes["project"] / "workspace/.agents/skills/grpo/SKILL.md").is_file()
