"""Behavioural probes of a patched TRL `GRPOTrainer` (the `trl` task family).

The child process (this file as a script) imports the workspace's TRL, builds small GRPOTrainers
on the tiny local model and records what they compute: advantages, completion masks, log-probs,
losses with their gradients, what the reward function was given, the reference model after
training. The verifier's own process then recomputes each from the recorded inputs with
`reference_impl` (TRL 1.16 semantics) and compares. Nothing reads the source text.

A fork of an older release (TRL 0.17 to 1.14) is driven by what its trainer has (the scoring
method's name and return, `_calculate_rewards` or not, one EOS id or a list) and judged against
that release's semantics and the fork's intended customisations, the task's `conventions`
(`task_harness/releases.py::release_conventions`, overridden by `[grpo.intended]`); without them,
TRL 1.16's.

The verifier runs it in the child as `session.main(job)`, with the workspace as working folder
and job = {"stages", "rules", "conventions", "out"}; the observations go to job["out"] as plain
JSON. "rules" holds the rule names the task's bugs and decoys are judged by (task.toml `probes`):
the `<stage>.<name>` rules of FORK_CASES and below judge a stage against a TRL 1.16 fork's
intended semantics (its GRPOConfig defaults and extra terms), `defaults.<field>=<value>` reads
GRPOConfig's defaults.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

for _name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ[_name] = "1"

import torch  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from judge import describe, same  # noqa: E402

G = 4
PROMPTS = [f"{d} =" for d in (1, 2, 3, 4)]
COMPLETION_LENGTH = 6
TEMPERATURE = 0.7
# Rewards by row: groups with different spreads, so a batch-wide statistic or a huge epsilon shows.
SPREAD = [0.0, 1.0, 1.0, 1.0, 3.0, 5.0, 3.0, 5.0, 0.2, 0.2, 0.2, 0.9, 2.0, 0.0, 1.0, 0.5]
AUX = [1.0, None, 0.0, 1.0, None, None, 0.5, 0.5, 1.0, 0.0, None, 1.0, 0.0, 0.0, 1.0, 1.0]
# With AUX: rows 1 and 4 are scored by no function (both None), rows 5, 10 and 11 by one.
AUX2 = [0.5, None, 1.0, None, None, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, None, 1.0, 0.5, 0.0, 1.0]
DECODE_TEXTS = [
    "7",
    "<think>3 + 4</think> 7",
    "<think>3 + 4",
    "3 + 4</think>7",
    "the answer is 8",
    "<think></think>9",
    "",
    "5 5",
]
PLAIN_ROWS = [0, 4, 6, 7]
# Log-ratio (or ref - logp) offsets of the fork loss cases, cycled over the tokens: inside and
# outside 1 +- 0.2 and 1 + 0.28 (DAPO clip-higher), past a dual-clip bound of 3, a KL of 10 and a
# log-ratio of 20, with both signs.
FORK_OFFSETS = [0.1, -0.24, 0.24, 0.6, -0.6, 1.5, -1.5, 22.0, -22.0, 0.0, 15.0, -15.0]


def _wants(stages, name: str) -> bool:
    """Whether the job asks for `name` or a rule under it (`name.x`, `name_x`)."""
    return any(s == name or s.startswith((f"{name}.", f"{name}_")) for s in stages)


# TRL 1.16's semantics where a task states none (`task_harness/releases.py` has the others).
DEFAULT_CONVENTIONS = {
    "loss_types": ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"],
    "scale_rewards": ["group", "batch", "none"],
    "delta": True,
    "importance_sampling_level": True,
    "use_bias_correction_kl": True,
    "bias_correction_field": True,
    "nan_rewards": "excluded",
    "decode": "plain",
}
# Decoy rules that need the observations of a stage the task may not list.
RULE_STAGES = {
    "decode_reasoning": "decode",
    "decode_unclosed": "decode",
    "rewards_unscorable": "rewards",
}


def _conventions(conventions: dict | None) -> dict:
    return DEFAULT_CONVENTIONS | (conventions or {})


def _release(conventions: dict) -> tuple[int, ...]:
    version = conventions.get("release")
    return tuple(int(p) for p in version.split(".")[:3]) if version else (1, 16, 0)


def tiny_spec():
    from reference_impl.tiny import TinySpec

    return TinySpec(eos_bias=2.0)  # an untrained model that often stops early: ragged masks


# --- child side: observe ------------------------------------------------------------------------
def _spread_reward(prompts, completions, **_):
    return SPREAD[: len(completions)]


def _aux_reward(prompts, completions, **_):
    return AUX[: len(completions)]


def _aux2_reward(prompts, completions, **_):
    return AUX2[: len(completions)]


def _config_value(name: str, value):
    """`value` as the imported release's GRPOConfig takes it: up to TRL 0.21 `scale_rewards` is
    a bool (True divides by the group std; TRL 0.21.0 `trl/trainer/grpo_config.py`)."""
    from dataclasses import fields

    from trl import GRPOConfig

    default = {f.name: f.default for f in fields(GRPOConfig)}.get(name)
    if name == "scale_rewards" and isinstance(default, bool):
        return value == "group"
    return value


def _trainer(workdir: str, reward_funcs=None, pad_token: str | None = None, **overrides):
    """A GRPOTrainer of the workspace's TRL on the tiny model; `pad_token`: the tokenizer's pad
    token in place of its own (`"<eos>"`: pad == EOS, as many chat models ship)."""
    import transformers
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    from reference_impl.tiny import tiny_model_path

    path = tiny_model_path(tiny_spec())
    config = dict(
        output_dir=workdir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=len(PROMPTS) * G,
        num_generations=G,
        max_completion_length=COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        max_steps=2,
        learning_rate=5e-2,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    config.update({name: _config_value(name, value) for name, value in overrides.items()})
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    if pad_token is not None:
        tokenizer.pad_token = pad_token
    if int(transformers.__version__.split(".")[0]) < 5:
        # TRL 0.21-0.26 pass every tokenizer output to `generate`, which in transformers 4
        # refuses `token_type_ids` (the model takes none)
        tokenizer.model_input_names = ["input_ids", "attention_mask"]
    trainer = GRPOTrainer(
        model=str(path),
        reward_funcs=reward_funcs or [_spread_reward],
        args=GRPOConfig(**config),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); probes call below it
    return trainer


def _capture_rewards(trainer) -> dict:
    """Wrap the trainer's reward computation to keep what the reward functions received and returned."""
    seen = {}
    if not hasattr(trainer, "_calculate_rewards"):  # up to TRL 0.19.0 the rewards are inline
        return _capture_reward_functions(trainer, seen)
    original = trainer._calculate_rewards

    def calculate(inputs, prompts, completions, completion_ids_list):
        seen["completions"] = list(completions)
        seen["rewards_per_func"] = original(inputs, prompts, completions, completion_ids_list)
        return seen["rewards_per_func"]

    trainer._calculate_rewards = calculate
    return seen


def _capture_reward_functions(trainer, seen: dict) -> dict:
    """Wrap each reward function to keep what it received and returned (None as NaN, as TRL 0.17
    `_generate_and_score_completions` converts it)."""
    outputs = {}

    def wrap(index, function):
        def wrapped(prompts, completions, **kwargs):
            values = function(prompts=prompts, completions=completions, **kwargs)
            seen["completions"] = list(completions)
            outputs[index] = [float("nan") if v is None else float(v) for v in values]
            columns = [outputs[i] for i in sorted(outputs)]
            seen["rewards_per_func"] = torch.tensor(columns, dtype=torch.float32).T
            return values

        wrapped.__name__ = getattr(function, "__name__", f"reward_{index}")
        return wrapped

    trainer.reward_funcs = [wrap(i, f) for i, f in enumerate(trainer.reward_funcs)]
    return seen


def _logps(trainer, model, input_ids, attention_mask, logits_to_keep) -> torch.Tensor:
    """The release's scoring method: `_get_per_token_logps` (a tensor) up to TRL 0.19, then
    `_get_per_token_logps_and_entropies` ((logps, entropies), from 1.7.1 with the aux loss)."""
    method = getattr(trainer, "_get_per_token_logps_and_entropies", None)
    if method is None:
        return trainer._get_per_token_logps(model, input_ids, attention_mask, logits_to_keep)
    out = method(model, input_ids, attention_mask, logits_to_keep)
    return out[0] if isinstance(out, tuple) else out


def _eos_token_ids(trainer) -> list[int]:
    """The ids that end a completion: a list from TRL 1.14.2, the tokenizer's one id before."""
    ids = getattr(trainer, "eos_token_ids", None)
    return list(ids) if ids is not None else [trainer.processing_class.eos_token_id]


def _generate(trainer) -> dict:
    inputs = [{"prompt": p} for p in PROMPTS for _ in range(G)]
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(inputs)


def _observe_scoring(workdir: str, stages: list[str], conventions: dict) -> dict:
    seen = {}
    if "advantages.default_batch" in stages:
        trainer = _trainer(workdir)  # scale_rewards left to the fork's default
        captured = _capture_rewards(trainer)
        batch = _generate(trainer)
        seen["advantages.default_scale"] = (captured["rewards_per_func"], batch["advantages"])
    if "advantages" in stages:
        for scale in conventions["scale_rewards"]:
            trainer = _trainer(workdir, scale_rewards=scale)
            captured = _capture_rewards(trainer)
            batch = _generate(trainer)
            seen[f"advantages.{scale}"] = (captured["rewards_per_func"], batch["advantages"])
    if _wants(stages, "rewards"):
        trainer = _trainer(workdir, [_spread_reward, _aux_reward], reward_weights=[1.0, 0.5])
        captured = _capture_rewards(trainer)
        batch = _generate(trainer)
        seen["rewards.weighted_with_none"] = (captured["rewards_per_func"], batch["advantages"])
        trainer = _trainer(workdir, [_aux_reward, _aux2_reward], reward_weights=[1.0, 0.5])
        captured = _capture_rewards(trainer)
        batch = _generate(trainer)
        seen["rewards.unscorable_rows"] = (captured["rewards_per_func"], batch["advantages"])
    if _wants(stages, "decode"):
        trainer = _trainer(workdir)
        captured = _capture_rewards(trainer)
        texts = DECODE_TEXTS * (len(PROMPTS) * G // len(DECODE_TEXTS))
        trainer.processing_class.batch_decode = lambda ids, **_: texts[: len(ids)]
        _generate(trainer)
        seen["decode.reward_inputs"] = captured["completions"][: len(DECODE_TEXTS)]
    return seen


def _keep_logps(trainer) -> dict:
    """Keep the policy log-probs `_compute_loss` computes, with their graph, to take dL/dlogp."""
    kept = {}
    name = next(
        n
        for n in ("_get_per_token_logps_and_entropies", "_get_per_token_logps")
        if hasattr(trainer, n)
    )
    original = getattr(trainer, name)

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        kept["logps"] = out[0] if isinstance(out, tuple) else out
        return out

    setattr(trainer, name, wrapped)
    return kept


LOSS_CASES = {
    "ratio.token": ("ratio", dict(loss_type="dapo"), 0.1, None),
    "ratio.sequence": (
        "ratio",
        dict(loss_type="dapo", importance_sampling_level="sequence"),
        0.1,
        None,
    ),
    "clipping.clip_higher": ("clipping", dict(loss_type="dapo", epsilon_high=0.28), 0.8, None),
    # epsilon_high explicit: a fork may change its default (trl-reward-weights-clipping's does)
    "clipping.delta": ("clipping", dict(loss_type="bnpo", delta=1.3, epsilon_high=0.2), 0.8, None),
    "kl.k3": ("kl", dict(loss_type="dapo", beta=0.04), None, 0.5),
    "kl.bias_correction": ("kl", dict(loss_type="grpo", beta=0.1), 0.1, 0.3),
    "kl.no_bias_correction": (
        "kl",
        dict(loss_type="grpo", beta=0.1, use_bias_correction_kl=False),
        0.1,
        0.3,
    ),
    "loss_aggregation.grpo": ("loss_aggregation", dict(loss_type="grpo"), None, None),
    "loss_aggregation.bnpo": ("loss_aggregation", dict(loss_type="bnpo"), None, None),
    "loss_aggregation.dr_grpo": ("loss_aggregation", dict(loss_type="dr_grpo"), None, None),
    "loss_aggregation.dapo": ("loss_aggregation", dict(loss_type="dapo"), None, None),
}


def loss_case(name: str, conventions: dict) -> dict | None:
    """The config of LOSS_CASES[name] on the fork's release, or None where it has no such
    setting: no dapo before TRL 0.22.2 (its token mean over the batch is bnpo's on one
    micro-batch), no `delta` before 0.18.2, no `importance_sampling_level` before 0.20.0, no
    `use_bias_correction_kl` before 0.26.2."""
    overrides = dict(LOSS_CASES[name][1])
    if overrides.get("loss_type") == "dapo" and "dapo" not in conventions["loss_types"]:
        overrides["loss_type"] = "bnpo" if name != "loss_aggregation.dapo" else None
    if overrides.get("loss_type") is None:
        return None
    for field in ("delta", "importance_sampling_level"):
        if field in overrides and not conventions[field]:
            return None
    if "use_bias_correction_kl" in overrides and not conventions["bias_correction_field"]:
        return None
    if "beta" not in overrides and conventions.get("beta", 0.0) != 0.0:
        overrides["beta"] = 0.0  # TRL 0.17-0.19.0 default to 0.04; the case has no reference
    return overrides


# Loss cases judged against a task fork's intended semantics: the trainer is built with
# `overrides` only, so the fork's own GRPOConfig defaults fill the rest, and `expected` is what the
# fork intends them to be, with its extra terms (`_fork_loss`). (stage, overrides, old log-probs
# offset by FORK_OFFSETS, ref log-probs offset by FORK_OFFSETS, expected)
FORK_CASES = {
    # trl-ratio-aggregation's fork: loss_type "grpo" and epsilon_high 0.28 by default, the log-ratio
    # clamped to +-20 before exp (verl core_algos.compute_policy_loss)
    "ratio.clamped_log_ratio": (
        "ratio",
        {},
        True,
        False,
        dict(loss_type="grpo", epsilon_high=0.28, log_ratio_clamp=20.0),
    ),
    "loss_aggregation.default_grpo": ("loss_aggregation", {}, False, False, dict(loss_type="grpo")),
    # trl-reward-weights-clipping's fork: epsilon_high 0.28 by default (DAPO, arXiv:2503.14476) and
    # dual-clip PPO, the loss of a negative-advantage token capped at 3 |A| (arXiv:1912.09729)
    "clipping.dual_clip": (
        "clipping",
        {},
        True,
        False,
        dict(loss_type="dapo", epsilon_high=0.28, dual_clip_c=3.0),
    ),
    # trl-kl-reference's fork: beta 0.04 by default, the per-token KL capped at 10 (verl low_var_kl)
    "kl.clamped": ("kl", {}, False, True, dict(loss_type="dapo", beta=0.04, kl_max=10.0)),
}


def _fork_offsets(shape) -> torch.Tensor:
    rows, cols = torch.arange(shape[0]).unsqueeze(1), torch.arange(shape[1]).unsqueeze(0)
    return torch.tensor(FORK_OFFSETS)[(rows + cols) % len(FORK_OFFSETS)]


def _observe_losses(workdir: str, stages: list[str], conventions: dict) -> dict:
    seen = {}
    cases = {
        name: case
        for name, case in LOSS_CASES.items()
        if case[0] in stages and loss_case(name, conventions) is not None
    }
    forks = {name: case for name, case in FORK_CASES.items() if name in stages}
    if "ratio" in stages:
        seen.update(_observe_old_logps(workdir))
    if not cases and not forks:
        return seen
    batch = _generate(_trainer(workdir))
    mask = batch["completion_mask"]
    g = torch.Generator().manual_seed(7)
    noise = torch.rand(mask.shape, generator=g) * 2 - 1
    advantages = torch.randn(mask.size(0), generator=g)
    offsets = _fork_offsets(mask.shape)
    runs = {
        name: (loss_case(name, conventions), old, ref) for name, (_, _, old, ref) in cases.items()
    }
    for name, (_, overrides, old, ref, _) in forks.items():
        runs[name] = (overrides, 1.0 if old else None, 1.0 if ref else None)
    for name, (overrides, old_offset, ref_offset) in runs.items():
        deltas = offsets if name in forks else noise
        extra = {}
        if old_offset is not None and _release(conventions) < (0, 19, 0):
            # TRL 0.17-0.18 `_compute_loss` reads the old log-probs only when num_iterations > 1
            extra["num_iterations"] = 2
        trainer = _trainer(workdir, **overrides, **extra)
        trainer.model.train()
        kept = _keep_logps(trainer)
        with torch.no_grad():
            logps = _logps(
                trainer,
                trainer.model,
                torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
                torch.cat([batch["prompt_mask"], mask], dim=1),
                mask.size(1),
            )
        inputs = dict(batch, advantages=advantages.clone())
        inputs.pop("old_per_token_logps", None)
        inputs.pop("ref_per_token_logps", None)
        if old_offset is not None:
            inputs["old_per_token_logps"] = logps - deltas * old_offset
        if ref_offset is not None:
            inputs["ref_per_token_logps"] = logps + deltas.flip(0) * ref_offset
        loss = trainer._compute_loss(trainer.model, inputs)
        (grad,) = torch.autograd.grad(loss, kept["logps"])
        seen[name] = {
            "loss": loss.detach(),
            "grad": grad,
            "logps": kept["logps"].detach(),
            "mask": mask,
            "advantages": advantages,
            "old": inputs.get("old_per_token_logps"),
            "ref": inputs.get("ref_per_token_logps"),
            "num_items_in_batch": batch.get("num_items_in_batch"),
            "config": overrides,
        }
    return seen


def _observe_old_logps(workdir: str) -> dict:
    """With num_iterations = 2 the batch must carry the log-probs of the policy that sampled it,
    frozen for the second pass (catalog B36/B37)."""
    trainer = _trainer(workdir, num_iterations=2)
    batch = _generate(trainer)
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    old = batch.get("old_per_token_logps")
    return {
        "ratio.old_logps_kept": {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "completion_mask": batch["completion_mask"],
            "old": old if old is not None else {"error": "no old_per_token_logps in the batch"},
        }
    }


def _reference_after_training(trainer) -> dict:
    trainer.train()
    probe_ids = torch.tensor([[3, 13, 4, 5, 6]])
    with torch.no_grad():
        return {
            "ref_logits": trainer.ref_model(input_ids=probe_ids).logits,
            "policy_logits": trainer.model(input_ids=probe_ids).logits,
            "probe_ids": probe_ids,
        }


def _observe_model(workdir: str, stages: list[str], conventions: dict) -> dict:
    seen = {}
    if _wants(stages, "logprobs") or _wants(stages, "masking"):
        trainer = _trainer(workdir)
        batch = _generate(trainer)
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            logps = _logps(
                trainer, trainer.model, input_ids, attention_mask, batch["completion_ids"].size(1)
            )
        seen["batch"] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "completion_ids": batch["completion_ids"],
            "completion_mask": batch["completion_mask"],
            "logps": logps,
            "eos_token_ids": _eos_token_ids(trainer),
        }
        if "logprobs.normalised_entropy" in stages:
            with torch.no_grad():
                _, entropies, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model,
                    input_ids,
                    attention_mask,
                    batch["completion_ids"].size(1),
                    compute_entropy=True,
                )
            seen["batch.entropies"] = entropies
    if "masking.pad_is_eos" in stages:
        seen["batch.pad_is_eos"] = _observe_mask_pad_is_eos(workdir)
    if "reference_model" in stages:
        trainer = _trainer(workdir, beta=0.04)
        seen["reference_model.after_training"] = _reference_after_training(trainer)
    if "reference_model.default_beta" in stages:
        try:  # beta left to the fork's default
            seen["reference_model.default_beta"] = _reference_after_training(_trainer(workdir))
        except Exception as error:
            seen["reference_model.default_beta"] = {"error": f"{type(error).__name__}: {error}"}
    return seen


def _observe_mask_pad_is_eos(workdir: str) -> dict:
    """The completion mask of a batch sampled with a tokenizer whose pad token is its EOS: the
    padding after a finished completion is then EOS tokens too (catalog B55, TRL PR #4848)."""
    trainer = _trainer(workdir, pad_token="<eos>")
    try:
        batch = _generate(trainer)
    except Exception as error:  # B55 empties a completion that stops at once: ids[-1] fails
        return {"error": f"{type(error).__name__}: {error}"[:300]}
    return {
        "completion_ids": batch["completion_ids"],
        "completion_mask": batch["completion_mask"],
        "eos_token_ids": _eos_token_ids(trainer),
        "pad_token_id": trainer.processing_class.pad_token_id,
    }


def _observe_defaults(workdir: str, stages: list[str], conventions: dict) -> dict:
    """GRPOConfig's scalar defaults (what a script that does not set a field gets)."""
    import dataclasses

    if not _wants(stages, "defaults"):
        return {}
    from trl import GRPOConfig

    config = GRPOConfig(output_dir=workdir, use_cpu=True)
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    scalar = (bool, int, float, str, type(None))
    return {"defaults": {k: v for k, v in values.items() if isinstance(v, scalar)}}


def observe(workspace: str, stages: list[str], conventions: dict | None = None) -> dict:
    sys.path.insert(1, str(Path(workspace) / "trl"))  # the workspace's TRL source tree
    import trl

    if not str(Path(trl.__file__).resolve()).startswith(str(Path(workspace).resolve())):
        raise SystemExit(f"import trl resolved to {trl.__file__}, not the workspace's copy")
    seen = {}
    conventions = _conventions(conventions)
    with tempfile.TemporaryDirectory() as workdir:
        for part in (_observe_scoring, _observe_losses, _observe_model, _observe_defaults):
            try:
                seen.update(part(workdir, stages, conventions))
            except Exception as error:  # a crash inside the candidate fails its stages, not the run
                seen[f"error.{part.__name__}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
    return seen


# --- parent side: judge -------------------------------------------------------------------------
def _fail(name: str, seen, expected) -> str:
    return f"{name}: expected {describe(expected)}, got {describe(seen)}"


def _rewards(rpf: torch.Tensor, weights, conventions: dict) -> torch.Tensor:
    """The per-row rewards the release computes: before TRL 1.6.0 a row that every reward
    function left None gets the nansum's 0 and counts in its group (TRL 0.17.0
    `grpo_trainer.py` L1078); from 1.6.0 it stays NaN and drops out."""
    from reference_impl import combine_rewards

    rewards = combine_rewards(rpf, weights)
    if conventions["nan_rewards"] == "zero":
        rewards = torch.nan_to_num(rewards, nan=0.0)
    return rewards


def _judge_advantages(seen: dict, conventions: dict) -> list[str]:
    from reference_impl import compute_advantages

    problems = []
    for scale in conventions["scale_rewards"]:
        name = f"advantages.{scale}"
        rpf, advantages = seen[name]
        expected = compute_advantages(_rewards(rpf, None, conventions), G, scale)
        if not same(advantages, expected, atol=1e-4):
            problems.append(_fail(name, advantages, expected))
    return problems


def _judge_rewards(seen: dict, conventions: dict) -> list[str]:
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.weighted_with_none"]
    expected = compute_advantages(_rewards(rpf, [1.0, 0.5], conventions), G)
    nan_matches = torch.isnan(rpf).sum().item() == sum(v is None for v in AUX[: rpf.size(0)])
    if not nan_matches:
        return ["rewards: a reward function's None did not become NaN in rewards_per_func"]
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.weighted_with_none (advantages)", advantages, expected)]
    return judge_rewards_unscorable(seen, conventions)


def judge_rewards_unscorable(seen: dict, conventions: dict) -> list[str]:
    """Rows that no reward function scored: 0 and counted (before TRL 1.6), or left out of the
    group statistics with advantage 0 (from 1.6, or a fork that intends it)."""
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.unscorable_rows"]
    expected = compute_advantages(_rewards(rpf, [1.0, 0.5], conventions), G)
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.unscorable_rows (advantages)", advantages, expected)]
    return []


def judge_decode_plain(seen: dict, conventions: dict | None = None) -> list[str]:
    """A completion without reasoning tags reaches the reward function unchanged; where the fork
    intends a reasoning-aware decode (conventions "decode" = "reasoning"), closed reasoning is
    stripped to the answer too."""
    got = seen["decode.reward_inputs"]
    bad = [(DECODE_TEXTS[i], got[i]) for i in PLAIN_ROWS if got[i] != DECODE_TEXTS[i]]
    problems = [f"decode: plain answer {text!r} reached the reward as {out!r}" for text, out in bad]
    if _conventions(conventions)["decode"] == "reasoning":
        problems += _judge_reasoning_rows(seen, lambda text: "</think>" in text)
    return problems


def judge_decode_reasoning(seen: dict, conventions: dict | None = None) -> list[str]:
    """Closed reasoning is stripped to the answer; unclosed reasoning becomes ""."""
    return _judge_reasoning_rows(seen, lambda text: True)


def judge_decode_unclosed(seen: dict, conventions: dict | None = None) -> list[str]:
    """A completion whose reasoning never closed has no answer: it reaches the reward as ""."""
    return _judge_reasoning_rows(seen, lambda text: "</think>" not in text)


def _judge_reasoning_rows(seen: dict, selected) -> list[str]:
    from reference_impl import strip_reasoning

    got = seen["decode.reward_inputs"]
    problems = []
    for i, text in enumerate(DECODE_TEXTS):
        if i not in PLAIN_ROWS and selected(text) and got[i] != strip_reasoning(text):
            problems.append(
                f"decode: {text!r} reached the reward as {got[i]!r}, intended {strip_reasoning(text)!r}"
            )
    return problems


def _judge_losses(seen: dict, stage: str, conventions: dict) -> list[str]:
    from reference_impl import compute_loss

    problems = []
    if stage == "ratio":
        problems += _judge_old_logps(seen)
    for name, (case_stage, _, _, _) in LOSS_CASES.items():
        overrides = loss_case(name, conventions)
        if case_stage != stage or overrides is None:
            continue
        case = seen[name]
        logps = case["logps"].clone().requires_grad_(True)
        config = {"use_bias_correction_kl": conventions["use_bias_correction_kl"]} | overrides
        kwargs = dict(
            old_per_token_logps=case["old"],
            ref_per_token_logps=case["ref"],
            loss_type=config.pop("loss_type"),
            max_completion_length=COMPLETION_LENGTH,
            num_items_in_batch=case["num_items_in_batch"],
        )
        if "epsilon_high" in config:
            kwargs["epsilon_high"] = config.pop("epsilon_high")
        kwargs.update(config)
        loss = compute_loss(logps, case["advantages"], case["mask"], **kwargs)
        (grad,) = torch.autograd.grad(loss, logps)
        mask = case["mask"].bool()
        if not same(case["loss"], loss.detach(), atol=1e-5):
            problems.append(_fail(f"{name} loss", case["loss"], loss.detach()))
        elif not same(case["grad"][mask], grad[mask], atol=1e-6):
            problems.append(_fail(f"{name} dL/dlogp", case["grad"][mask], grad[mask]))
    return problems


def _judge_old_logps(seen: dict) -> list[str]:
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    case = seen["ratio.old_logps_kept"]
    if isinstance(case["old"], dict):
        return [f"ratio: with num_iterations=2 {case['old']['error']}"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    mask = case["completion_mask"].bool()
    with torch.no_grad():
        expected = get_per_token_logps(
            model, case["input_ids"], case["attention_mask"], mask.size(1), TEMPERATURE
        )
    if not same(case["old"][mask], expected[mask], atol=1e-4):
        return [
            _fail("ratio: old log-probs with num_iterations=2", case["old"][mask], expected[mask])
        ]
    return []


def _judge_logprobs(seen: dict) -> list[str]:
    from reference_impl import get_per_token_logps
    from reference_impl.tiny import load_tiny

    batch = seen["batch"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    logits_to_keep = batch["completion_ids"].size(1)
    with torch.no_grad():
        expected = get_per_token_logps(
            model, batch["input_ids"], batch["attention_mask"], logits_to_keep, TEMPERATURE
        )
    mask = batch["completion_mask"].bool()
    if not same(batch["logps"][mask], expected[mask], atol=1e-4):
        return [_fail("logprobs: per-token log-probs", batch["logps"][mask], expected[mask])]
    return []


def _judge_masking(seen: dict) -> list[str]:
    from reference_impl import completion_mask

    batch = seen["batch"]
    expected = completion_mask(batch["completion_ids"], batch["eos_token_ids"])
    if not same(batch["completion_mask"], expected):
        return [_fail("masking: completion_mask", batch["completion_mask"], expected)]
    return []


def _judge_reference_model(seen: dict, key: str = "reference_model.after_training") -> list[str]:
    from reference_impl.tiny import load_tiny

    case = seen[key]
    if "error" in case:
        return [f"{key}: the trainer raised {case['error']}"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    with torch.no_grad():
        initial = model(input_ids=case["probe_ids"]).logits
    if same(case["policy_logits"], initial, atol=1e-4):
        return ["reference_model: the policy did not change in training, nothing to compare"]
    if not same(case["ref_logits"], initial, atol=1e-4):
        return [
            _fail("reference_model: reference logits after training", case["ref_logits"], initial)
        ]
    return []


# --- the forks' intended semantics (rules named in task.toml `probes`) ---------------------------
def _fork_loss(
    logps,
    advantages,
    mask,
    old,
    ref,
    num_items_in_batch,
    loss_type: str,
    epsilon_high: float,
    epsilon_low: float = 0.2,
    beta: float = 0.0,
    log_ratio_clamp: float | None = None,
    dual_clip_c: float | None = None,
    kl_max: float | None = None,
) -> torch.Tensor:
    """TRL 1.16's token-level clipped loss (gt:L3083-3183, one process, GA = 1) with a fork's extra
    terms: the log-ratio clamped to +-log_ratio_clamp before exp (verl), dual-clip PPO's cap
    -dual_clip_c * A on negative-advantage tokens (arXiv:1912.09729), the per-token KL capped at
    kl_max before the ratio correction (verl low_var_kl)."""
    old = logps.detach() if old is None else old
    log_ratio = logps - old
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if dual_clip_c is not None:
        per_token = torch.where(adv < 0, torch.min(per_token, -dual_clip_c * adv), per_token)
    if beta:
        kl = torch.exp(ref - logps) - (ref - logps) - 1
        if kl_max is not None:
            kl = kl.clamp(max=kl_max)
        per_token = per_token + beta * kl * ratio  # use_bias_correction_kl (gt:L3104)
    mask = mask.to(per_token.dtype)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dapo":
        return (per_token * mask).sum() / torch.as_tensor(num_items_in_batch).clamp(min=1.0)
    raise ValueError(f"_fork_loss covers grpo and dapo, not {loss_type!r}")


def _judge_fork_loss(seen: dict, name: str) -> list[str]:
    case = seen[name]
    expected_config = FORK_CASES[name][4]
    config = dict(expected_config)
    config.setdefault("epsilon_high", 0.2)
    logps = case["logps"].clone().requires_grad_(True)
    loss = _fork_loss(
        logps,
        case["advantages"],
        case["mask"],
        case["old"],
        case["ref"],
        case["num_items_in_batch"],
        **config,
    )
    (grad,) = torch.autograd.grad(loss, logps)
    mask = case["mask"].bool()
    intended = ", ".join(f"{k}={v}" for k, v in expected_config.items())
    if not same(case["loss"], loss.detach(), atol=1e-5):
        return [_fail(f"{name} loss (intended: {intended})", case["loss"], loss.detach())]
    if not same(case["grad"][mask], grad[mask], atol=1e-6):
        return [_fail(f"{name} dL/dlogp (intended: {intended})", case["grad"][mask], grad[mask])]
    return []


# trl-reward-weights-clipping's fork clips each reward function's output to [-1, 1]
REWARD_CLIP = 1.0


def _judge_rewards_clipped(seen: dict, conventions: dict) -> list[str]:
    """Each function's reward clipped to +-REWARD_CLIP, then weighted and normalised per group
    (the rows no function scored as in the release: the case's rewards are inside the clip)."""
    from reference_impl import compute_advantages

    rpf, advantages = seen["rewards.weighted_with_none"]
    clipped = rpf.clamp(-REWARD_CLIP, REWARD_CLIP)
    expected = compute_advantages(_rewards(clipped, [1.0, 0.5], conventions), G)
    if not same(advantages, expected, atol=1e-4):
        return [_fail("rewards.clipped (advantages)", advantages, expected)]
    return judge_rewards_unscorable(seen, conventions)


def _judge_advantages_default_batch(seen: dict) -> list[str]:
    """trl-skillsbench-trio's fork: scale_rewards defaults to "batch" (arXiv:2508.08221)."""
    from reference_impl import combine_rewards, compute_advantages

    rpf, advantages = seen["advantages.default_scale"]
    expected = compute_advantages(combine_rewards(rpf, None), G, "batch")
    if not same(advantages, expected, atol=1e-4):
        return [_fail("advantages with scale_rewards left at its default", advantages, expected)]
    return []


def _judge_masking_drop_truncated(seen: dict) -> list[str]:
    """trl-never-stops' fork: mask_truncated_completions defaults to True (DAPO overlong
    filtering), so a completion cut at max_completion_length has an all-zero mask."""
    from reference_impl import completion_mask

    batch = seen["batch"]
    expected = completion_mask(batch["completion_ids"], batch["eos_token_ids"], True)
    if not (expected.sum(-1) == 0).any():
        return ["masking: no truncated completion in the probe batch, nothing to compare"]
    if not same(batch["completion_mask"], expected):
        return [
            _fail(
                "masking: completion_mask (truncated rows dropped)",
                batch["completion_mask"],
                expected,
            )
        ]
    return []


def _judge_masking_pad_is_eos(seen: dict) -> list[str]:
    """trl-never-stops' run, whose tokenizer pads with its EOS: each completion's mask still covers
    the tokens up to and including its first EOS (the padding after it is EOS tokens too), and a
    truncated completion is dropped (the fork's mask_truncated_completions=True default)."""
    from reference_impl import completion_mask

    case = seen["batch.pad_is_eos"]
    if "error" in case:
        return [f"masking with pad == EOS: the trainer raised {case['error']}"]
    if case["pad_token_id"] not in case["eos_token_ids"]:
        return ["masking: the probe's pad token is not the EOS, nothing to compare"]
    expected = completion_mask(case["completion_ids"], case["eos_token_ids"], True)
    if not ((expected.sum(-1) == 0).any() and (expected.sum(-1) > 0).any()):
        return ["masking: the probe batch lacks a finished or a truncated completion"]
    if not same(case["completion_mask"], expected):
        return [
            _fail(
                "masking with pad == EOS: completion_mask (truncated rows dropped)",
                case["completion_mask"],
                expected,
            )
        ]
    return []


def _judge_normalised_entropy(seen: dict) -> list[str]:
    """trl-skillsbench-trio's fork: the fused head's entropy is divided by log |V| (in [0, 1])."""
    import math

    from reference_impl.tiny import load_tiny

    batch = seen["batch"]
    model, _ = load_tiny(tiny_spec())
    model.eval()
    length = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, -(length + 1) : -1].float() / TEMPERATURE, dim=-1)
    expected = -(logp.exp() * logp).sum(-1) / math.log(logits.size(-1))
    mask = batch["completion_mask"].bool()
    got = seen["batch.entropies"]
    if not same(got[mask], expected[mask], atol=1e-4):
        return [_fail("logprobs: per-token entropy / log |V|", got[mask], expected[mask])]
    return []


def _parse_default(check: str) -> tuple[str, object]:
    import json

    field, _, text = check.removeprefix("defaults.").partition("=")
    try:
        return field, json.loads(text)
    except ValueError:
        return field, text


def judge_default(seen: dict, check: str) -> list[str]:
    """`defaults.<field>=<value>`: GRPOConfig(...) without `field` gives `value` (JSON, or a bare
    string)."""
    field, expected = _parse_default(check)
    defaults = seen["defaults"]
    if field not in defaults:
        return [f"defaults: GRPOConfig has no field {field!r} (intended default {expected!r})"]
    got = defaults[field]
    if isinstance(expected, float | int) and not isinstance(expected, bool):
        ok = (
            isinstance(got, int | float)
            and not isinstance(got, bool)
            and same(got, float(expected))
        )
    else:
        ok = got == expected
    return [] if ok else [f"defaults: GRPOConfig().{field} is {got!r}, intended {expected!r}"]


JUDGES = {
    "advantages": _judge_advantages,
    "rewards": _judge_rewards,
    "rewards_unscorable": judge_rewards_unscorable,
    "logprobs": lambda seen, conventions: _judge_logprobs(seen),
    "masking": lambda seen, conventions: _judge_masking(seen),
    "reference_model": lambda seen, conventions: _judge_reference_model(seen),
    "ratio": lambda seen, conventions: _judge_losses(seen, "ratio", conventions),
    "clipping": lambda seen, conventions: _judge_losses(seen, "clipping", conventions),
    "kl": lambda seen, conventions: _judge_losses(seen, "kl", conventions),
    "loss_aggregation": lambda seen, conventions: _judge_losses(
        seen, "loss_aggregation", conventions
    ),
    "decode": judge_decode_plain,
    "decode_reasoning": judge_decode_reasoning,
    "decode_unclosed": judge_decode_unclosed,
    # the forks' intended semantics, one rule per customised stage
    "advantages.default_batch": lambda seen, conventions: _judge_advantages_default_batch(seen),
    "rewards.clipped": _judge_rewards_clipped,
    "masking.drop_truncated": lambda seen, conventions: _judge_masking_drop_truncated(seen),
    "masking.pad_is_eos": lambda seen, conventions: _judge_masking_pad_is_eos(seen),
    "logprobs.normalised_entropy": lambda seen, conventions: _judge_normalised_entropy(seen),
    "reference_model.default_beta": lambda seen, conventions: _judge_reference_model(
        seen, "reference_model.default_beta"
    ),
    **{name: (lambda seen, conventions, n=name: _judge_fork_loss(seen, n)) for name in FORK_CASES},
}


def judge(seen: dict, check: str, conventions: dict | None = None) -> list[str]:
    """Problems found by `check` (a stage, or a decoy rule) against the fork's `conventions`
    (TRL 1.16's where absent); empty when it passes."""
    errors = [f"{k}: {v['error']}" for k, v in seen.items() if k.startswith("error.")]
    try:
        if check.startswith("defaults."):
            return judge_default(seen, check)
        return JUDGES[check](seen, _conventions(conventions)) or []
    except KeyError as missing:
        return errors or [f"{check}: no observation {missing} (the trainer crashed before it)"]
    except Exception as error:
        return [f"{check}: could not judge: {type(error).__name__}: {error}"]


def main(job: dict) -> None:
    """The child's side: observe the workspace's TRL and write the observations as JSON."""
    import plain

    torch.set_num_threads(1)
    stages = list(job["stages"]) + [RULE_STAGES.get(rule, rule) for rule in job.get("rules", [])]
    plain.dump(observe(os.getcwd(), stages, job.get("conventions")), job["out"])
