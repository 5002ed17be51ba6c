"""`grpo-check skill validate`: the shipped skill passes, broken skills fail with a clear cause.

skills-ref (the Agent Skills reference validator) is the cross-check: on every sample that the
spec itself decides, our verdict must agree with it; on the stricter client rules (Codex,
Anthropic) we must be at least as strict.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import skills_ref
from click.testing import CliRunner

from skill_installer.cli import skill
from skill_installer.source import skill_source
from skill_installer.validate import confirm_loads, validate_skill

GOOD_FRONTMATTER = "name: {name}\ndescription: Use this when testing the validator.\nlicense: MIT\n"


def make_skill(
    root: Path, name: str, frontmatter: str | None = None, body: str = "# Body\n"
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    frontmatter = GOOD_FRONTMATTER.format(name=name) if frontmatter is None else frontmatter
    (folder / "SKILL.md").write_text(f"---\n{frontmatter}---\n{body}", encoding="utf-8")
    return folder


def errors(folder: Path) -> list[str]:
    return [p.message for p in validate_skill(folder) if p.level == "error"]


def test_shipped_skill_is_valid_for_us_and_for_skills_ref():
    folder = skill_source()
    assert skills_ref.validate(folder.resolve()) == []
    assert validate_skill(folder) == []  # not even a warning
    assert confirm_loads(folder) == []


def test_shipped_description_is_within_every_clients_limit():
    properties = skills_ref.read_properties(skill_source().resolve())
    assert properties.name == "grpo"
    assert 0 < len(properties.description) <= 1024
    assert "<" not in properties.description and ">" not in properties.description


# (folder name, frontmatter, substring of our error) for cases the spec decides.
SPEC_CASES = [
    ("Bad_Name", "name: Bad_Name\ndescription: d\n", "lowercase"),
    ("folder-a", "name: folder-b\ndescription: d\n", "differs from the folder"),
    ("no-desc", "name: no-desc\n", "'description' is missing"),
    ("empty-desc", 'name: empty-desc\ndescription: ""\n', "'description' is missing"),
    ("long-desc", "name: long-desc\ndescription: " + "a" * 1025 + "\n", "1025 characters"),
    ("a" * 65, "name: " + "a" * 65 + "\ndescription: d\n", "65 characters"),
    ("dash-", "name: dash-\ndescription: d\n", "single inner hyphens"),
    ("two--dash", "name: two--dash\ndescription: d\n", "single inner hyphens"),
    ("extra-key", "name: extra-key\ndescription: d\nversion: 1.0\n", "unexpected frontmatter"),
    ("long-compat", "name: long-compat\ndescription: d\ncompatibility: " + "c" * 501 + "\n", "501"),
]


@pytest.mark.parametrize(
    ("name", "frontmatter", "expected"), SPEC_CASES, ids=[c[0][:12] for c in SPEC_CASES]
)
def test_spec_violations_agree_with_skills_ref(tmp_path, name, frontmatter, expected):
    folder = make_skill(tmp_path, name, frontmatter)
    assert skills_ref.validate(folder), "skills-ref should reject this sample too"
    assert any(expected in message for message in errors(folder)), errors(folder)


def test_exactly_1024_characters_passes_both(tmp_path):
    folder = make_skill(
        tmp_path, "edge", "name: edge\ndescription: " + "a" * 1024 + "\nlicense: MIT\n"
    )
    assert skills_ref.validate(folder) == [] and errors(folder) == []


# Stricter than skills-ref: rules of real clients that the reference validator does not check.
CLIENT_CASES = [
    ("claude-helper", "name: claude-helper\ndescription: d\n", "reserved word 'claude'"),
    ("angle", "name: angle\ndescription: Use <b>this</b>\n", "'<' or '>'"),
    (
        "meta-num",
        "name: meta-num\ndescription: d\nmetadata:\n  version: 1.0\n",
        "strings to strings",
    ),
    ("colon", "name: colon\ndescription: Use this: when testing\n", "not valid YAML"),
]


@pytest.mark.parametrize(
    ("name", "frontmatter", "expected"), CLIENT_CASES, ids=[c[0] for c in CLIENT_CASES]
)
def test_client_rules_beyond_the_spec(tmp_path, name, frontmatter, expected):
    folder = make_skill(tmp_path, name, frontmatter)
    assert any(expected in message for message in errors(folder)), errors(folder)


def test_frontmatter_must_open_on_the_first_line(tmp_path):
    folder = tmp_path / "late"
    folder.mkdir()
    (folder / "SKILL.md").write_text("\n---\nname: late\ndescription: d\n---\n")
    assert errors(folder) == ["SKILL.md must start with a '---' line opening the YAML frontmatter"]
    (folder / "SKILL.md").write_text("\ufeff---\nname: late\ndescription: d\n---\n")
    assert "byte-order mark" in errors(folder)[0]


def test_lowercase_skill_md_is_rejected_with_a_hint(tmp_path):
    folder = tmp_path / "lower"
    folder.mkdir()
    (folder / "skill.md").write_text("---\nname: lower\ndescription: d\n---\n")
    assert "must be exactly SKILL.md" in errors(folder)[0]


def test_references_must_exist_stay_inside_and_be_one_level_deep(tmp_path):
    body = "[a](references/a.md) [gone](references/gone.md) [out](../x.md) [web](https://x.org)\n"
    folder = make_skill(tmp_path, "refs", body=body)
    (folder / "references").mkdir()
    (folder / "references" / "a.md").write_text("see [b](b.md) and [top](#top)\n")
    (folder / "references" / "b.md").write_text("b\n")
    (tmp_path / "x.md").write_text("outside\n")
    messages = errors(folder)
    assert "SKILL.md links to a missing file: references/gone.md" in messages
    assert "SKILL.md links outside the skill: ../x.md" in messages
    assert "references/a.md links on to b.md; keep references one level deep" in messages
    assert len(messages) == 3


def test_size_warnings_do_not_fail(tmp_path):
    folder = make_skill(tmp_path, "big", body="line\n" * 600)
    problems = validate_skill(folder)
    assert [p.level for p in problems] == ["warning"]
    assert "600" in problems[0].message or "601" in problems[0].message


def test_confirm_loads_reports_name_mismatch_of_a_renamed_copy(tmp_path):
    copy = tmp_path / "grpo-copy"
    shutil.copytree(skill_source(), copy)
    assert confirm_loads(copy) == ["name 'grpo' differs from the folder 'grpo-copy'"]


def test_cli_validate_exit_codes(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(skill, ["validate"])
    assert ok.exit_code == 0 and "valid:" in ok.output
    bad = make_skill(tmp_path, "bad", "name: other\ndescription: d\n")
    result = runner.invoke(skill, ["validate", str(bad / "SKILL.md")])
    assert result.exit_code == 1
    assert "differs from the folder" in result.output and "Traceback" not in result.output
    missing = runner.invoke(skill, ["validate", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such folder" in missing.output
