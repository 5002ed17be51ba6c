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

INTERNALS_PATH = (
    Path(__file__).resolve().parents[1]
    / "skills"
    / "grpo"
    / "references"
    / "grpo-trainer-internals.md"
)
INTERNALS = INTERNALS_PATH.read_text(encoding="utf-8")


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


def parsed(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def stage_rows() -> list[tuple[tuple[str, ...], list[str]]]:
    """(releases a row covers, its cells): a row `X to Y` covers X, Y and every family release
    between them; a row `X` covers X."""
    rows = []
    for row in table("Where each stage lives"):
        first, _, last = row[0].partition(" to ")
        last = last or first
        inside = [v for v in RELEASES if parsed(first) < parsed(v) < parsed(last)]
        rows.append((tuple(dict.fromkeys([first, *inside, last])), row[1:]))
    return rows


def test_tables_cover_every_checked_release():
    assert [row[0] for row in table("Defaults by release")] == list(RELEASES)
    ranges = [row[0].partition(" to ") for row in table("Where each stage lives")]
    bounds = [(first, last or first) for first, _, last in ranges]
    # Contiguous: each row ends before the next begins, and every family release is in one row.
    for (_, end), (start, _) in zip(bounds, bounds[1:], strict=False):
        assert parsed(end) < parsed(start)
    for version in RELEASES:
        assert sum(parsed(a) <= parsed(version) <= parsed(b) for a, b in bounds) == 1, version


def method_body(trainer: str, name: str) -> str:
    start = trainer.index(f"    def {name}(")
    following = re.search(r"^    def ", trainer[start + 10 :], re.M)
    return trainer[start : start + 10 + following.start()] if following else trainer[start:]


STAGE_ROWS = [(version, cells) for versions, cells in stage_rows() for version in versions]


@pytest.mark.parametrize("version,cells", STAGE_ROWS, ids=[v for v, _ in STAGE_ROWS])
def test_stage_locations_match_the_release(version, cells):
    """Each release a row covers (its first and last and the family releases between) has the
    row's methods, and scores log-probs with the code the row names."""
    method_cell, logsoftmax, advantages, loss = cells
    trainer = source(version, "grpo_trainer.py")
    utils = source(version, "utils.py")
    kernels = trl_release_path(version) / "trl" / "kernels"
    methods = re.findall(r"`(\w+)`", method_cell)
    method = methods[0]
    assert f"def {method}(" in trainer
    if "_full_logits_logps" in method_cell:  # 1.14: the dispatch, then the full-logits path
        assert "return self._full_logits_logps(" in method_body(trainer, method)
        method = "_full_logits_logps"
    body = method_body(trainer, method)
    if "selective_log_softmax_and_entropy" in logsoftmax:  # 1.14
        assert "selective_log_softmax_and_entropy(" in body and "selective_log_softmax(" in body
        assert body.count("temperature=self.temperature") == 2 and "row_mask=" in body
        assert "logits / self.temperature" not in body
        # Both helpers hand CUDA and XPU tensors to the Triton kernel; the torch code is the fallback.
        assert 'logits.device.type in ("cuda", "xpu")' in utils
        assert utils.count("_supports_trl_loss_kernel(logits, index, row_mask)") == 2
        assert "import triton" in (kernels / "logprob_entropy.py").read_text()
    elif "selective_log_softmax" in logsoftmax:
        assert "def selective_log_softmax(" in utils
        assert "selective_log_softmax(" in body
        assert "selective_log_softmax_and_entropy" not in trainer
    elif "chunked_logprob.py" in logsoftmax:
        kernel = (kernels / "chunked_logprob.py").read_text()
        assert "logprobs = target_logit - log_z" in kernel
        assert "selective_log_softmax(" not in trainer and "add_fused_lm_head(" in trainer
        # 1.15 imports triton unconditionally (no CPU path); 1.16 falls back to torch tiles.
        assert ("def _forward_tile(" in kernel) == ("torch tiles" in logsoftmax)
        assert ("\nimport triton\n" in kernel) == ("Triton kernel only" in logsoftmax)
    else:  # 0.14: inline per-row log_softmax + gather
        assert "logits_row.log_softmax(dim=-1)" in body and "torch.gather(log_probs" in body
        assert "def selective_log_softmax(" not in utils
    assert "std_grouped_rewards + 1e-4" in method_body(trainer, advantages.strip("`")) or (
        "std_rewards + 1e-4" in method_body(trainer, advantages.strip("`"))
    )
    assert "per_token_loss" in method_body(trainer, loss.strip("`"))


def test_temperature_division_moves_into_the_helpers_in_1_14():
    """'Up to 1.13 the trainer divides the logits by the temperature itself (from 0.16); 1.14
    passes `temperature` to its helpers', and the helper gains the parameter there."""
    text = " ".join(INTERNALS.split())
    assert "Up to 1.13 the trainer divides the logits by the temperature itself" in text
    for version in ("0.16.0", "0.19.1", "1.13.0"):
        assert "logits = logits / self.temperature" in source(version, "grpo_trainer.py")
    for version in ("1.13.0", "0.19.1"):
        assert "temperature: float = 1.0" not in source(version, "utils.py")
    for version in ("1.14.0", "1.14.2"):
        assert "logits / self.temperature" not in source(version, "grpo_trainer.py")
        assert (
            "def selective_log_softmax(\n    logits: torch.Tensor,\n    index: torch.Tensor,\n    temperature: float = 1.0,\n    row_mask"
            in source(version, "utils.py")
        )


def test_top_k_with_vllm_in_0_14_to_0_17():
    """0.14 and 0.15 with vLLM pass no top_k to SamplingParams; 0.16 and 0.17 pass theirs."""
    text = " ".join(INTERNALS.split())
    assert "0.14 and 0.15 build `SamplingParams(temperature, max_tokens)` only" in text
    for version in ("0.14.0", "0.15.2"):
        trainer = source(version, "grpo_trainer.py")
        call = trainer[trainer.index("SamplingParams(") :].split(")", 1)[0]
        keywords = set(re.findall(r"(\w+)=", call))
        assert keywords <= {"n", "temperature", "max_tokens"} and "top_k" not in trainer
    for version in ("0.16.0", "0.17.0"):
        assert "top_k=-1 if self.top_k is None else self.top_k," in source(
            version, "grpo_trainer.py"
        )


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


# ---------------------------------------------------------------------------------------------
# The "History of the semantics" table: each boundary it states, on the releases either side.
# The family releases above plus the first release of each minor version the table names.
BOUNDARY_RELEASES = (
    "0.16.0",
    "0.18.0",
    "0.19.0",
    "0.22.0",
    "0.24.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.28.0",
    "1.5.1",
    "1.6.0",
    "1.9.0",
    "1.10.0",
    "1.15.0",
)


def history() -> dict[str, tuple[str, str]]:
    return {row[0]: (row[1], row[2]) for row in table("History of the semantics")}


def releases_around(boundary: str) -> tuple[str, str]:
    """(the last checked release before `boundary`, the first at or after it)."""
    known = sorted(set(RELEASES) | set(BOUNDARY_RELEASES), key=parsed)
    before = [v for v in known if parsed(v) < parsed(boundary)]
    after = [v for v in known if parsed(v) >= parsed(boundary)]
    assert after and parsed(after[0])[:2] == parsed(boundary)[:2], f"no {boundary} release checked"
    return before[-1], after[0]


# History rows whose TRL 1.16 cell is `VALUE (from vX.Y...)`: the default as written in
# grpo_config.py changes exactly there (VALUE from X.Y's first release on, not before).
DEFAULT_ROWS = {
    "`loss_type` default": "loss_type",
    "`beta` default": "beta",
    "`temperature` default": "temperature",
    "`scale_rewards`": "scale_rewards",
    "`max_completion_length` default": "max_completion_length",
    "`use_bias_correction_kl`": "use_bias_correction_kl",
    "`top_k`": "top_k",
}


@pytest.mark.parametrize("item", list(DEFAULT_ROWS))
def test_history_default_changes_where_the_table_says(item):
    field = DEFAULT_ROWS[item]
    _, now = history()[item]
    found = re.match(r"(\S+) \(from v(\d+\.\d+)", now)
    value, boundary = found.group(1), found.group(2) + ".0"
    before, first = releases_around(boundary)
    assert config_default(first, field) == value, (first, field)
    assert config_default(before, field) != value, (before, field)
    assert config_default("1.16.0", field) == value


def test_history_older_values():
    rows = history()
    assert (
        'v0.14-v0.15 normalised like `grpo`, v0.16 like `bnpo`); "bnpo" in v0.17-v0.21'
        in rows["`loss_type` default"][0]
    )
    for version in ("0.14.0", "0.15.2", "0.16.0"):
        assert config_default(version, "loss_type") == "—"
    for version in ("0.14.0", "0.15.2"):  # mean over sequences of each sequence's token mean
        assert (
            "loss = ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()"
            in source(version, "grpo_trainer.py")
        )
    assert (  # one token mean over the batch
        "loss = (per_token_loss * completion_mask).sum() / completion_mask.sum()"
        in source("0.16.0", "grpo_trainer.py")
    )
    assert {config_default(v, "loss_type") for v in ("0.17.0", "0.21.0")} == {'"bnpo"'}
    assert "0.04 in v0.14-v0.18" in rows["`beta` default"][0]
    assert {config_default(v, "beta") for v in ("0.14.0", "0.18.0")} == {"0.04"}
    assert "0.9 in v0.14-v0.17" in rows["`temperature` default"][0]
    assert {config_default(v, "temperature") for v in ("0.14.0", "0.17.0")} == {"0.9"}
    assert (
        "absent up to v0.15 (always divide by std); bool True in v0.16-v0.21"
        in (rows["`scale_rewards`"][0])
    )
    assert config_default("0.15.2", "scale_rewards") == "—"
    assert {config_default(v, "scale_rewards") for v in ("0.16.0", "0.21.0")} == {"True"}
    assert "256 up to v1.9" in rows["`max_completion_length` default"][0]
    assert {config_default(v, "max_completion_length") for v in ("0.14.0", "1.9.0")} == {"256"}
    assert "added in v0.26 with default False" in rows["`use_bias_correction_kl`"][0]
    assert config_default("0.25.1", "use_bias_correction_kl") == "—"
    assert config_default("0.26.0", "use_bias_correction_kl") == "False"
    assert "50 up to v0.17, None in v0.18-v0.26" in rows["`top_k`"][0]
    assert {config_default(v, "top_k") for v in ("0.16.0", "0.17.0")} == {"50"}
    assert {config_default(v, "top_k") for v in ("0.18.0", "0.26.2")} == {"None"}


def test_history_of_scoring_and_log_probs():
    rows = history()
    assert "missing up to v0.15" in rows["temperature in scoring"][0]
    assert "(from v0.16)" in rows["temperature in scoring"][1]
    assert "/ self.temperature" not in source("0.15.2", "grpo_trainer.py")
    assert "logits = logits / self.temperature" in source("0.16.0", "grpo_trainer.py")
    assert "`selective_log_softmax` in v0.15-v1.13" in rows["log-prob path"][0]
    assert (
        "`selective_log_softmax_and_entropy` and a Triton kernel on GPUs in v1.14"
        in (rows["log-prob path"][0])
    )
    assert "(from v1.15)" in rows["log-prob path"][1]
    for version in ("0.15.2", "1.13.0"):
        trainer = source(version, "grpo_trainer.py")
        assert "selective_log_softmax(" in trainer and "_and_entropy" not in trainer
    for version in ("1.14.0", "1.14.2"):
        assert "selective_log_softmax_and_entropy(" in source(version, "grpo_trainer.py")
        assert (
            "import triton"
            in (trl_release_path(version) / "trl" / "kernels" / "logprob_entropy.py").read_text()
        )
    for version in ("1.15.0", "1.16.0"):
        assert "selective_log_softmax(" not in source(version, "grpo_trainer.py")
        assert "add_fused_lm_head(" in source(version, "grpo_trainer.py")


def test_history_of_the_dapo_normaliser_and_token_count():
    rows = history()
    assert rows["`dapo` normaliser"] == (
        "N_tok / P in v0.22-v1.9",
        "(N_tok / P) · GA / S (from v1.10)",
    )
    rescale = "* self.current_gradient_accumulation_steps / self.args.steps_per_generation"
    for version in ("0.22.0", "1.9.0"):
        trainer = source(version, "grpo_trainer.py")
        assert (
            'inputs["num_items_in_batch"]' in trainer
            and "/ self.accelerator.num_processes" in trainer
        )
        assert rescale not in trainer
    assert rescale in source("1.10.0", "grpo_trainer.py")
    assert rows["`num_items_in_batch`"] == (
        "raw completion lengths up to v1.8",
        "sum of the loss mask (from v1.9)",
    )
    assert "num_items_in_batch = agg_completion_lengths.sum()" in source(
        "0.22.0", "grpo_trainer.py"
    )
    older = source(
        "1.8.0", "grpo_trainer.py"
    )  # computed in `_generate`, returned as num_items_in_batch
    assert "total_completion_tokens = agg_completion_lengths.sum()" in older
    assert "loss_mask.sum()" not in older
    for version in ("1.9.0", "1.16.0"):
        assert "num_items_in_batch = self.accelerator.gather(loss_mask.sum()).sum()" in source(
            version, "grpo_trainer.py"
        )


def test_history_of_nan_rewards_prompts_and_clipping():
    rows = history()
    assert "NaN-aware from v1.6" in rows["advantage std and epsilon"][0]
    assert "mean_grouped_rewards = rewards.view(-1, num_generations).mean(dim=1)" in source(
        "1.5.1", "grpo_trainer.py"
    )
    assert "torch.nanmean(rewards.view(-1, num_generations), dim=1)" in source(
        "1.6.0", "grpo_trainer.py"
    )
    assert (
        rows["`max_prompt_length`"][0] == "512 up to v0.25, None in v0.26-v0.27, removed in v0.28"
    )
    assert config_default("0.25.1", "max_prompt_length") == "512"
    assert {config_default(v, "max_prompt_length") for v in ("0.26.0", "0.27.0")} == {"None"}
    assert config_default("0.28.0", "max_prompt_length") == "—"
    assert rows["clipping (`epsilon`)"][0] == "absent in v0.14-v0.15"
    assert config_default("0.16.0", "epsilon") == "0.2"


def test_rewards_and_generation_helpers_move_at_the_stated_release():
    assert "`_generate_and_score_completions` up to 0.18 and in `_calculate_rewards` from 0.19" in (
        " ".join(INTERNALS.split())
    )
    assert "def _calculate_rewards(" not in source("0.18.0", "grpo_trainer.py")
    assert "def _calculate_rewards(" in source("0.19.0", "grpo_trainer.py")
    assert "and in `_generate_single_turn` from 0.24" in " ".join(INTERNALS.split())
    assert "def _generate_single_turn(" in source("0.24.0", "grpo_trainer.py")


def test_top_k_of_0_14_and_0_15_is_transformers_default():
    """0.14 and 0.15 pass no top_k: transformers 4's GenerationConfig default (50) applies; 0.16
    and 0.17 pass their own 50."""
    from trl_releases import transformers4_path

    assert "so transformers' default of 50 applies; 0.16 and 0.17 set 50 explicitly" in (
        " ".join(INTERNALS.split())
    )
    generation = transformers4_path() / "transformers" / "generation" / "configuration_utils.py"
    assert 'self.top_k = kwargs.pop("top_k", 50)' in generation.read_text()
    for version in ("0.16.0", "0.17.0"):
        assert "top_k=self.top_k" in source(version, "grpo_trainer.py")


def test_every_history_row_is_checked():
    checked = set(DEFAULT_ROWS) | {
        "temperature in scoring",
        "log-prob path",
        "`dapo` normaliser",
        "`num_items_in_batch`",
        "advantage std and epsilon",
        "`max_prompt_length`",
        "clipping (`epsilon`)",
    }
    assert set(history()) == checked


def test_reward_functions_get_completion_ids_up_to_the_first_eos_from_0_18():
    """The playbook: `completion_ids` (TRL 0.18 and later; 0.17 passes none) holds each
    completion's ids up to and including its first EOS. Every checked release either side: the
    reward call passes `completion_ids` exactly from 0.18, built from the completion mask that
    keeps the first EOS and drops what follows it."""
    playbook = (INTERNALS_PATH.parent / "debugging-playbook.md").read_text(encoding="utf-8")
    assert "`completion_ids` (TRL 0.18 and later; 0.17 passes none)" in " ".join(playbook.split())
    built_from_mask = ("c[m].tolist()", "row[mask_row].tolist()", "zip(row, mask_row) if m")
    for version in sorted(set(RELEASES) | set(BOUNDARY_RELEASES), key=parsed):
        trainer = source(version, "grpo_trainer.py")
        assert "sequence_indices <= eos_idx" in trainer, version  # the mask keeps the first EOS
        passed = "completion_ids=completion_ids_list" in trainer
        assert passed == (parsed(version) >= (0, 18)), version
        if passed:
            assert any(pattern in trainer for pattern in built_from_mask), version


def test_skill_md_dates_the_kl_bias_correction_default():
    """SKILL.md's step-6 table: TRL multiplies the KL by the ratio by default from 1.10."""
    skill = (INTERNALS_PATH.parent.parent / "SKILL.md").read_text(encoding="utf-8")
    assert "TRL multiplies it by the ratio by default from 1.10 (`use_bias_correction_kl`)" in skill
    assert config_default("1.9.0", "use_bias_correction_kl") == "False"
    assert config_default("1.10.0", "use_bias_correction_kl") == "True"
