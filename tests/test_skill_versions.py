"""The version tables of grpo-trainer-internals.md, checked against the real TRL releases.

Each release is installed once with `tests/trl_releases.py` and read as source text, never
imported: a table cell is true when the release's own `grpo_config.py`, `grpo_trainer.py` or
`utils.py` says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from trl_releases import RELEASES, trl_release_path

INTERNALS = (
    Path(__file__).resolve().parents[1]
    / "skills"
    / "grpo"
    / "references"
    / "grpo-trainer-internals.md"
).read_text(encoding="utf-8")


def table(heading: str) -> list[list[str]]:
    """Rows (cells stripped) of the first markdown table under `### heading`."""
    section = INTERNALS.split(f"### {heading}\n", 1)[1]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[first:]:  # the table ends at the first line that is not a row
        if not line.startswith("| "):
            break
        rows.append(line)
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return cells[2:] if cells[1][0].startswith("---") else cells[1:]


def source(version: str, name: str) -> str:
    return (trl_release_path(version) / "trl" / "trainer" / name).read_text(encoding="utf-8")


def config_default(version: str, field: str) -> str:
    """The default of a GRPOConfig field as written in the release's source, or "—" if absent."""
    match = re.search(
        rf"^    {field}: [^\n]*= field\(\s*default=([^,\n]+),",
        source(version, "grpo_config.py"),
        re.M,
    )
    return match.group(1).strip() if match else "—"


DEFAULT_COLUMNS = [
    "loss_type",
    "beta",
    "temperature",
    "scale_rewards",
    "max_completion_length",
    "max_prompt_length",
    "top_k",
    "epsilon",
    "use_bias_correction_kl",
]


def test_tables_cover_every_checked_release():
    assert [row[0] for row in table("Defaults by release")] == list(RELEASES)
    assert [row[0] for row in table("Where each stage lives")] == list(RELEASES)


@pytest.mark.parametrize("row", table("Defaults by release"), ids=lambda row: row[0])
def test_defaults_row_matches_the_release(row):
    version, cells = row[0], row[1:]
    assert len(cells) == len(DEFAULT_COLUMNS)
    for field, written in zip(DEFAULT_COLUMNS, cells, strict=True):
        assert config_default(version, field) == written, (version, field)


@pytest.mark.parametrize("row", table("Where each stage lives"), ids=lambda row: row[0])
def test_stage_locations_match_the_release(row):
    version, logprobs, advantages, loss = row
    trainer = source(version, "grpo_trainer.py")
    utils = source(version, "utils.py")

    def method_body(name: str) -> str:
        start = trainer.index(f"    def {name}(")
        following = re.search(r"^    def ", trainer[start + 10 :], re.M)
        return trainer[start : start + 10 + following.start()] if following else trainer[start:]

    method = re.match(r"`(\w+)`", logprobs).group(1)
    assert f"def {method}(" in trainer
    if "selective_log_softmax" in logprobs:
        assert "def selective_log_softmax(" in utils
        assert "selective_log_softmax(" in method_body(method)
    elif "chunked_logprob.py" in logprobs:
        kernel = trl_release_path(version) / "trl" / "kernels" / "chunked_logprob.py"
        assert "logprobs = target_logit - log_z" in kernel.read_text()
        assert "selective_log_softmax(" not in trainer
    else:  # 0.14: inline per-row log_softmax + gather
        assert "logits_row.log_softmax(dim=-1)" in method_body(method)
        assert "torch.gather(log_probs" in method_body(method)
        assert "def selective_log_softmax(" not in utils
    advantages_method = advantages.strip("`")
    assert "std_grouped_rewards + 1e-4" in method_body(advantages_method) or (
        "std_rewards + 1e-4" in method_body(advantages_method)
    )
    assert "per_token_loss" in method_body(loss.strip("`"))


@pytest.mark.parametrize("version", [v for v in RELEASES if v != "0.14.0"])
def test_selective_log_softmax_has_the_two_dtype_branches(version):
    utils = source(version, "utils.py")
    body = utils[utils.index("def selective_log_softmax(") :]
    body = body.split("\ndef ", 1)[0]  # up to the next function, or the end of the file
    assert "if logits.dtype in [torch.float32, torch.float64]:" in body
    assert "logsumexp" in body and "F.log_softmax(row_logits, dim=-1)" in body


def test_no_clipping_and_no_top_k_field_in_0_14_and_0_15():
    for version in ("0.14.0", "0.15.2"):
        trainer = source(version, "grpo_trainer.py")
        assert config_default(version, "epsilon") == "—" and "clamp(coef_1" not in trainer
        assert "torch.exp(per_token_logps - per_token_logps.detach()) * advantages" in trainer
        assert config_default(version, "top_k") == "—" and "top_k" not in trainer
    assert "top_k=self.top_k" in source("0.17.0", "grpo_trainer.py")


def test_rewards_and_generation_helpers_move_as_stated():
    assert "def _calculate_rewards(" not in source("0.17.0", "grpo_trainer.py")
    assert "def _calculate_rewards(" in source("0.19.1", "grpo_trainer.py")
    assert "def _generate_single_turn(" not in source("0.23.1", "grpo_trainer.py")
    assert "def _generate_single_turn(" in source("0.26.2", "grpo_trainer.py")
