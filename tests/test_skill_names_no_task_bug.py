"""The grpo skill names no debug task's bug (issue 19, item 6).

An agent given the skill on a debug task must find the bug, not grep for it. For every `bug`
patch of every task (`tasks/*/patches.yaml`, loaded by `task_harness.spec`), two things must
not appear anywhere in `skills/grpo/`:

- the replacement: the code lines the bug adds (comments dropped), whitespace removed, when
  they are distinctive (at least MIN_CODE characters; `else:` alone is not);
- its distinctive constants: numbers the replacement has and the original text has not (the
  trio task's `1e4` for `1e-4`), as a whole token.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from task_harness.spec import load_tasks

SKILL = Path(__file__).resolve().parents[1] / "skills" / "grpo"
MIN_CODE = 12  # characters of code, whitespace removed, for a replacement to be distinctive
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def skill_text() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted(SKILL.rglob("*"))
        if path.is_file() and path.suffix in (".md", ".py")
    )


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def added_code(find: str, replace: str) -> str:
    """The lines `replace` adds to `find`, comments dropped, whitespace removed."""
    lines = [
        line[2:].split("#", 1)[0]
        for line in difflib.ndiff(find.splitlines(), replace.splitlines())
        if line.startswith("+ ")
    ]
    return squeezed("".join(lines))


def distinctive_constants(find: str, replace: str) -> set[str]:
    """Numbers the replacement adds; a single digit however written (a `dim=0`, an index, the
    `1.0` of `1.0 - alpha`, the `0.0` of a `where`) names nothing."""
    added = set(NUMBER.findall(replace)) - set(NUMBER.findall(find))
    return {number for number in added if not _single_digit(number)}


def _single_digit(number: str) -> bool:
    value = float(number)
    return value.is_integer() and abs(value) < 10


def bug_patches() -> list[tuple[str, object]]:
    return [
        (f"{spec.id}:{patch.id}", patch.mutant)
        for spec in load_tasks()
        for patch in spec.patches
        if patch.kind == "bug"
    ]


BUGS = bug_patches()


def test_every_task_contributes_its_bugs():
    assert len({name.split(":")[0] for name, _ in BUGS}) >= 16
    assert any(distinctive_constants(m.find, m.replace) for _, m in BUGS)


@pytest.mark.parametrize("name,mutant", BUGS, ids=[name for name, _ in BUGS])
def test_skill_does_not_state_the_bug(name, mutant):
    text = skill_text()
    code = added_code(mutant.find, mutant.replace)
    if len(code) >= MIN_CODE:
        assert code not in squeezed(text), f"{name}: the skill contains the bug's code {code!r}"
    for constant in distinctive_constants(mutant.find, mutant.replace):
        found = re.search(rf"(?<![\w.\-]){re.escape(constant)}(?![\w.])", text)
        assert not found, f"{name}: the skill names the bug's constant {constant}"


def test_the_rule_catches_the_old_playbook_line():
    """The playbook used to say 'an epsilon of `1e4` instead of `1e-4`': trio's bug."""
    trio = dict(BUGS)["trl-skillsbench-trio:advantage_epsilon"]
    assert distinctive_constants(trio.find, trio.replace) == {"1e4"}
    assert distinctive_constants("x = a", "x = 1.0 - a") == set()
    old = "an epsilon of `1e4` instead of `1e-4` shrinks them"
    assert re.search(r"(?<![\w.\-])1e4(?![\w.])", old)
    assert not re.search(r"(?<![\w.\-])1e4(?![\w.])", "an epsilon of `1e-4`")
