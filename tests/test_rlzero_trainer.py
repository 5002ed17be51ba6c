"""rlzero's own features, each against its rule computed here another way: the loss types and the
advantage and KL estimators against their papers' formulas, gradient accumulation against the
step taken whole, a resumed run against the uninterrupted one, the overlong shaping against
DAPO's eq. 13, the command line against RunConfig."""

from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch

from task_harness.build import _independent_trainer


@pytest.fixture(scope="module")
def rz(tmp_path_factory):
    """rlzero's modules as `rz("objective")`, imported from a fresh copy of the pristine trainer."""
    root = tmp_path_factory.mktemp("rlzero") / "tree"
    _independent_trainer("rlzero", root)
    sys.path.insert(0, str(root))
    yield lambda name: importlib.import_module(f"rlzero.{name}")
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m == "rlzero" or m.startswith("rlzero.")]:
        del sys.modules[name]


def _case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    per_token = torch.randn(4, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    return per_token, mask.float()


def test_each_loss_type_aggregates_as_its_paper_states(rz):
    per_token, mask = _case()
    rows = [
        [v for v, m in zip(r, k, strict=True) if m]
        for r, k in zip(per_token.tolist(), mask.tolist(), strict=True)
    ]
    tokens = sum(len(r) for r in rows)
    expected = {
        "grpo": sum(sum(r) / len(r) for r in rows) / len(rows),
        "bnpo": sum(sum(r) for r in rows) / tokens,
        "dapo": sum(sum(r) for r in rows) / tokens,
        "dr_grpo": sum(sum(r) for r in rows) / (len(rows) * 8),
    }
    for loss_type, value in expected.items():
        got = rz("objective").aggregate(per_token, mask, loss_type, 8)
        assert math.isclose(float(got), value, rel_tol=1e-6), loss_type


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batch_shares_add_up_to_the_step_taken_whole(rz, loss_type):
    per_token, mask = _case(1)
    objective = rz("objective")
    whole = objective.aggregate(per_token, mask, loss_type, 5)
    tokens = float(mask.sum())
    halves = sum(
        objective.aggregate(per_token[rows], mask[rows], loss_type, 5, rows=4, tokens=tokens)
        for rows in (slice(0, 2), slice(2, 4))
    )
    assert math.isclose(float(halves), float(whole), rel_tol=1e-6)


def test_kl_estimators_follow_schulman(rz):
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    log_ratio = logp - ref
    objective = rz("objective")
    assert torch.allclose(objective.kl_estimate(logp, ref, "k1"), log_ratio)
    assert torch.allclose(objective.kl_estimate(logp, ref, "k2"), log_ratio**2 / 2)
    k3 = objective.kl_estimate(logp, ref, "k3")
    assert torch.allclose(k3, torch.exp(-log_ratio) + log_ratio - 1)
    assert (k3 >= 0).all() and k3[2] == 0


def test_leave_one_out_and_batch_scaled_advantages(rz):
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 5.0])
    advantages = rz("advantages")
    rloo = advantages.leave_one_out_advantages(rewards, 4)
    for i in range(8):
        group = rewards[(i // 4) * 4 : (i // 4) * 4 + 4].tolist()
        others = group[: i % 4] + group[i % 4 + 1 :]
        assert math.isclose(float(rloo[i]), group[i % 4] - sum(others) / 3, abs_tol=1e-6)
    batch = advantages.batch_scaled_advantages(rewards, 4, 0.0)
    means = rewards.view(2, 4).mean(1).repeat_interleave(4)
    assert torch.allclose(batch, (rewards - means) / rewards.std(unbiased=False))
    assert advantages.uniform_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2).tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_the_overlong_penalty_is_dapos_eq_13(rz):
    lengths = torch.tensor([2, 6, 7, 8, 9])
    penalty = rz("shaping").overlong_penalty(lengths, max_new_tokens=8, buffer=4)
    assert penalty.tolist() == [0.0, -0.5, -0.75, -1.0, -1.0]


def _learner(rz, **config):
    model, tokenizer = rz("tiny").load_tiny()
    tokenizer.pad_token = tokenizer.eos_token
    toy = rz("toy_tasks").TOY_TASKS["succ"]
    base = {"prompts_per_step": 2, "group_size": 4, "steps": 4, "target": 2.0, "lr": 1e-2}
    cfg = rz("config").RunConfig(**(base | config))
    return rz("learner").Learner(cfg, model, tokenizer, list(toy.reward_funcs)), toy


def _grads(learner, batch) -> torch.Tensor:
    learner.optimizer_step(batch)
    return torch.cat([p.grad.flatten() for p in learner.policy.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_gradient_accumulation_gives_the_gradient_of_the_whole_step(rz, loss_type):
    torch.manual_seed(0)
    one, toy = _learner(rz, lr=0.0, loss_type=loss_type, kl_coef=0.05)
    batch = one.rollout(toy.dataset().to_list()[:2])
    batch.old_logp = batch.old_logp + 0.1 * torch.randn_like(batch.old_logp) * batch.completion_mask
    torch.manual_seed(0)
    two, _ = _learner(rz, lr=0.0, loss_type=loss_type, kl_coef=0.05, grad_accum_steps=2)
    assert torch.allclose(_grads(one, batch), _grads(two, batch), atol=1e-6)


def test_a_resumed_run_continues_as_the_uninterrupted_one(rz, tmp_path):
    torch.manual_seed(0)
    whole, toy = _learner(rz, kl_coef=0.04)
    expected = whole.train(toy.dataset().to_list())
    torch.manual_seed(0)
    first, _ = _learner(rz, kl_coef=0.04, steps=2, output_dir=str(tmp_path))
    first.train(toy.dataset().to_list())
    resumed, _ = _learner(rz, kl_coef=0.04, resume_from=str(tmp_path))
    logs = resumed.train(toy.dataset().to_list())
    assert [(e.step, e.reward, e.loss) for e in logs] == [
        (e.step, e.reward, e.loss) for e in expected
    ]
    with pytest.raises(ValueError, match="group_size"):
        _learner(rz, group_size=2, resume_from=str(tmp_path))[0].train(toy.dataset().to_list())


def test_evaluation_draws_no_random_numbers(rz):
    learner, toy = _learner(rz)
    state = torch.get_rng_state()
    scores = learner.evaluate(toy.dataset().to_list()[:5])
    assert torch.equal(state, torch.get_rng_state())
    assert 0.0 <= scores["eval_reward"] <= 1.0


def test_truncated_rows_and_uniform_groups_leave_the_loss(rz):
    learner, toy = _learner(rz, mask_truncated=True, skip_zero_std_groups=True)
    torch.manual_seed(3)
    batch = learner.rollout(toy.dataset().to_list()[:2])
    completions = batch.input_ids[:, -batch.completion_mask.size(1) :]
    never_stopped = ~(completions == learner.tokenizer.eos_token_id).any(1)
    uniform = rz("advantages").uniform_groups(batch.rewards, 4)
    kept = batch.loss_mask().sum(1) > 0
    assert kept.tolist() == (~(never_stopped | uniform)).tolist()


def test_the_command_line_sets_every_kind_of_option(rz):
    cli = rz("cli")
    cfg, files = cli.parse_config(
        ["--kl-coef", "0.04", "--reward-weights", "1,0.5", "--mask-truncated", "true"]
        + ["--dual-clip", "3", "--loss-type", "grpo", "--dataset", "d.jsonl"]
    )
    assert (cfg.kl_coef, cfg.reward_weights, cfg.mask_truncated) == (0.04, (1.0, 0.5), True)
    assert (cfg.dual_clip, cfg.loss_type, files["dataset"]) == (3.0, "grpo", "d.jsonl")
    with pytest.raises(SystemExit):
        cli.parse_config(["--loss-type", "ppo"])
    with pytest.raises(SystemExit):
        cli.parse_config(["--mask-truncated", "maybe"])


def test_a_config_that_cannot_run_is_refused_with_its_reason(rz):
    config = rz("config")
    with pytest.raises(ValueError, match="loss_type must be one of"):
        config.RunConfig(loss_type="ppo")
    with pytest.raises(ValueError, match="do not split"):
        config.RunConfig(prompts_per_step=3, group_size=3, grad_accum_steps=2)


def test_sync_pulls_the_reference_towards_the_policy(rz):
    policy = torch.nn.Linear(2, 2)
    reference = rz("reference").frozen_copy(policy)
    before = reference.weight.clone()
    with torch.no_grad():
        policy.weight.add_(1.0)
    rz("reference").sync_reference(reference, policy, 0.25)
    assert torch.allclose(reference.weight, 0.25 * policy.weight + 0.75 * before)
    assert reference.weight.data_ptr() != policy.weight.data_ptr()


def test_sync_leaves_a_reference_equal_to_the_policy_exactly(rz):
    """A policy that has not moved from its reference leaves it bit for bit (a lerp, not
    `mul_(1 - alpha).add_(policy, alpha)`, which rounds): a run whose policy never moves keeps a
    KL of exactly 0 across syncs."""
    policy = torch.nn.Linear(64, 64)
    reference = rz("reference").frozen_copy(policy)
    for alpha in (0.6, 0.3, 0.77):
        rz("reference").sync_reference(reference, policy, alpha)
    assert torch.equal(reference.weight, policy.weight)


def test_sequence_level_ratio_is_the_mean_log_ratio_of_each_completion(rz):
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    old = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -0.5, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    got = rz("objective").importance_log_ratio(logp, old, mask, "sequence")
    assert torch.allclose(got, torch.tensor([[(0.5 - 1.0 + 0.0) / 3], [(0.5 + 0.0) / 2]]))


def test_a_prompt_template_reaches_the_model_and_not_the_rewards(rz):
    rows = [{"prompt": "3 =", "answer": "4"}]
    rendered = rz("data").render_prompts(rows, "Q: {prompt}")
    assert rendered[0]["prompt"] == "Q: 3 =" and rows[0]["prompt"] == "3 ="
    with pytest.raises(ValueError, match="no {prompt}"):
        rz("data").render_prompts(rows, "Q:")


def test_a_nan_ratio_is_logged_as_nan_not_dropped(rz):
    """rz-succ-temperature's instruction says the first line prints `loss +nan` and the run dies
    at the next rollout's sampling; a pass whose ratio turned NaN once ended with KeyError
    'ratio_max' instead (max() keeps its first argument against a NaN)."""
    stats = rz("metrics").PassStats()
    stats.add({"ratio_max": 1.5, "loss": 0.1}, tokens=4)
    stats.add({"ratio_max": math.nan, "loss": math.nan}, tokens=4)
    stats.add({"ratio_max": 2.0, "loss": 0.1}, tokens=4)
    means = stats.means()
    assert math.isnan(means["ratio_max"]) and math.isnan(means["loss"])
    finite = rz("metrics").PassStats()
    finite.add({"ratio_max": 1.5}, tokens=1)
    finite.add({"ratio_max": 1.25}, tokens=1)
    assert finite.means()["ratio_max"] == 1.5
