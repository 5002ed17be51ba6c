"""Each `reference_impl` stage function against values worked out by hand, and its bad-input errors.

Expected numbers are derived in the comments from the formulas of the stage protocol and TRL 1.16
(`gt:L` lines cited beside each), never read back from the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from reference_impl import (
    GRPOInputError,
    combine_rewards,
    completion_logps,
    completion_mask,
    compute_advantages,
    compute_loss,
    get_per_token_logps,
    per_token_kl,
    selective_log_softmax,
    strip_reasoning,
)
from reference_impl.tiny import load_tiny
from reference_impl.toy_tasks import TOY_TASKS
from reference_impl.train import TrainConfig, _score

NAN = float("nan")
EPS = 1e-4  # added to the std (gt:L2787)


def _close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert torch.allclose(actual, expected, atol=atol, equal_nan=True), f"{actual} != {expected}"


# --- logprobs --------------------------------------------------------------------------------


def test_selective_log_softmax_by_hand():
    # logits [0, ln 3]: softmax = [1/4, 3/4]
    logits = torch.tensor([[0.0, math.log(3.0)]])
    _close(selective_log_softmax(logits, torch.tensor([1])), [math.log(0.75)])
    _close(selective_log_softmax(logits, torch.tensor([0])), [math.log(0.25)])
    # T = 2: logits / 2 = [0, ln sqrt 3], softmax = [1, sqrt 3] / (1 + sqrt 3)
    root3 = math.sqrt(3.0)
    _close(
        selective_log_softmax(logits, torch.tensor([1]), temperature=2.0),
        [math.log(root3 / (1 + root3))],
    )


def test_completion_logps_uses_the_previous_position_and_zeros_masked():
    # input_ids [1, 1, 0, 1]: the last 2 are the completion. Token at position 2 (id 0) is scored by
    # the logits at position 1, token at position 3 (id 1) by the logits at position 2.
    vocab = 2
    logits = torch.zeros(1, 4, vocab)
    logits[0, 1] = torch.tensor([math.log(3.0), 0.0])  # p(id 0) = 3/4
    logits[0, 2] = torch.tensor([0.0, math.log(4.0)])  # p(id 1) = 4/5
    logits[0, 3] = torch.tensor([100.0, -100.0])  # predicts beyond the sequence: must be unused
    input_ids = torch.tensor([[1, 1, 0, 1]])
    _close(
        completion_logps(logits, input_ids, torch.tensor([[1, 1]])),
        [[math.log(0.75), math.log(0.8)]],
    )
    _close(completion_logps(logits, input_ids, torch.tensor([[1, 0]])), [[math.log(0.75), 0.0]])


def test_get_per_token_logps_matches_a_hand_sliced_forward():
    model, _ = load_tiny()
    model.eval()
    input_ids = torch.tensor([[0, 5, 6, 14, 3, 4, 1], [7, 8, 9, 14, 2, 1, 0]])
    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        ours = get_per_token_logps(model, input_ids, attention_mask, 3, temperature=0.7)
    # completion tokens are columns 4, 5, 6; their predicting logits are columns 3, 4, 5
    log_probs = torch.log_softmax(logits[:, 3:6] / 0.7, dim=-1)
    expected = log_probs.gather(-1, input_ids[:, 4:7, None]).squeeze(-1)
    expected[1, 2] = 0.0  # masked completion position
    _close(ours, expected, atol=1e-6)


# --- masking ---------------------------------------------------------------------------------

EOS, PAD = 1, 0


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([EOS, 5, 6], [1, 0, 0]),  # EOS first: only the EOS token counts
        ([5, 6, EOS], [1, 1, 1]),  # EOS last
        ([5, EOS, PAD], [1, 1, 0]),  # right padding after EOS
        ([5, 6, 7], [1, 1, 1]),  # truncated: no EOS at all
        ([5, EOS, EOS], [1, 1, 0]),  # a second EOS is after the first
    ],
)
def test_completion_mask_rows(ids, expected):
    assert completion_mask(torch.tensor([ids]), [EOS]).tolist() == [expected]


def test_completion_mask_pad_equal_to_eos_is_decided_by_position():
    # pad == EOS (TRL sets pad = eos when a tokenizer has none): the padding is after the first EOS.
    assert completion_mask(torch.tensor([[5, EOS, EOS, EOS]]), [EOS]).tolist() == [[1, 1, 0, 0]]


def test_completion_mask_several_eos_ids_first_of_any():
    ids = torch.tensor([[5, 9, 1, 6], [9, 5, 5, 5], [5, 5, 5, 5]])
    assert completion_mask(ids, [1, 9]).tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_completion_mask_truncated_rows_are_zeroed_on_request():
    ids = torch.tensor([[5, EOS, PAD], [5, 6, 7]])
    assert completion_mask(ids, [EOS], mask_truncated_completions=True).tolist() == [
        [1, 1, 0],
        [0, 0, 0],
    ]


# --- decode ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>so 2 + 2</think> 4 ", "4"),  # both tags: the stripped answer after the close tag
        ("so 2 + 2</think>4", "4"),  # open tag in the prompt: only the close tag is generated
        ("<think>a</think>4</think>5", "4</think>5"),  # split at the first close tag only
        ("<think>still thinking", ""),  # cut off before the close tag: no answer
        (" 4 ", " 4 "),  # no tags: unchanged, not even stripped
        ("", ""),
    ],
)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


def test_strip_reasoning_custom_tags():
    assert strip_reasoning("[r]x[/r] y", open_tag="[r]", close_tag="[/r]") == "y"


# --- rewards ---------------------------------------------------------------------------------


def test_combine_rewards_nan_adds_nothing_and_all_nan_stays_nan():
    rewards = torch.tensor([[1.0, NAN], [NAN, NAN], [2.0, 3.0], [NAN, 4.0]])
    # weights [1, 0.5]: 1*1; NaN row; 1*2 + 0.5*3 = 3.5; 0.5*4 = 2
    _close(combine_rewards(rewards, [1.0, 0.5]), [1.0, NAN, 3.5, 2.0])
    _close(combine_rewards(rewards, None), [1.0, NAN, 5.0, 4.0])


# --- advantages ------------------------------------------------------------------------------


def test_advantages_bessel_std_for_two():
    # mean 0.5, Bessel std sqrt(0.5) = 0.70711 (the biased std would be 0.5 and give +-1)
    a = 0.5 / (math.sqrt(0.5) + EPS)  # 0.70701
    _close(compute_advantages(torch.tensor([0.0, 1.0]), 2), [-a, a])


def test_advantages_constant_group_is_zero_and_groups_are_independent():
    rewards = torch.tensor([0.5, 0.5, 0.5, 0.0, 3.0, 0.0])
    # group 2: mean 1, std sqrt((1 + 4 + 1) / 2) = sqrt 3
    s = math.sqrt(3.0) + EPS
    _close(compute_advantages(rewards, 3), [0, 0, 0, -1 / s, 2 / s, -1 / s])


def test_advantages_batch_and_none_scaling():
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0])
    # group means 0.5 and 2.5; batch std of 0..3 = sqrt(5/3)
    batch = 0.5 / (math.sqrt(5.0 / 3.0) + EPS)
    _close(compute_advantages(rewards, 2, "batch"), [-batch, batch, -batch, batch])
    _close(compute_advantages(rewards, 2, "none"), [-0.5, 0.5, -0.5, 0.5])


def test_advantages_nan_rewards():
    rewards = torch.tensor([NAN, 0.0, 1.0, NAN, NAN, 2.0])
    # group 1: NaN row excluded -> mean 0.5, std sqrt(0.5); the NaN row gets 0
    # group 2: one valid reward -> std NaN -> every advantage 0
    a = 0.5 / (math.sqrt(0.5) + EPS)
    _close(compute_advantages(rewards, 3), [0, -a, a, 0, 0, 0])


# --- kl --------------------------------------------------------------------------------------


def test_per_token_kl_by_hand():
    # d = ref - logp: d = ln 2 -> 2 - ln 2 - 1; d = -ln 2 -> 1/2 + ln 2 - 1; d = 0 -> 0
    logp = torch.tensor([[0.0, 0.0, -1.0]])
    ref = torch.tensor([[math.log(2.0), -math.log(2.0), -1.0]])
    ln2 = math.log(2.0)
    _close(per_token_kl(logp, ref), [[1 - ln2, ln2 - 0.5, 0.0]])


# --- loss: aggregation -------------------------------------------------------

# On policy the ratio is 1, so the clipped per-token loss is -A: A = [-1, -2] gives per-token loss
# rows 1 and 2; masked: L = [[1, 1, 0], [2, 0, 0]].
T16_MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])
T16_ADVANTAGES = torch.tensor([-1.0, -2.0])
T16_LOGPS = torch.tensor([[-1.0, -2.0, -5.0], [-3.0, -4.0, -6.0]])


def _t16_loss(**kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    logps = T16_LOGPS.clone().requires_grad_(True)
    loss = compute_loss(logps, T16_ADVANTAGES, T16_MASK, **kwargs)
    loss.backward()
    return loss.detach(), logps.grad


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        ("bnpo", 4 / 3),  # token mean: (1 + 1 + 2) / 3
        ("dapo", 4 / 3),  # token mean with num_items_in_batch = mask sum = 3
        ("grpo", 1.5),  # sequence mean of token means: (2/2 + 2/1) / 2
        ("dr_grpo", 4 / 6),  # sum / (B * T) with T = 3
    ],
)
def test_t16_aggregation(loss_type, expected):
    loss, _ = _t16_loss(loss_type=loss_type)
    _close(loss, expected)


def test_t16_dr_grpo_and_dapo_normalisers():
    _close(_t16_loss(loss_type="dr_grpo", max_completion_length=4)[0], 4 / 8)  # 4 / (2 * 4)
    _close(_t16_loss(loss_type="dapo", num_items_in_batch=8)[0], 4 / 8)


def test_t16_gradients():
    # grpo: dL/dlogp_t = -A_i / |o_i| / B on mask, 0 off it
    _, grad = _t16_loss(loss_type="grpo")
    _close(grad, [[0.25, 0.25, 0.0], [1.0, 0.0, 0.0]])
    # bnpo / dapo: -A_i / (tokens in batch)
    _, grad = _t16_loss(loss_type="dapo")
    _close(grad, [[1 / 3, 1 / 3, 0.0], [2 / 3, 0.0, 0.0]])


def test_t16_sapo():
    # on policy sigmoid(0) = 1/2, so per-token loss = -2 A / tau with tau_neg = 1.05 for A < 0:
    # rows 2/1.05 and 4/1.05; sequence mean of token means = 3 / 1.05
    _close(_t16_loss(loss_type="sapo")[0], 3 / 1.05)


def test_t16_cispo():
    # per-token loss = -min(r, eps_high) A logp with r = 1 and eps_high = eps_low = 0.2 (the default):
    # row 1: -0.2 * -1 * (-1, -2) = (-0.2, -0.4); row 2: -0.2 * -2 * -3 = -1.2; token mean -1.8 / 3
    _close(_t16_loss(loss_type="cispo")[0], -0.6)
    # eps_high = 5 leaves the weight at r = 1: -(1 + 2 + 6) / 3
    loss, grad = _t16_loss(loss_type="cispo", epsilon_high=5.0)
    _close(loss, -3.0)
    # the weight is detached, so dL/dlogp = -w A / 3 with w = 1
    _close(grad, [[1 / 3, 1 / 3, 0.0], [2 / 3, 0.0, 0.0]])


# --- loss: ratio, clipping, delta, KL ----------------------------------------------------------


def _one_token_loss(logp: float, old: float, advantage: float, **kwargs) -> tuple[float, float]:
    logps = torch.tensor([[logp]], requires_grad=True)
    loss = compute_loss(
        logps,
        torch.tensor([advantage]),
        torch.ones(1, 1, dtype=torch.int),
        old_per_token_logps=torch.tensor([[old]]),
        loss_type="bnpo",
        **kwargs,
    )
    loss.backward()
    return loss.item(), logps.grad.item()


def test_clipping_by_hand():
    ln15 = math.log(1.5)  # ratio 1.5, clip range [0.8, 1.2]
    # A = +1: -min(1.5, 1.2) = -1.2, clipped so no gradient
    assert _one_token_loss(ln15, 0.0, 1.0) == pytest.approx((-1.2, 0.0))
    # A = -1: -min(-1.5, -1.2) = 1.5, unclipped: d/dlogp of -r A = r = 1.5
    assert _one_token_loss(ln15, 0.0, -1.0) == pytest.approx((1.5, 1.5))
    # clip-higher eps_high = 0.6: 1.5 is inside [0.8, 1.6], so -1.5 with gradient -1.5
    assert _one_token_loss(ln15, 0.0, 1.0, epsilon_high=0.6) == pytest.approx((-1.5, -1.5))
    # delta = 1.3 caps the unclipped ratio: A = -1 gives -min(-1.3, -1.2) = 1.3, no gradient
    assert _one_token_loss(ln15, 0.0, -1.0, delta=1.3) == pytest.approx((1.3, 0.0))
    # ratio 0.5 with A = -1: -min(-0.5, -0.8) = 0.8, clipped below
    assert _one_token_loss(math.log(0.5), 0.0, -1.0) == pytest.approx((0.8, 0.0))


def test_sequence_level_ratio_is_the_geometric_mean():
    # log ratios [ln 2, 0, (masked) ln 8]: masked mean ln 2 / 2, ratio sqrt 2 for both tokens.
    logps = torch.tensor([[math.log(2.0), 0.0, math.log(8.0)]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    loss = compute_loss(
        logps,
        torch.tensor([1.0]),
        mask,
        old_per_token_logps=torch.zeros(1, 3),
        importance_sampling_level="sequence",
        epsilon_high=1.0,  # sqrt 2 is inside [0.8, 2.0]: unclipped
        loss_type="bnpo",
    )
    _close(loss.detach(), -math.sqrt(2.0))
    loss.backward()
    # d/dlogp_t of -sqrt2 with log r = (l_1 + l_2) / 2: -sqrt2 / 2 on each unmasked token
    _close(logps.grad, [[-math.sqrt(2.0) / 2, -math.sqrt(2.0) / 2, 0.0]])


@pytest.mark.parametrize("bias_correction", [True, False])
def test_kl_term_by_hand(bias_correction):
    # A = 0 leaves only beta * kl. logp = 0, ref = ln 2: kl = 1 - ln 2, d kl / d logp = 1 - 2 = -1.
    # With bias correction the loss is beta * kl * r and r = exp(logp - sg(logp)) adds beta * kl to the
    # gradient: beta (-1 + 1 - ln 2) = -beta ln 2.
    beta, ln2 = 0.1, math.log(2.0)
    logps = torch.zeros(1, 1, requires_grad=True)
    loss = compute_loss(
        logps,
        torch.zeros(1),
        torch.ones(1, 1, dtype=torch.int),
        ref_per_token_logps=torch.tensor([[ln2]]),
        beta=beta,
        use_bias_correction_kl=bias_correction,
        loss_type="bnpo",
    )
    loss.backward()
    _close(loss.detach(), beta * (1 - ln2))
    _close(logps.grad, [[-beta * ln2 if bias_correction else -beta]])


# --- bad input -------------------------------------------------------------------------------


def _raises_one_line(call, *names: str) -> None:
    with pytest.raises(GRPOInputError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"


LOGPS = torch.zeros(4, 3)
MASK = torch.ones(4, 3, dtype=torch.int)


def test_bad_loss_type():
    _raises_one_line(lambda: compute_loss(LOGPS, torch.zeros(4), MASK, loss_type="ppo"), "'ppo'")


def test_bad_importance_sampling_level():
    _raises_one_line(
        lambda: compute_loss(LOGPS, torch.zeros(4), MASK, importance_sampling_level="seq"), "'seq'"
    )


def test_bad_scale_rewards():
    _raises_one_line(lambda: compute_advantages(torch.zeros(4), 2, "std"), "'std'")


def test_num_generations_below_two():
    _raises_one_line(lambda: compute_advantages(torch.zeros(4), 1), "num_generations", "1")


def test_batch_not_divisible_by_num_generations():
    _raises_one_line(lambda: compute_advantages(torch.zeros(5), 2), "5", "num_generations=2")


@pytest.mark.parametrize("temperature", [-0.7, 0.0])
def test_bad_temperature(temperature):
    logits = torch.zeros(1, 3, 4)
    _raises_one_line(
        lambda: selective_log_softmax(logits[0], torch.tensor([0, 1, 2]), temperature),
        str(temperature),
    )
    _raises_one_line(
        lambda: completion_logps(
            logits, torch.zeros(1, 3, dtype=torch.long), MASK[:1, :2], temperature
        ),
        str(temperature),
    )


def test_wrong_length_rewards_and_advantages():
    _raises_one_line(lambda: combine_rewards(torch.zeros(4, 2), [1.0, 1.0, 1.0]), "3", "2")
    _raises_one_line(lambda: compute_loss(LOGPS, torch.zeros(3), MASK), "(3,)")
    _raises_one_line(lambda: compute_advantages(torch.zeros(4, 1), 2), "(4, 1)")


def test_reward_function_returning_the_wrong_number_of_rewards():
    toy = TOY_TASKS["format"]

    def short_reward(prompts, completions, completion_ids, **_):
        return [1.0] * (len(prompts) - 1)

    broken = type(toy)(**{**toy.__dict__, "reward_funcs": (short_reward,)})
    _raises_one_line(
        lambda: _score(broken, ["A ="] * 2, ["7", "7"], [[1], [1]], {"answer": ["7"] * 2}, None),
        "short_reward",
        "1 rewards for 2",
    )


def test_beta_without_reference_logps():
    _raises_one_line(lambda: compute_loss(LOGPS, torch.zeros(4), MASK, beta=0.1), "beta")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("loss_type", "ppo", "'ppo'"),
        ("scale_rewards", "std", "'std'"),
        ("importance_sampling_level", "seq", "'seq'"),
        ("num_generations", 1, "1"),
        ("temperature", -0.7, "-0.7"),
        ("num_iterations", 0, "0"),
        ("learning_rate", -1e-3, "-0.001"),
        ("task", "chess", "'chess'"),
    ],
)
def test_train_config_rejects(field, value, named):
    _raises_one_line(lambda: TrainConfig(**{field: value}).resolved(), named)


def test_the_first_load_leaves_the_callers_random_state(tmp_path, monkeypatch):
    """A training script seeds, then loads the tiny model. The first load builds and caches it,
    later ones read the cache: both leave the random stream where the seed put it, so the first
    run of a fresh workspace logs what every later one does."""
    monkeypatch.setenv("GRPO_SKILL_CACHE", str(tmp_path))
    draws = []
    for _ in range(2):  # builds, then loads from the cache
        torch.manual_seed(123)
        load_tiny()
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1])
