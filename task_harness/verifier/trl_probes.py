"""What a patched TRL `GRPOTrainer` computes: the `trl` family's child side.

The verifier runs this file in a child process (as `session.py`, called by the job's script;
`Children.observe` in `verify.py`). It imports the workspace's TRL, builds small GRPOTrainers on
the tiny local model and records what they compute (advantages, completion masks, log-probs,
losses with their gradients, what the reward functions were given, the reference model after
training), together with the inputs each computation was given. It holds no rule and no expected value: the job, made
in the verifier's own process by `trl_judge.py`, names what to observe and carries every input a
judgement depends on (the reward functions' values, the texts to decode, the loss cases'
settings, advantages, masks and log-prob offsets, the reference model's probe ids), and the
verifier checks that the inputs reported are its own before it judges anything.

A fork of an older release (TRL 0.17 to 1.14) is driven by what its trainer has (the scoring
method's name and return, `_calculate_rewards` or not, one EOS id or a list) through
`reference_impl/trl_driver.py`, the module grpo-check's `trl` kind drives GRPOTrainer with; the
verifier ships it beside this file.
"""

from __future__ import annotations

import os
import tempfile

for _name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ[_name] = "1"

import plain  # noqa: E402
import torch  # noqa: E402

from reference_impl import trl_driver  # noqa: E402


class Job:
    """The verifier's job, with its tensors rebuilt."""

    def __init__(self, raw: dict):
        self.stages: list[str] = raw["stages"]
        self.setup: dict = raw["setup"]
        self.rewards: dict[str, list] = raw["rewards"]
        self.decode_texts: list[str] = raw["decode_texts"]
        self.scales: list[str] = raw["scales"]
        self.loss_runs: dict[str, dict] = raw["loss_runs"]
        self.loss_inputs = {k: plain.decode(v) for k, v in raw["loss_inputs"].items()}
        self.probe_ids = torch.tensor(raw["probe_ids"])

    def wants(self, name: str) -> bool:
        """Whether the job asks for `name` or a rule under it (`name.x`, `name_x`)."""
        return any(s == name or s.startswith((f"{name}.", f"{name}_")) for s in self.stages)


def tiny_spec(job: Job):
    from reference_impl.tiny import TinySpec

    return TinySpec(eos_bias=job.setup["eos_bias"])


def _table_reward(job: Job, table: str):
    """A reward function that returns the verifier's column `table`, row by row."""

    def reward(prompts, completions, **_):
        return job.rewards[table][: len(completions)]

    reward.__name__ = f"reward_{table}"
    return reward


def _config_value(name: str, value):
    """`value` as the imported release's GRPOConfig takes it (a bool `scale_rewards` up to 0.21)."""
    from trl import GRPOConfig

    if name == "scale_rewards":
        return trl_driver.scale_rewards_setting(value, trl_driver.bool_scale_rewards(GRPOConfig))
    return value


def _trainer(job: Job, workdir: str, reward_funcs=None, pad_token: str | None = None, **overrides):
    """A GRPOTrainer of the workspace's TRL on the tiny model; `pad_token`: the tokenizer's pad
    token in place of its own (`"<eos>"`: pad == EOS, as many chat models ship)."""
    from trl import GRPOConfig, GRPOTrainer

    from reference_impl.tiny import tiny_model_path

    path = tiny_model_path(tiny_spec(job))
    setup = job.setup
    config = dict(
        output_dir=workdir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=len(setup["prompts"]) * setup["group"],
        num_generations=setup["group"],
        max_completion_length=setup["completion_length"],
        temperature=setup["temperature"],
        max_steps=2,
        learning_rate=5e-2,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    config.update({name: _config_value(name, value) for name, value in overrides.items()})
    return trl_driver.build(
        GRPOTrainer,
        path,
        GRPOConfig(**config),
        reward_funcs or [_table_reward(job, "spread")],
        setup["prompts"] * 4,
        trl_driver.offline_tokenizer(path, pad_token),
    )


def _capture_rewards(trainer) -> dict:
    """Wrap the trainer's reward computation to keep what the reward functions received and returned."""
    seen = {}
    if not trl_driver.computes_rewards_in_method(trainer):
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


def _generate(job: Job, trainer) -> dict:
    setup = job.setup
    inputs = [{"prompt": p} for p in setup["prompts"] for _ in range(setup["group"])]
    torch.manual_seed(setup["seed"])
    return trainer._generate_and_score_completions(inputs)


def _observe_scoring(workdir: str, job: Job) -> dict:
    """Each case: (the rewards the trainer's functions returned, the advantages it computed)."""
    seen = {}
    spread, aux, aux2 = (_table_reward(job, t) for t in ("spread", "aux", "aux2"))
    runs = {}
    if "advantages.default_batch" in job.stages:
        runs["advantages.default_scale"] = (
            [spread],
            {},
        )  # scale_rewards left to the fork's default
    if "advantages" in job.stages:
        for scale in job.scales:
            runs[f"advantages.{scale}"] = ([spread], {"scale_rewards": scale})
    if job.wants("rewards"):
        runs["rewards.weighted_with_none"] = ([spread, aux], {"reward_weights": [1.0, 0.5]})
        runs["rewards.unscorable_rows"] = ([aux, aux2], {"reward_weights": [1.0, 0.5]})
    for name, (functions, overrides) in runs.items():
        trainer = _trainer(job, workdir, functions, **overrides)
        captured = _capture_rewards(trainer)
        batch = _generate(job, trainer)
        seen[name] = (captured["rewards_per_func"], batch["advantages"])
    if job.wants("decode"):
        trainer = _trainer(job, workdir)
        captured = _capture_rewards(trainer)
        texts = job.decode_texts
        rows = len(job.setup["prompts"]) * job.setup["group"]
        texts = texts * (rows // len(texts))
        trainer.processing_class.batch_decode = lambda ids, **_: texts[: len(ids)]
        _generate(job, trainer)
        seen["decode.reward_inputs"] = captured["completions"][: len(job.decode_texts)]
    return seen


def _keep_logps(trainer) -> dict:
    """Keep the policy log-probs `_compute_loss` computes, with their graph, to take dL/dlogp."""
    kept = {}
    name = trl_driver.scoring_method(type(trainer))
    original = getattr(trainer, name)

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        kept["logps"] = trl_driver.logps_of(out)
        return out

    setattr(trainer, name, wrapped)
    return kept


def _observe_losses(workdir: str, job: Job) -> dict:
    """Each loss case of the job on one sampled batch whose completion mask, advantages and old
    and reference log-probs (the policy's, offset as the case says) are the verifier's."""
    seen = {}
    if "ratio" in job.stages:
        seen.update(_observe_old_logps(workdir, job))
    if not job.loss_runs:
        return seen
    batch = _generate(job, _trainer(job, workdir))
    given = job.loss_inputs
    length = batch["completion_ids"].size(1)
    mask = given["mask"][:, :length].to(batch["completion_mask"].dtype)
    for name, run in job.loss_runs.items():
        deltas = given[run["deltas"]][:, :length]
        trainer = _trainer(job, workdir, **run["overrides"], **run["extra"])
        trainer.model.train()
        kept = _keep_logps(trainer)
        with torch.no_grad():
            logps = trl_driver.logps_of(
                trl_driver.score(
                    trainer,
                    trainer.model,
                    torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
                    torch.cat([batch["prompt_mask"], mask], dim=1),
                    length,
                )
            )
        inputs = dict(batch, completion_mask=mask, advantages=given["advantages"].clone())
        if "num_items_in_batch" in batch:
            inputs["num_items_in_batch"] = mask.sum()
        inputs.pop("old_per_token_logps", None)
        inputs.pop("ref_per_token_logps", None)
        if run["old"] is not None:
            inputs["old_per_token_logps"] = logps - deltas * run["old"]
        if run["ref"] is not None:
            inputs["ref_per_token_logps"] = logps + deltas.flip(0) * run["ref"]
        loss = trainer._compute_loss(trainer.model, inputs)
        (grad,) = torch.autograd.grad(loss, kept["logps"])
        seen[name] = {
            "loss": loss.detach(),
            "grad": grad,
            "logps": kept["logps"].detach(),
            "mask": inputs["completion_mask"],
            "advantages": inputs["advantages"],
            "old": inputs.get("old_per_token_logps"),
            "ref": inputs.get("ref_per_token_logps"),
            "num_items_in_batch": inputs.get("num_items_in_batch"),
        }
    return seen


def _observe_old_logps(workdir: str, job: Job) -> dict:
    """With num_iterations = 2 the batch must carry the log-probs of the policy that sampled it,
    frozen for the second pass (catalog B36/B37)."""
    trainer = _trainer(job, workdir, num_iterations=2)
    batch = _generate(job, trainer)
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


def _reference_after_training(job: Job, trainer) -> dict:
    trainer.train()
    with torch.no_grad():
        return {
            "ref_logits": trainer.ref_model(input_ids=job.probe_ids).logits,
            "policy_logits": trainer.model(input_ids=job.probe_ids).logits,
            "probe_ids": job.probe_ids,
        }


def _observe_model(workdir: str, job: Job) -> dict:
    seen = {}
    if job.wants("logprobs") or job.wants("masking"):
        trainer = _trainer(job, workdir)
        batch = _generate(job, trainer)
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            scored = trl_driver.score(
                trainer, trainer.model, input_ids, attention_mask, batch["completion_ids"].size(1)
            )
        logps = trl_driver.logps_of(scored)
        seen["batch"] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "prompt_length": batch["prompt_ids"].size(1),
            "completion_ids": batch["completion_ids"],
            "completion_mask": batch["completion_mask"],
            "logps": logps,
            "eos_token_ids": trl_driver.eos_token_ids(trainer),
        }
        if "logprobs.normalised_entropy" in job.stages:
            with torch.no_grad():
                _, entropies, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model,
                    input_ids,
                    attention_mask,
                    batch["completion_ids"].size(1),
                    compute_entropy=True,
                )
            seen["batch.entropies"] = entropies
    if "masking.pad_is_eos" in job.stages:
        seen["batch.pad_is_eos"] = _observe_mask_pad_is_eos(workdir, job)
    if "reference_model" in job.stages:
        trainer = _trainer(job, workdir, beta=0.04)
        seen["reference_model.after_training"] = _reference_after_training(job, trainer)
    if "reference_model.default_beta" in job.stages:
        try:  # beta left to the fork's default
            seen["reference_model.default_beta"] = _reference_after_training(
                job, _trainer(job, workdir)
            )
        except Exception as error:
            seen["reference_model.default_beta"] = {"error": f"{type(error).__name__}: {error}"}
    return seen


def _observe_mask_pad_is_eos(workdir: str, job: Job) -> dict:
    """The completion mask of a batch sampled with a tokenizer whose pad token is its EOS: the
    padding after a finished completion is then EOS tokens too (catalog B55, TRL PR #4848)."""
    trainer = _trainer(job, workdir, pad_token="<eos>")
    try:
        batch = _generate(job, trainer)
    except Exception as error:  # B55 empties a completion that stops at once: ids[-1] fails
        return {"error": f"{type(error).__name__}: {error}"[:300]}
    return {
        "completion_ids": batch["completion_ids"],
        "completion_mask": batch["completion_mask"],
        "eos_token_ids": trl_driver.eos_token_ids(trainer),
        "pad_token_id": trainer.processing_class.pad_token_id,
    }


def _observe_defaults(workdir: str, job: Job) -> dict:
    """GRPOConfig's scalar defaults (what a script that does not set a field gets)."""
    import dataclasses

    if not job.wants("defaults"):
        return {}
    from trl import GRPOConfig

    config = GRPOConfig(output_dir=workdir, use_cpu=True)
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    scalar = (bool, int, float, str, type(None))
    return {"defaults": {k: v for k, v in values.items() if isinstance(v, scalar)}}


def observe(workspace: str, job: Job) -> dict:
    """Every observation the job asks for, made on the TRL that `import trl` gives (which must be
    the workspace's); a crash inside the trainer becomes an {"error": ...} observation."""
    import trl

    if not os.path.realpath(trl.__file__).startswith(os.path.realpath(workspace) + os.sep):
        raise SystemExit(f"import trl resolved to {trl.__file__}, not the workspace's copy")
    seen = {}
    with tempfile.TemporaryDirectory() as workdir:
        for part in (_observe_scoring, _observe_losses, _observe_model, _observe_defaults):
            try:
                seen.update(part(workdir, job))
            except Exception as error:  # a crash inside the candidate fails its stages, not the run
                seen[f"error.{part.__name__}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
    return seen


def main(job: dict) -> None:
    """Observe the workspace's TRL and write the observations as JSON to job["out"]."""
    torch.set_num_threads(1)
    plain.dump(observe(os.getcwd(), Job(job)), job["out"])
