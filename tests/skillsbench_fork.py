"""The SkillsBench-style TRL 0.17 fork that the checker's and the skill probe's tests both use.

A vendored checkout (`<parent>/trl/trl/...` with a pyproject) of TRL 0.17.0 with the three bugs of
SkillsBench's `debug-trl-grpo`: a sign flip in the fp32 branch of `selective_log_softmax`, std +
1e4 in the advantages, and a reasoning-strip decode that blanks plain answers, wired into the
trainer as a fork would.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from trl_releases import trl_release_path

# The fork's decode helper: the three-branch contract with the SkillsBench bug in its last branch
# (every completion without a closing tag is blanked, plain answers included).
FORK_DECODE = '''
def decode_and_strip_padding(inputs: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """
    Decodes completions from reasoning models: extracts the final answer from `<think>...</think>`
    blocks and strips the padding tokens.
    """
    decoded = tokenizer.batch_decode(inputs, skip_special_tokens=True)
    texts = []
    for text in decoded:
        text = text.replace(tokenizer.pad_token, "")
        if "</think>" in text:
            text = text.split("</think>", 1)[1].strip()
        else:
            text = ""  # No closing </think> found
        texts.append(text)
    return texts
'''


def patch(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of `old` in `path` (fails if the release lacks it)."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


def skillsbench_fork(parent: Path) -> Path:
    """`parent/trl`: a TRL 0.17.0 checkout (`trl/trl/...`, a pyproject) with the three planted bugs."""
    checkout = parent / "trl"
    shutil.copytree(
        trl_release_path("0.17.0") / "trl",
        checkout / "trl",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (checkout / "pyproject.toml").write_text('[project]\nname = "trl"\nversion = "0.17.0"\n')
    utils = checkout / "trl" / "trainer" / "utils.py"
    patch(  # the fp32 branch only: the bf16 branch (log_softmax + gather) stays right
        utils,
        "per_token_logps = selected_logits - logsumexp_values",
        "per_token_logps = -(selected_logits - logsumexp_values)",
    )
    text = utils.read_text()
    start = text.index("def decode_and_strip_padding(")
    end = text.index("\ndef ", start + 1)
    utils.write_text(text[:start] + FORK_DECODE.lstrip() + "\n" + text[end:])
    trainer = checkout / "trl" / "trainer" / "grpo_trainer.py"
    patch(
        trainer,
        "advantages = advantages / (std_grouped_rewards + 1e-4)",
        "advantages = advantages / (std_grouped_rewards + 1e4)",
    )
    patch(
        trainer, "from .utils import (\n", "from .utils import (\n    decode_and_strip_padding,\n"
    )
    patch(
        trainer,
        "completions_text = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)",
        "completions_text = decode_and_strip_padding(completion_ids, self.processing_class)",
    )
    return checkout
