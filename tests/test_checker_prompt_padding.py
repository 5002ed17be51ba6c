"""A scorer that passes no attention mask is right for a trainer that never pads prompts (one
prompt per batch, repeated G times, as simple_GRPO scores): undeclared, the padding check names
`prompt_padding: none`; declared, the log-probs are checked on prompts of one length with right
padding only, and pass; a scorer that ignores the temperature still fails."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results

SCORER = """
import torch

def get_per_token_logps(model, input_ids, attention_mask, logits_to_keep, temperature=1.0):
    logits = model(input_ids=input_ids).logits[:, :-1, :] / TEMPERATURE  # no attention mask
    logits = logits[:, -logits_to_keep:]
    ids = input_ids[:, -logits_to_keep:]
    return torch.gather(logits.log_softmax(-1), -1, ids.unsqueeze(-1)).squeeze(-1)
"""
CHECKS = ("logprobs.model_logps_match_reference", "logprobs.padding_does_not_change_logps")


def _results(folder: Path, config: str, temperature: str = "temperature") -> dict:
    (folder / "candidate.py").write_text(SCORER.replace("TEMPERATURE", temperature))
    (folder / "c.yaml").write_text("path: candidate.py\n" + config)
    results = check_results(folder / "c.yaml", ("logprobs",))
    return {name: results[name] for name in CHECKS}


def test_undeclared_the_padding_check_names_the_declaration(tmp_path):
    result = _results(tmp_path, "")["logprobs.padding_does_not_change_logps"]
    assert result.status == "fail", result.message
    assert "prompt_padding: none" in result.message


def test_declared_the_unpadded_scorer_passes(tmp_path):
    results = _results(tmp_path, "config:\n  prompt_padding: none\n")
    assert {r.status for r in results.values()} == {"pass"}, results


def test_declared_a_scorer_without_the_temperature_still_fails(tmp_path):
    results = _results(tmp_path, "config:\n  prompt_padding: none\n", temperature="1.0")
    assert results["logprobs.model_logps_match_reference"].status == "fail"
