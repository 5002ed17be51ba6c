"""Three scale bugs of the loss that grpo-check must find and place in the right stage.

Each bug is planted fresh here, never taken from the mutant corpus:
- a TRL 1.16 tree whose dapo normaliser lacks the GA / S rescale (TRL 1.10, PR #6024), built at
  run time from the installed TRL: `loss_aggregation` (accumulated gradient against one batch);
- a functions candidate whose bnpo divides by the unclamped token count: `loss_aggregation`
  (every loss type on an all-masked batch);
- a functions candidate whose SAPO gate lacks its 4 / tau factor: `clipping` (tau varied at fixed
  ratios), not `loss_aggregation`, where its on-policy gradient is off by tau / 4 too.
A planted tree is localised when every failing check is in the planted stage, or declares a
dependency on it, and the diagnosis names that stage alone (tests/test_trl_mutants.py's rule).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from test_trl_mutants import check_trees, installed_trl

from checker.candidate import resolve_target
from checker.checks import all_checks
from checker.diagnosis import diagnose
from checker.sandbox import run_in_process

SEED = 1234
TRL_LOSS_FILE = Path("trl") / "trainer" / "grpo_trainer.py"
GA_OVER_S = (
    "normalizer = normalizer * self.current_gradient_accumulation_steps"
    " / self.args.steps_per_generation"
)

# compute_loss as the reference computes it, except for the one planted line of each candidate.
UNCLAMPED_BNPO = '''
    """reference_impl's compute_loss, but bnpo divides by the bare token count."""
    loss = reference.compute_loss(per_token_logps, advantages, completion_mask, loss_type=loss_type, **options)
    if loss_type != "bnpo":
        return loss
    tokens = completion_mask.sum()
    return loss * tokens.clamp(min=1) / tokens  # planted: 0 / 0 on an all-masked batch
'''

UNSCALED_SAPO_GATE = '''
    """reference_impl's compute_loss, but the SAPO gate is sigmoid(tau (r - 1)) without 4 / tau."""
    if loss_type != "sapo":
        return reference.compute_loss(per_token_logps, advantages, completion_mask, loss_type=loss_type, **options)
    if options.get("importance_sampling_level", "token") != "token" or options.get("beta", 0.0):
        raise NotImplementedError("token-level sapo without KL only")
    old = options.get("old_per_token_logps")
    old = per_token_logps.detach() if old is None else old
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    tau = torch.where(
        a > 0, options.get("sapo_temperature_pos", 1.0), options.get("sapo_temperature_neg", 1.05)
    )
    per_token_loss = -torch.sigmoid(tau * (ratio - 1)) * a  # planted: no * 4 / tau
    mask = completion_mask.to(per_token_loss.dtype)
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
'''


def functions_candidate(folder: Path, body: str) -> Path:
    """A candidate module exposing `compute_loss` alone (so the checks of the four stages it
    serves run: ratio, clipping, kl, loss_aggregation), the reference's but for `body`."""
    source = (
        "import torch\n\nimport reference_impl as reference\n\n\n"
        "def compute_loss(per_token_logps, advantages, completion_mask, *, loss_type='dapo',"
        " **options):" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    path = folder / "candidate.py"
    path.write_text(source)
    return path


def run_checks(target: Path) -> tuple[list, dict | None]:
    """Every check on a functions candidate, the engine as the CLI runs it, and the diagnosis."""
    results = run_in_process(resolve_target(str(target)), all_checks(), SEED)
    return results, diagnose(results)


def assert_localised(failing: list[dict], diagnosis: dict | None, stage: str) -> None:
    assert failing, f"nothing failed: the {stage} bug was not detected"
    assert any(r["stage"] == stage for r in failing), failing
    outside = [r for r in failing if r["stage"] != stage]
    assert all(stage in r["depends_on"] for r in outside), outside
    assert diagnosis["root_stages"] == [stage], diagnosis


def failing_dicts(results) -> list[dict]:
    return [
        {"check": r.check, "stage": r.stage, "depends_on": list(r.depends_on), "message": r.message}
        for r in results
        if r.status in ("fail", "error")
    ]


def test_bnpo_without_the_clamp_is_found_in_loss_aggregation(tmp_path):
    results, diagnosis = run_checks(functions_candidate(tmp_path, UNCLAMPED_BNPO))
    failing = failing_dicts(results)
    assert [r["check"] for r in failing] == ["loss_aggregation.fully_masked_batch_is_zero"]
    assert "bnpo: loss 0" in failing[0]["message"]
    assert "token count (mask sum) of 0" in failing[0]["message"]
    assert_localised(failing, diagnosis, "loss_aggregation")


def test_sapo_gate_without_its_scale_is_found_in_clipping(tmp_path):
    results, diagnosis = run_checks(functions_candidate(tmp_path, UNSCALED_SAPO_GATE))
    failing = failing_dicts(results)
    checks = {r["check"]: r for r in failing}
    assert "clipping.sapo_gate_scale" in checks, failing
    assert "lacks its 4 / tau factor" in checks["clipping.sapo_gate_scale"]["message"]
    # the on-policy gradient is off by tau / 4 as well, a knock-on effect of the gate
    assert "loss_aggregation.sapo_gradient_matches_formula" in checks, failing
    assert_localised(failing, diagnosis, "clipping")


def test_correct_sapo_passes_the_gate_scale_and_every_masked_batch(tmp_path):
    """The same wrappers with the planted lines undone pass every check they run."""
    fixed_gate = UNSCALED_SAPO_GATE.replace("* a  # planted: no * 4 / tau", "* 4 / tau * a")
    fixed_count = UNCLAMPED_BNPO.replace(
        "loss * tokens.clamp(min=1) / tokens  # planted: 0 / 0 on an all-masked batch", "loss"
    )
    assert fixed_gate != UNSCALED_SAPO_GATE and fixed_count != UNCLAMPED_BNPO
    for index, body in enumerate((fixed_gate, fixed_count)):
        folder = tmp_path / str(index)
        folder.mkdir()
        results, _ = run_checks(functions_candidate(folder, body))
        by_name = {r.check: r for r in results}
        assert not failing_dicts(results), failing_dicts(results)
        assert by_name["loss_aggregation.fully_masked_batch_is_zero"].status == "pass"
    assert by_name["clipping.sapo_gate_scale"].status == "pass"


@pytest.fixture(scope="module")
def trl_reports(tmp_path_factory) -> dict[str, dict]:
    """The stock installed TRL and a copy without dapo's GA / S rescale, checked in one child."""
    stock = tmp_path_factory.mktemp("stock")
    planted = tmp_path_factory.mktemp("dapo_without_ga_over_s")
    for parent in (stock, planted):
        shutil.copytree(
            installed_trl(), parent / "trl", ignore=shutil.ignore_patterns("__pycache__")
        )
    loss_file = planted / TRL_LOSS_FILE
    text = loss_file.read_text()
    assert text.count(GA_OVER_S) == 1, "TRL's dapo rescale line moved"
    loss_file.write_text(text.replace(GA_OVER_S, "pass  # planted: no GA / S rescale"))
    return dict(zip(("stock", "planted"), check_trees([stock, planted]), strict=True))


def test_trl_without_the_dapo_rescale_is_found_in_loss_aggregation(trl_reports):
    report = trl_reports["planted"]
    assert "/dapo_without_ga_over_s" in report["trl"], report["trl"]
    failing = report["failing"]
    assert [r["check"] for r in failing] == [
        "loss_aggregation.accumulated_gradient_matches_one_batch"
    ]
    # S = GA passes (GA / S = 1); at S = 4 the gradient is half of one batch's
    assert "dapo gradient (GA=2, S=4)" in failing[0]["message"], failing[0]["message"]
    assert_localised(failing, report["diagnosis"], "loss_aggregation")


def test_stock_trl_still_passes_every_check(trl_reports):
    report = trl_reports["stock"]
    assert report["failing"] == [], report["failing"]
    assert report["summary"]["fail"] == 0
