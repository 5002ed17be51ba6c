"""Issue 22's review of the grpo skill: each corrected claim recomputed or read from TRL's source,
the wrong wording gone, one place per fact, the quick start first, and the playbook's new
entries naming only options and metrics that exist in the releases they name.

Version tables and the probe have their own files (test_skill_versions.py, test_skill_probe.py).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
import torch
import transformers
import trl
from test_skill_facts import FILES, SKILL, TEXT, TRAINER_TEXT, Claim, holds
from trl import GRPOConfig
from trl_releases import trl_release_path

ROOT = Path(__file__).resolve().parents[1]
TRL_DIR = Path(trl.__file__).parent
CONFIG_FIELDS = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
TRAINING_FIELDS = {f.name: f.default for f in dataclasses.fields(transformers.TrainingArguments)}
PLAYBOOK_QUESTIONS = TEXT["playbook"].split("\n## questions\n", 1)[1]


def flat(text: str) -> str:
    return " ".join(text.split())


def release_source(version: str, name: str) -> str:
    return (trl_release_path(version) / "trl" / "trainer" / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# The quick start: what to run first, within SKILL.md's first 40 lines.


def test_quick_start_is_in_the_first_40_lines():
    lines = TEXT["SKILL.md"].splitlines()
    assert len(lines) <= 300
    first = "\n".join(lines[:40])
    assert "## Quick start" in first
    commands = [
        line.split("#")[0].split() for line in first.splitlines() if line.startswith("    ")
    ]
    assert ["grpo-check", "./trl"] in commands
    assert any(c[:1] == ["grpo-check"] and re.fullmatch(r"\S+\.py:\w+", c[1]) for c in commands)
    assert any(c[:2] == ["grpo-check", "profile"] for c in commands)
    assert ["python", "scripts/grpo_probe.py", "--trl", "./trl"] in commands
    text = flat(first)
    for status in ("**0**", "**1**", "**2**"):
        assert status in text
    assert "nothing was checked" in text and "a check failed" in text
    for target in ("debugging-playbook.md", "grpo-check.md", "grpo-algorithm.md", "internals.md"):
        assert f"references/{target}" in first or f"references/grpo-trainer-{target}" in first


def test_quick_start_exit_codes_are_the_checkers():
    """The meanings SKILL.md gives are the contract's, as `checker.cli` implements them."""
    from click.testing import CliRunner

    from checker.cli import main

    result = CliRunner().invoke(main, ["check", str(ROOT / "no-such-trainer.py")])
    assert result.exit_code == 2


# ---------------------------------------------------------------------------------------------
# One place per fact: the facts the review found copied, each now stated in exactly one file.

ONE_PLACE = {
    "±0.354": "playbook",  # the loss-sign example
    "[[1, 1], [2]]": "algorithm",  # bnpo's accumulation trap
    "[[1, 1, x], [2, x, x]]": "algorithm",  # the aggregation fixture
    "`steps_per_generation · num_iterations`": "algorithm",  # when old log-probs are stored
    "`kernels/logprob_entropy.py`": "internals",  # where 1.14's log-softmax really runs
    "`parse_response`": "playbook",  # conversational completions in 1.16
}


@pytest.mark.parametrize("fact,home", ONE_PLACE.items(), ids=list(ONE_PLACE))
def test_fact_is_stated_in_one_place(fact, home):
    holders = [name for name, text in TEXT.items() if fact in flat(text)]
    assert holders == [home], holders


def test_copies_link_to_the_one_place():
    skill = TEXT["SKILL.md"]
    for link in (
        "references/grpo-algorithm.md#6-importance-ratio-and-gspo",
        "references/grpo-algorithm.md#9-loss-types-and-their-normalisation",
        "references/debugging-playbook.md#the-loss-is-0-negative-or-rising",
        "references/grpo-trainer-internals.md#where-each-stage-lives",
        "references/debugging-playbook.md#the-reward-function-signature-and-conversational-completions",
    ):
        assert f"({link})" in skill, link
    assert "grpo-algorithm.md §6" in TEXT["internals"]
    assert "grpo-trainer-internals.md §7" in flat(TEXT["playbook"])


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for the markdown headings of `text`."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_anchor_link_resolves():
    by_path = {path.relative_to(SKILL).as_posix(): key for key, path in FILES.items()}
    for key, text in TEXT.items():
        here = FILES[key].relative_to(SKILL).as_posix()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            if target:
                target = (Path(here).parent / target).as_posix() if key != "SKILL.md" else target
            file_key = by_path[target] if target else key
            assert anchor in heading_anchors(TEXT[file_key]), (key, target, anchor)


# ---------------------------------------------------------------------------------------------
# The ten rows of the review, each with the wrong wording that must stay gone.

REMOVED_22 = [
    # 1. 1.14 runs selective_log_softmax_and_entropy, and a Triton kernel on GPUs
    ("SKILL.md", "Up to TRL 1.14 the log-softmax is\n`selective_log_softmax`"),
    ("SKILL.md", "up to TRL\n1.14 in `selective_log_softmax`"),
    ("internals", "then `selective_log_softmax` in v0.15-v1.14"),
    (
        "internals",
        "Up to\nTRL 1.14 this method sliced the logits and called `selective_log_softmax`",
    ),
    ("playbook", "Where to look: up to TRL 1.14, `selective_log_softmax`"),
    # 2. releases between rows
    ("internals", "releases between two rows behave like the earlier row"),
    # 3. top-k 50 only without vLLM in 0.14 and 0.15
    (
        "internals",
        "So sampling from the top 50\n  tokens is TRL's own default up to 0.17, not a bug.",
    ),
    ("playbook", "Top-k 50 is TRL's own default up to 0.17 (`top_k=None`"),
    # 4. no such distribution on the index
    ("SKILL.md", "pip install grpo-skill"),
    ("grpo-check", "pip install grpo-skill          # from the package registry"),
    # 5. TRL's on-policy ratio is 1 in any dtype
    ("SKILL.md", "enough to\n  make an on-policy ratio differ from 1"),
    # 6. clip ratio 0 with mu > 1 is a hint
    ("internals", "always 0 with μ > 1 means old log-probs are not frozen"),
    ("playbook", "| Clip ratio always 0 with `num_iterations` > 1 |"),
    # 7. the decode invariant is the project's convention, and 1.16 may parse responses
    (
        "SKILL.md",
        '| plain text unchanged; closed block gives the answer; unclosed block gives "" |',
    ),
]


@pytest.mark.parametrize("file,phrase", REMOVED_22, ids=[f"{f}:{p[:40]}" for f, p in REMOVED_22])
def test_issue_22_wrong_statement_is_gone(file, phrase):
    assert phrase not in TEXT[file]


def test_probe_docstring_no_longer_says_1_14_uses_selective_log_softmax():
    probe = (SKILL / "scripts" / "grpo_probe.py").read_text()
    assert "On TRL up to\n  1.14 the helper is trl.trainer.utils.selective_log_softmax" not in probe


def ratio_is_exactly_one_in_bf16() -> bool:
    """TRL 1.16 takes old = logp.detach() on policy; exp(logp - logp.detach()) is 1 in bf16 too."""
    stored = "old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else"
    logps = (torch.randn(4, 7, generator=torch.Generator().manual_seed(0)) * 5).bfloat16()
    logps.requires_grad_()
    ratio = torch.exp(logps - logps.detach())
    (grad,) = torch.autograd.grad(ratio.sum(), logps)
    return stored in TRAINER_TEXT and bool((ratio == 1).all()) and bool((grad == 1).all())


def clip_fraction_at_lr_1e_6() -> float:
    """Fraction of tokens whose ratio leaves [0.8, 1.2] after one Adam step at lr 1e-6 on a tiny
    model (the second pass of num_iterations=2): TRL's default learning rate and epsilon."""
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    torch.manual_seed(0)
    model, _ = load_tiny()
    ids = torch.randint(
        0, model.config.vocab_size, (8, 16), generator=torch.Generator().manual_seed(1)
    )
    mask = torch.ones_like(ids)
    with torch.no_grad():
        old = get_per_token_logps(model, ids, mask, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG_FIELDS["learning_rate"])
    advantages = torch.randn(8, 1, generator=torch.Generator().manual_seed(2))
    loss = -(get_per_token_logps(model, ids, mask, 8) * advantages).mean()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        ratio = torch.exp(get_per_token_logps(model, ids, mask, 8) - old)
    epsilon = CONFIG_FIELDS["epsilon"]
    return ((ratio < 1 - epsilon) | (ratio > 1 + epsilon)).float().mean().item()


def parse_response_path_as_stated() -> bool:
    """1.16 builds chat completions with parse_response when the tokenizer has a response template
    or schema, adds one when tools are given, and the schemas split `<think>` into its own field."""
    templates = (TRL_DIR / "chat_template_utils.py").read_text()
    return (
        "[parse_response(self._tokenizer, ids, prefix=prompt_ids[i], tools=per_prompt_tools[i])]"
        in TRAINER_TEXT
        and 'getattr(self._tokenizer, "response_template", None) is not None' in TRAINER_TEXT
        and "processing_class = add_response_schema(processing_class)" in TRAINER_TEXT
        and "if self.tools:" in TRAINER_TEXT
        and re.search(r"<think>.*\(\?P<reasoning_content>", templates) is not None
    )


REVIEW_CLAIMS = [
    Claim(
        "SKILL.md",
        "TRL's\n  on-policy ratio is `exp(logp - logp.detach())`, exactly 1 in any dtype",
        ratio_is_exactly_one_in_bf16,
    ),
    Claim(
        "internals",
        "at a learning rate of 1e-6 the clipped fraction can round to 0 legitimately",
        lambda: CONFIG_FIELDS["learning_rate"] == 1e-6 and clip_fraction_at_lr_1e_6() == 0.0,
    ),
    Claim(
        "playbook",
        "at a learning rate of 1e-6 the clipped fraction can round to 0 legitimately",
        lambda: clip_fraction_at_lr_1e_6() == 0.0,
    ),
    Claim(
        "playbook",
        "TRL 1.16 with transformers 5 builds that message with `parse_response` instead\n"
        "  when the tokenizer has a response template or schema (TRL adds one for known chat templates\n"
        "  when `tools` are passed)",
        parse_response_path_as_stated,
    ),
    Claim(
        "grpo-check",
        "which is not published on a\npackage index",
        lambda: (
            tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == "grpo-skill"
        ),
    ),
]


@pytest.mark.parametrize(
    "claim", REVIEW_CLAIMS, ids=[f"{c.file}:{c.text[:40]}" for c in REVIEW_CLAIMS]
)
def test_review_claim_is_in_the_skill_and_true(claim):
    assert claim.text in TEXT[claim.file], f"claim no longer in {claim.file}: {claim.text!r}"
    assert holds(claim), f"claim is false: {claim.text!r}"


def test_install_commands_name_what_the_project_builds():
    """Every `pip install` of grpo-check.md installs from source, a built wheel or a git URL."""
    lines = [line.strip() for line in TEXT["grpo-check"].splitlines() if "pip install" in line]
    assert lines
    for line in lines:
        target = line.split("#")[0].split()[-1]
        assert target in (".", '"git+URL"') or target.startswith("grpo_skill-"), line
    assert (ROOT / "pyproject.toml").is_file()


# ---------------------------------------------------------------------------------------------
# The playbook's new entries: every option and metric named exists in TRL 1.16 (or
# transformers' TrainingArguments), and every "TRL 0.NN and later" holds in 0.NN.0.

OPTION = re.compile(r"`([a-z][a-z0-9_]+)(?:=[^`]*)?`")
NOT_OPTIONS = {  # identifiers in the questions that are not configuration fields
    "reward",
    "loss",
    "kl",
    "entropy",
    "step_time",
    "grad_norm",
    "kwargs",
    "nan",
    "inf",
    "none",
    "grpo",
    "bnpo",
    "dapo",
    "dr_grpo",
    "content",
    "completion",
    "completions",
    "prompts",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "reward_func",
    "parse_response",
    "reasoning_content",
    "peft_config",
    "frac_reward_zero_std",
    "reward_std",
    "generation_config",
    "eos_token_id",
    "skip_special_tokens",
    "attention_dropout",
    "hidden_dropout",
    "sequence_mask",
    "colocate",
    "server",
    "tools",
    "from_pretrained",
    "generate",
}
LOGGED = set(re.findall(r'_metrics\[(?:mode|"train")\]\["([^"]+)"\]', TRAINER_TEXT))


def test_options_named_in_the_questions_exist():
    named = {m for m in OPTION.findall(PLAYBOOK_QUESTIONS)} - NOT_OPTIONS
    unknown = {n for n in named if n not in CONFIG_FIELDS and n not in TRAINING_FIELDS}
    assert not unknown, unknown
    # the ones the new entries lean on
    for option in (
        "vllm_enable_sleep_mode",
        "vllm_server_timeout",
        "vllm_group_port",
        "vllm_max_model_length",
        "ds3_gather_for_generation",
        "logging_nan_inf_filter",
        "steps_per_generation",
        "log_completions",
    ):
        assert option in named, option


def test_metrics_named_in_the_questions_are_logged():
    for metric in ("kl", "entropy", "step_time", "reward", "frac_reward_zero_std"):
        assert f"`{metric}`" in PLAYBOOK_QUESTIONS and metric in LOGGED, metric
    assert "`grad_norm`" in PLAYBOOK_QUESTIONS  # transformers' Trainer logs it


SINCE = re.compile(r"`([a-z_/]+)(?:=\w+)?`[^`]{0,60}?\(TRL (\d+\.\d+) and\s+later[);]")


def test_every_release_bound_in_the_questions_holds():
    """`name` ... (TRL 0.NN and later): the name is in 0.NN.0's config or trainer, and in 1.16."""
    found = SINCE.findall(PLAYBOOK_QUESTIONS)
    assert {name for name, _ in found} >= {
        "vllm_enable_sleep_mode",
        "entropy",
        "step_time",
        "sampling/sampling_logp_difference/mean",
    }, found
    for name, minor in found:
        key = name.removesuffix("/mean")
        text = release_source(f"{minor}.0", "grpo_config.py") + release_source(
            f"{minor}.0", "grpo_trainer.py"
        )
        assert re.search(rf"\b{re.escape(key)}\b", text), (name, minor)


def test_defaults_and_messages_quoted_by_the_new_entries():
    questions = flat(PLAYBOOK_QUESTIONS)
    assert "`vllm_gpu_memory_utilization` (0.3)" in questions
    assert CONFIG_FIELDS["vllm_gpu_memory_utilization"] == 0.3
    assert "`vllm_server_timeout` (240.0 s)" in questions
    assert CONFIG_FIELDS["vllm_server_timeout"] == 240.0
    client = (TRL_DIR / "generation" / "vllm_client.py").read_text()
    assert "The vLLM server can't be reached at ... after 240.0 seconds" in questions
    assert "can't be reached at {self.base_url} after {total_timeout} seconds" in client
    assert "`vllm_group_port` (51216)" in questions and CONFIG_FIELDS["vllm_group_port"] == 51216
    assert (
        "curl http://HOST:PORT/health" in questions and 'url = f"{self.base_url}/health"' in client
    )
    assert "(`ddp_timeout`, 1800 s)" in questions and TRAINING_FIELDS["ddp_timeout"] == 1800
    assert "`logging_nan_inf_filter=True` (transformers' default)" in questions
    assert TRAINING_FIELDS["logging_nan_inf_filter"] is True
    assert "`ds3_gather_for_generation` (default True)" in questions
    help_text = flat(GRPOConfig.__doc__)
    assert CONFIG_FIELDS["ds3_gather_for_generation"] is True
    assert "Disabling this option is not compatible with vLLM generation" in help_text
    assert "generate with vLLM (`use_vllm=True`, which needs the gather on)" in questions


def test_mask_sums_are_clamped_from_0_17():
    """'TRL clamps it to at least 1 from 0.17': 0.16 divides by the raw mask sum."""
    assert "TRL clamps it to at least 1 from 0.17" in flat(PLAYBOOK_QUESTIONS)
    assert "completion_mask.sum().clamp(min=1.0)" in release_source("0.17.0", "grpo_trainer.py")
    older = release_source("0.16.0", "grpo_trainer.py")
    assert "/ completion_mask.sum()\n" in older and "clamp(min=1.0)" not in older
