"""cispo's weight capped another way than TRL's min(r, epsilon_high): at 1 + epsilon_high, as
verl and open-instruct implement it (`clamp(r, max=1 + clip_higher)`), or clipped to the band on
both sides, as MiniMax-M1 writes it and NeMo-RL implements it. Undeclared, the clipping check
names the declaration; declared, it passes; `profile` measures it; TRL's cap declared as the
offset form still fails."""

from __future__ import annotations

from pathlib import Path

from candidate_support import check_results, profiled

CHECK = "clipping.cispo_caps_weight_at_epsilon_high"

LOSS = """
import torch

def compute_loss(per_token_logps, advantages, completion_mask, *, old_per_token_logps=None,
                 loss_type="dapo", epsilon_low=0.2, epsilon_high=0.28):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    mask = completion_mask.float()
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    if loss_type == "cispo":
        token = -torch.clamp(ratio.detach(), CLAMP) * a * per_token_logps
    elif loss_type == "dapo":
        clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
        token = -torch.min(ratio * a, clipped * a)
    else:
        raise ValueError(f"unknown loss_type {loss_type}")
    return (token * mask).sum() / mask.sum().clamp(min=1)
"""


def _write(folder: Path, cap: str, config: str = "", low: str = "") -> Path:
    clamp = f"min={low}, max={cap}" if low else f"max={cap}"
    (folder / "candidate.py").write_text(LOSS.replace("CLAMP", clamp))
    text = "path: candidate.py\nconfig:\n  epsilon_high: 0.28\n" + config
    (folder / "candidate.yaml").write_text(text)
    return folder / "candidate.yaml"


def _result(path: Path):
    return check_results(path, ("clipping",))[CHECK]


def test_the_offset_cap_undeclared_names_the_declaration(tmp_path):
    result = _result(_write(tmp_path, "1 + epsilon_high"))
    assert result.status == "fail", result.message
    assert "declare cispo_cap: one_plus_epsilon_high" in result.message


def test_the_offset_cap_declared_passes(tmp_path):
    config = "  cispo_cap: one_plus_epsilon_high\n"
    result = _result(_write(tmp_path, "1 + epsilon_high", config))
    assert result.status == "pass", result.message


def test_the_two_sided_band_is_named_declared_and_profiled(tmp_path):
    """NeMo-RL clips cispo's weight to clip(r, 1 - eps_low, 1 + eps_high), as MiniMax-M1 writes it."""
    band = {"cap": "1 + epsilon_high", "low": "1 - epsilon_low"}
    result = _result(_write(tmp_path, **band))
    assert result.status == "fail" and "declare cispo_cap: band" in result.message, result.message
    result = _result(_write(tmp_path, **band, config="  cispo_cap: band\n"))
    assert result.status == "pass", result.message
    (tmp_path / "c.yaml").unlink(missing_ok=True)
    assert profiled(tmp_path)["config"]["cispo_cap"] == "band"


def test_trl_s_cap_declared_as_the_offset_fails(tmp_path):
    config = "  cispo_cap: one_plus_epsilon_high\n"
    result = _result(_write(tmp_path, "epsilon_high", config))
    assert result.status == "fail", result.message
    assert "epsilon_high itself (TRL" in result.message


def test_profile_measures_the_cap_and_the_bound_to_four_decimals(tmp_path):
    """An epsilon_high of 0.272 (open-instruct's clip_higher) is written as 0.272, not 0.27."""
    _write(tmp_path, "1 + epsilon_high")
    source = (
        (tmp_path / "candidate.py").read_text().replace("epsilon_high=0.28", "epsilon_high=0.272")
    )
    (tmp_path / "candidate.py").write_text(source)
    config = profiled(tmp_path)["config"]
    assert config["cispo_cap"] == "one_plus_epsilon_high", config
    assert config["epsilon_high"] == 0.272, config
