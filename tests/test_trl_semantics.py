"""The one table of TRL release semantics (`reference_impl/trl_semantics.py`).

Every release number the products decide by is in that table: no other module of the checker,
the harness or the reference compares a version with a literal release. And the table's rows
that a release's `GRPOConfig` shows (defaults, fields that exist, the type of `scale_rewards`) are
what each cached release's own `trl/trainer/grpo_config.py` says, read without importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from trl_releases import RELEASES, trl_release_path

from reference_impl.trl_semantics import semantics, supported

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "reference_impl" / "trl_semantics.py"


def _is_release_literal(node: ast.expr) -> bool:
    """A tuple of two or more ints starting with 0 or 1, as `(1, 14, 2)` or `(0, 19)`."""
    return (
        isinstance(node, ast.Tuple)
        and len(node.elts) >= 2
        and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
        and node.elts[0].value in (0, 1)
    )


def release_comparisons(paths: list[Path]) -> list[str]:
    """`file:line: expression` of every comparison with a release literal in `paths`."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            ordering = isinstance(node, ast.Compare) and not any(
                isinstance(op, (ast.In, ast.NotIn)) for op in node.ops
            )  # `code in (0, 1)` is membership, not a version test
            if ordering and any(
                _is_release_literal(side) for side in (node.left, *node.comparators)
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_release_numbers_are_decided_in_the_table_alone():
    products = [REPO / name for name in ("checker", "task_harness", "reference_impl")]
    paths = [p for folder in products for p in sorted(folder.rglob("*.py")) if p != TABLE]
    assert release_comparisons(paths) == []


def test_the_scan_sees_a_release_comparison(tmp_path):
    """Not vacuous: a version test written outside the table is reported."""
    module = tmp_path / "x.py"
    module.write_text("RELEASE = (1, 2)\nNEW = RELEASE >= (1, 10, 0)\nOK = code not in (0, 1)\n")
    found = release_comparisons([module])
    assert len(found) == 1 and "RELEASE >= (1, 10, 0)" in found[0]


def config_fields(version: str) -> dict[str, object]:
    """GRPOConfig's fields in release `version`'s source: name -> default (a literal), read from
    `name: type = field(default=...)` or `name: type = value`."""
    source = trl_release_path(version) / "trl" / "trainer" / "grpo_config.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig")
    fields = {}
    for node in config.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Call):
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        try:
            fields[node.target.id] = ast.literal_eval(value) if value is not None else None
        except ValueError:
            fields[node.target.id] = ast.unparse(value)
    return fields


@pytest.mark.parametrize("version", [v for v in RELEASES if supported(v)])
def test_the_table_matches_each_release_config(version):
    row, fields = semantics(version), config_fields(version)
    assert row["loss_type"] == fields["loss_type"]
    assert row["beta"] == fields["beta"]
    assert row["temperature"] == fields["temperature"]
    assert (row["scale_rewards"] == ["group", "none"]) == isinstance(fields["scale_rewards"], bool)
    assert row["delta"] == ("delta" in fields)
    assert row["importance_sampling_level"] == ("importance_sampling_level" in fields)
    assert row["bias_correction_field"] == ("use_bias_correction_kl" in fields)
    assert row["use_bias_correction_kl"] == fields.get("use_bias_correction_kl", False)
    loss_types = {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"}
    named = {t for t in loss_types if f'"{t}"' in str(fields) or t in _help(version, "loss_type")}
    assert set(row["loss_types"]) == named, (row["loss_types"], named)


def _help(version: str, name: str) -> str:
    """The help text of GRPOConfig field `name` in release `version` (where the loss types are named)."""
    source = trl_release_path(version) / "trl" / "trainer" / "grpo_config.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            return ast.unparse(node.value)
    return ""
