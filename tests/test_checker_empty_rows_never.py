"""A trainer that never builds a fully masked row (every completion counts its stop token, no row
is masked out whole) may divide its row means by the bare token count: declared
`empty_rows: never`, its loss is checked on rows that all count a token and the all-masked-batch
check skips; undeclared, the failure names the declaration; `profile` reports the NaN as a
finding that says so and still measures the aggregation.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml
from candidate_support import CLIPPED_LOSS_HEAD, check_results, json_report, profiled

# A per-sequence mean (loss_type grpo) with the row's token count unclamped.
LOSS = CLIPPED_LOSS_HEAD + "    return ((token * mask).sum(1) / ROW_COUNT).mean()\n"
UNCLAMPED = "mask.sum(1)"


def _write(folder: Path, row_count: str = UNCLAMPED, config: str = "") -> Path:
    (folder / "candidate.py").write_text(textwrap.dedent(LOSS).replace("ROW_COUNT", row_count))
    text = "path: candidate.py\nconfig:\n  loss_type: grpo\n  clipping: symmetric\n" + config
    (folder / "candidate.yaml").write_text(text)
    return folder / "candidate.yaml"


def _results(path: Path) -> dict:
    return check_results(path, ("loss_aggregation",))


def test_undeclared_the_failure_names_the_declaration(tmp_path):
    result = _results(_write(tmp_path))["loss_aggregation.own_loss_type_matches_formula"]
    assert result.status == "fail", result.message
    assert "a fully masked row divides by 0" in result.message
    assert "declare empty_rows: never" in result.message


def test_declared_never_every_aggregation_check_passes_or_skips(tmp_path):
    results = _results(_write(tmp_path, config="  empty_rows: never\n"))
    bad = {k: r.message for k, r in results.items() if r.status not in ("pass", "skip")}
    assert not bad, bad
    assert results["loss_aggregation.own_loss_type_matches_formula"].status == "pass"
    skipped = results["loss_aggregation.fully_masked_batch_is_zero"]
    assert skipped.status == "skip" and "empty_rows: never" in skipped.message


def test_declared_never_a_wrong_row_count_still_fails(tmp_path):
    """The width in place of each row's token count is a bug whatever rows are empty."""
    path = _write(tmp_path, row_count="mask.size(1)", config="  empty_rows: never\n")
    result = _results(path)["loss_aggregation.own_loss_type_matches_formula"]
    assert result.status == "fail", result.message


def test_profile_reports_the_finding_and_still_measures_the_aggregation(tmp_path):
    _write(tmp_path)
    (tmp_path / "candidate.yaml").unlink()
    document = profiled(tmp_path)
    assert document["config"]["loss_type"] == "grpo", document
    assert "empty_rows" not in document["config"], document
    findings = document["findings"]
    assert any("declare empty_rows: never" in f for f in findings), findings
    assert not any("matches no known aggregation" in f for f in findings), findings
    assert not any("batch whose every token is masked" in f for f in findings), findings


def test_declaring_what_the_finding_names_settles_it(tmp_path):
    """profile --write, then `empty_rows: never` under config: the kept finding is skipped as
    settled and the loss_aggregation stage has no failure; without the declaration it fails."""
    _write(tmp_path)
    (tmp_path / "candidate.yaml").unlink()
    document = profiled(tmp_path)

    def finding_status(config_extra: dict) -> tuple[str, list]:
        (tmp_path / "run.yaml").write_text(
            yaml.safe_dump({**document, "config": {**document["config"], **config_extra}})
        )
        results = json_report(tmp_path, "run.yaml", "--stage", "loss_aggregation")["results"]
        (finding,) = [r for r in results if r["check"].endswith("profile_finding")]
        failing = [r["check"] for r in results if r["status"] in ("fail", "error")]
        return finding["status"], failing

    assert finding_status({})[0] == "fail"
    status, failing = finding_status({"empty_rows": "never"})
    assert status == "skip"
    assert not failing, failing
