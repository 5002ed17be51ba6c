"""The README's reference-implementation example runs and prints what the README says it prints,
and the number of checks it states is the registry's."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_block_with(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(block for block in blocks if marker in block)


def test_reference_example_runs_and_its_advantages_comment_is_true():
    block = _python_block_with("compute_advantages(rewards, num_generations=4)")
    namespace: dict = {}
    exec(block, namespace)
    claimed = re.search(r"# tensor\(\[(.*?)\]\)", block).group(1)
    expected = torch.tensor([float(x) for x in claimed.split(",")])
    torch.testing.assert_close(namespace["advantages"], expected, atol=1e-4, rtol=0)
    # and the gradient claim: dL/dlogp = -A / (number of unmasked tokens) on policy, for dapo
    logps, advantages, mask = namespace["logps"], namespace["advantages"], namespace["mask"]
    expected_grad = -advantages.unsqueeze(1).expand_as(logps) / mask.sum()
    torch.testing.assert_close(logps.grad, expected_grad)


def test_the_check_count_the_readme_states_is_the_registry_s():
    from checker.checks import all_checks

    text = README.read_text()
    stated = re.search(r"runs a GRPO trainer through (\d+) small checks", text)
    assert stated, "the README no longer states the number of checks"
    assert int(stated[1]) == len(all_checks(()))


def test_every_declarable_convention_is_in_the_readme_table():
    """Every `config:` key that is not a GRPOConfig keyword of the loss is listed in the
    README's table of conventions, so a user can find the key their trainer needs."""
    from reference_impl.protocol import DEFAULTS

    text = README.read_text()
    table = text[text.index("| key | TRL 1.16 | other values") :].split("\n\n", 1)[0]
    first = list(DEFAULTS).index("advantage_epsilon")  # the conventions follow GRPOConfig's keys
    missing = [key for key in list(DEFAULTS)[first:] if f"`{key}`" not in table]
    assert not missing, missing
