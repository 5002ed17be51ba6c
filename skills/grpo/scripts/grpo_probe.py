#!/usr/bin/env python
"""Probe three GRPO stages of a trainer with nothing but Python and torch.

Usage:
    python grpo_probe.py --trl [PATH]        TRL's GRPOTrainer (0.14 on); PATH is a TRL checkout
                                             or vendored fork (the folder holding trl/trainer/);
                                             without PATH, the TRL that `import trl` finds
    python grpo_probe.py --module FILE.py    a from-scratch trainer with the protocol functions
                                             selective_log_softmax(logits, index),
                                             compute_advantages(rewards, num_generations),
                                             strip_reasoning(text)
    --name STAGE=ATTR                        use another function for a stage (logprobs,
                                             advantages, decode); ATTR may be module:attr

Checks, one output line each (PASS, FAIL or SKIP, with expected and seen values):
- logprobs: every value <= 0 and equal to log_softmax(logits / T) at the index, T = 0.7, for
  fp32 logits (tolerance 1e-5) and bf16 logits (tolerance 0.05, bf16's rounding). On TRL up to
  1.14 the helper is trl.trainer.utils.selective_log_softmax (given logits already divided by
  T); on 1.15 and later, whose GRPOTrainer no longer calls it, it is the fused head's kernel
  trl.kernels.chunked_logprob.ChunkedLogProbFunction (given raw logits as hidden states, an
  identity LM head of vocabulary tiles of 4, and T itself);
- advantages: rewards [0, 1] in a group of 2 give -0.7071 and +0.7071 (Bessel std, + 1e-4);
  a constant group [0.5, 0.5] gives 0;
- decode: plain text comes back unchanged; "<think>a</think>b" gives "b"; an unclosed
  "<think>a" gives "".
Exit status: 0 if nothing failed, 1 if a check failed, 2 if the target could not be loaded.

For TRL the advantage arithmetic is inline in a trainer method, not a function. The probe reads
that method's source, takes the statements from the combination of the rewards to the last
assignment of `advantages` before the per-process slice (or the loss), and runs exactly those
lines on the test rewards, with the trainer's default settings. The lines it ran are printed, so
a failure points at the code. The decode helper is looked up by name: `strip_reasoning` or
`decode_and_strip_padding` (the name a reasoning-aware fork of TRL's helper keeps) in
`trl.trainer.utils` or `trl.trainer.grpo_trainer`. A helper whose source never mentions a
reasoning tag is checked on plain text only; the two reasoning cases are then SKIP.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path

import torch

TEMPERATURE = 0.7
OPEN_TAG, CLOSE_TAG = "<think>", "</think>"
DECODE_CASES = (  # (name, text, expected, needs reasoning support)
    ("plain text unchanged", "The answer is 42.", "The answer is 42.", False),
    ("closed block gives the answer", f"{OPEN_TAG}a{CLOSE_TAG}b", "b", True),
    ("unclosed block gives empty", f"{OPEN_TAG}a", "", True),
)
DECODE_NAMES = ("strip_reasoning", "decode_and_strip_padding")
failures = 0


def report(status: str, probe: str, expected: object = "", seen: object = "") -> None:
    """Print one result line; FAIL (and ERROR) lines make the exit status 1."""
    global failures
    if status in ("FAIL", "ERROR"):
        failures += 1
    line = f"{status:5} {probe}"
    if status != "PASS" or expected != "":
        line += f"  expected: {expected}  seen: {seen}"
    print(line, flush=True)


# --------------------------------------------------------------------------- loading the target


def load_file(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def resolve(spec: str, default_module: types.ModuleType | None) -> Callable:
    """`module:attr`, `file.py:attr` or a bare `attr` of the default module."""
    if ":" in spec:
        module_name, attr = spec.rsplit(":", 1)
        module = (
            load_file(Path(module_name))
            if module_name.endswith(".py")
            else importlib.import_module(module_name)
        )
        return getattr(module, attr)
    return getattr(default_module, spec)


def import_trl(path: str | None) -> types.ModuleType:
    """Import TRL, from `path` first when given (a checkout root or the `trl` package folder)."""
    if path:
        root = Path(path).resolve()
        if (root / "trainer" / "grpo_trainer.py").is_file():  # the package folder itself
            root = root.parent
        if not (root / "trl" / "trainer" / "grpo_trainer.py").is_file():
            raise FileNotFoundError(f"no trl/trainer/grpo_trainer.py under {root}")
        sys.path.insert(0, str(root))
    trl = importlib.import_module("trl")
    importlib.import_module("trl.trainer.grpo_trainer")
    return trl


# --------------------------------------------------------------------------- log-probs


def probe_logprobs(name: str, function: Callable, takes_temperature: bool = False) -> None:
    """`function(logits / T, index)`, or `function(logits, index, T)` when it applies T itself."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=generator) * 3
    index = torch.randint(0, 11, (3, 5), generator=generator)
    # fp32: 1e-5 absolute. bf16 keeps 8 significant bits, so a correct bf16 result may be off by
    # about one unit in the last place of its magnitude: allow two (|x| / 64) plus 2^-8.
    for dtype, relative, absolute in ((torch.float32, 0.0, 1e-5), (torch.bfloat16, 2**-6, 2**-8)):
        given = logits.to(dtype) if takes_temperature else (logits / TEMPERATURE).to(dtype)
        scaled = given.double() / TEMPERATURE if takes_temperature else given.double()
        expected = torch.log_softmax(scaled, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
        tolerance = relative * expected.abs() + absolute
        label = f"logprobs {name} {str(dtype).removeprefix('torch.')}"
        try:
            if takes_temperature:
                seen = function(given, index, TEMPERATURE).double()
            else:
                seen = function(given, index).double()
        except Exception as error:  # the probe reports, it does not crash
            report("ERROR", label, "a tensor", f"{type(error).__name__}: {error}")
            continue
        top = f"max {seen.max().item():.4f}"
        report("PASS" if seen.max() <= 0 else "FAIL", f"{label}: every value <= 0", "max <= 0", top)
        gaps = (seen - expected).abs()
        worst = int((gaps - tolerance).flatten().argmax())
        ok = bool((gaps <= tolerance).all())
        expected_text = f"{[round(x, 4) for x in expected[0, :3].tolist()]}, ..."
        seen_text = f"{[round(x, 4) for x in seen[0, :3].tolist()]}, ... (largest gap {gaps.max().item():.3g})"
        if not ok:
            expected_text += f" at {worst}: {expected.flatten()[worst].item():.4f} ± {tolerance.flatten()[worst].item():.2g}"
            seen_text += f" at {worst}: {seen.flatten()[worst].item():.4f}"
        report(
            "PASS" if ok else "FAIL",
            f"{label}: equals log_softmax(logits / T) at the index",
            expected_text,
            seen_text,
        )


def fused_head_logprobs(kernel: type) -> Callable:
    """TRL 1.15+'s chunked log-prob kernel as f(logits, index, T): the logits are the hidden
    states and the LM head is the identity, split into vocabulary tiles of 4 (so the online
    logsumexp spans several tiles)."""

    def call(logits: torch.Tensor, index: torch.Tensor, temperature: float) -> torch.Tensor:
        vocab = logits.size(-1)
        hidden = logits.reshape(-1, vocab)
        head = torch.eye(vocab, dtype=logits.dtype)
        outputs = kernel.apply(hidden, head, None, index.reshape(-1), temperature, 4)
        return outputs[0].view(index.shape)

    return call


# --------------------------------------------------------------------------- advantages

ADVANTAGE_CASES = (  # (name, rewards, group size, expected)
    ("rewards [0, 1], G = 2", [0.0, 1.0], 2, [-0.7071, 0.7071]),
    ("constant group [0.5, 0.5]", [0.5, 0.5], 2, [0.0, 0.0]),
)


def check_advantages(name: str, compute: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    for case, rewards, group, expected in ADVANTAGE_CASES:
        label = f"advantages {name}: {case}"
        try:
            seen = compute(torch.tensor(rewards), group).flatten().tolist()
        except Exception as error:
            report("ERROR", label, expected, f"{type(error).__name__}: {error}")
            continue
        ok = len(seen) == len(expected) and all(
            abs(s - e) <= 1e-3 for s, e in zip(seen, expected, strict=True)
        )
        report("PASS" if ok else "FAIL", label, expected, [round(s, 4) for s in seen])


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def stores(node: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        for n in ast.walk(node)
    )


# Names that mark the statement calling the reward functions themselves.
REWARD_CALLS = {"reward_funcs", "reward_processing_classes"}


def trl_advantage_code(trainer_class: type) -> tuple[str, str, Callable]:
    """Source block of the trainer method that turns rewards into advantages, made runnable.

    Rule: in the first method (in source order) that assigns `advantages` from `rewards`, take
    the top-level statements after the last assignment of `rewards_per_func`, less the loop
    that calls the reward functions (TRL 0.14 to 0.18 call them inline, after creating
    `rewards_per_func`), up to the last one assigning `advantages` before a statement that uses
    `process_slice` or `per_token_loss`.
    Returns (method name, "file:Lfirst-Llast", function(rewards, G) -> advantages).
    """
    for method_name in ("_generate_and_score_completions", "_prepare_inputs", "compute_loss"):
        method = getattr(trainer_class, method_name, None)
        if method is None:
            continue
        lines, first_line = inspect.getsourcelines(method)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        body = tree.body[0].body
        if not any(stores(stmt, "advantages") and "rewards" in names_in(stmt) for stmt in body):
            continue
        start = max(
            (i + 1 for i, stmt in enumerate(body) if stores(stmt, "rewards_per_func")), default=0
        )
        end = None
        for i in range(start, len(body)):
            if {"process_slice", "per_token_loss"} & names_in(body[i]):
                break
            if stores(body[i], "advantages"):
                end = i
        if end is None:
            continue
        while start < end and REWARD_CALLS & names_in(body[start]):
            start += 1
        block = ast.Module(body=body[start : end + 1], type_ignores=[])
        code = compile(block, inspect.getsourcefile(method), "exec")
        span = f"{Path(inspect.getsourcefile(method)).name}:L{first_line + body[start].lineno - 1}-L{first_line + body[end].end_lineno - 1}"
        module_globals = sys.modules[trainer_class.__module__].__dict__

        def run(
            rewards: torch.Tensor, group: int, code=code, module_globals=module_globals
        ) -> torch.Tensor:
            namespace = dict(module_globals)
            namespace.update(trl_locals(trainer_class, rewards, group))
            exec(code, namespace)
            return namespace["advantages"]

        return method_name, span, run
    raise LookupError("no trainer method assigns `advantages` from `rewards`")


def trl_locals(trainer_class: type, rewards: torch.Tensor, group: int) -> dict[str, object]:
    """The local names the advantage block reads, as a default-configured trainer would have them."""
    config_module = sys.modules[trainer_class.__module__.replace("grpo_trainer", "grpo_config")]
    defaults = {}
    for field in dataclasses.fields(config_module.GRPOConfig):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
    defaults.update(num_generations=group, steps_per_generation=1, gradient_accumulation_steps=1)
    args = types.SimpleNamespace(**defaults)
    scale = defaults.get("scale_rewards", True)
    accelerator = types.SimpleNamespace(
        device=torch.device("cpu"), process_index=0, num_processes=1, is_main_process=True
    )
    trainer = types.SimpleNamespace(
        args=args,
        num_generations=group,
        num_generations_eval=group,
        scale_rewards={True: "group", False: "none"}.get(scale, scale),
        multi_objective_aggregation=defaults.get(
            "multi_objective_aggregation", "sum_then_normalize"
        ),
        reward_weights=torch.ones(1),
        reward_funcs=[None],
        accelerator=accelerator,
        model=types.SimpleNamespace(training=True),
        _metrics={"train": {}, "eval": {}},
    )
    rewards_per_func = rewards.float().unsqueeze(1)
    return {
        "self": trainer,
        "rewards_per_func": rewards_per_func,
        "rewards": rewards.float(),
        "device": torch.device("cpu"),
        "mode": "train",
        "num_generations": group,
        "gather": lambda x: x,
        "prompts": [""] * len(rewards),
    }


# --------------------------------------------------------------------------- decode


class CharTokenizer:
    """Each character is a token id; id 0 is the pad token, appended as right padding."""

    pad_token, pad_token_id, eos_token, eos_token_id = "<pad>", 0, "<eos>", 1
    all_special_tokens = ["<pad>", "<eos>"]

    def encode(self, text: str) -> list[int]:
        return [ord(c) + 2 for c in text]

    def decode(self, ids, skip_special_tokens: bool = False, **_) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        special = {0: self.pad_token, 1: self.eos_token}
        pieces = [special[i] if i in special else chr(i - 2) for i in ids]
        return "".join(
            p
            for i, p in zip(ids, pieces, strict=True)
            if not (skip_special_tokens and i in special)
        )

    def batch_decode(self, rows, skip_special_tokens: bool = False, **kwargs) -> list[str]:
        return [self.decode(row, skip_special_tokens=skip_special_tokens, **kwargs) for row in rows]


def decode_caller(function: Callable) -> Callable[[str], str]:
    """Wrap a text-level helper f(text) or an id-level one f(ids, tokenizer) as text -> text."""
    parameters = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(parameters) >= 2:
        tokenizer = CharTokenizer()

        def call(text: str) -> str:
            ids = torch.tensor([tokenizer.encode(text) + [0, 0]])  # with right padding
            result = function(ids, tokenizer)
            return result[0] if isinstance(result, list | tuple) else result

        return call
    return lambda text: function(text)


def probe_decode(name: str, function: Callable) -> None:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        source = OPEN_TAG
    handles_reasoning = "think" in source.lower()
    call = decode_caller(function)
    for case, text, expected, needs_reasoning in DECODE_CASES:
        label = f"decode {name}: {case}"
        if needs_reasoning and not handles_reasoning:
            report("SKIP", label, repr(expected), "helper has no reasoning-tag handling")
            continue
        try:
            seen = call(text)
        except Exception as error:
            report("ERROR", label, repr(expected), f"{type(error).__name__}: {error}")
            continue
        report("PASS" if seen == expected else "FAIL", label, repr(expected), repr(seen))


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--trl", nargs="?", const="", metavar="PATH", help="TRL checkout or fork")
    target.add_argument("--module", metavar="FILE.py", help="from-scratch trainer file")
    parser.add_argument("--name", action="append", default=[], metavar="STAGE=ATTR")
    args = parser.parse_args(argv)
    renames = dict(item.split("=", 1) for item in args.name)

    try:
        if args.module is not None:
            module = load_file(Path(args.module))
            stages = {
                "logprobs": "selective_log_softmax",
                "advantages": "compute_advantages",
                "decode": "strip_reasoning",
            }
            stages.update(renames)
            for stage, spec in stages.items():
                try:
                    function = resolve(spec, module)
                except (AttributeError, ImportError) as error:
                    report(
                        "SKIP",
                        f"{stage}: no function {spec}",
                        "",
                        f"{type(error).__name__}: {error}",
                    )
                    continue
                {
                    "logprobs": probe_logprobs,
                    "advantages": check_advantages,
                    "decode": probe_decode,
                }[stage](spec, function)
            return 1 if failures else 0
        trl = import_trl(args.trl or None)
    except Exception as error:
        print(f"ERROR cannot load the target: {type(error).__name__}: {error}")
        return 2

    print(f"TRL {trl.__version__} from {Path(trl.__file__).parent}")
    utils = importlib.import_module("trl.trainer.utils")
    trainer_module = importlib.import_module("trl.trainer.grpo_trainer")

    calls_helper = "selective_log_softmax(" in inspect.getsource(trainer_module)
    if "logprobs" in renames:
        probe_logprobs(renames["logprobs"], resolve(renames["logprobs"], utils))
    elif not calls_helper and importlib.util.find_spec("trl.kernels") is not None:  # 1.15 on
        try:
            kernel = importlib.import_module("trl.kernels").ChunkedLogProbFunction
        except Exception as error:  # TRL 1.15's kernel module imports triton unconditionally
            report(
                "SKIP",
                "logprobs: cannot import the fused head's kernel trl.kernels.ChunkedLogProbFunction",
                "",
                f"{type(error).__name__}: {error}",
            )
        else:
            probe_logprobs(
                "trl.kernels.chunked_logprob.ChunkedLogProbFunction (the fused head)",
                fused_head_logprobs(kernel),
                takes_temperature=True,
            )
    elif hasattr(utils, "selective_log_softmax"):
        probe_logprobs("trl.trainer.utils.selective_log_softmax", utils.selective_log_softmax)
    else:
        report(
            "SKIP",
            "logprobs: no trl.trainer.utils.selective_log_softmax (TRL 0.14 computes it inline)",
        )

    if "advantages" in renames:
        check_advantages(renames["advantages"], resolve(renames["advantages"], trainer_module))
    else:
        try:
            method, span, run = trl_advantage_code(trainer_module.GRPOTrainer)
            check_advantages(f"GRPOTrainer.{method} ({span})", run)
        except Exception as error:
            report(
                "ERROR",
                "advantages: cannot run the trainer's advantage lines",
                "",
                f"{type(error).__name__}: {error}",
            )

    if "decode" in renames:
        probe_decode(renames["decode"], resolve(renames["decode"], utils))
    else:
        found = [(m, n) for n in DECODE_NAMES for m in (utils, trainer_module) if hasattr(m, n)]
        if found:
            module, name = found[0]
            probe_decode(f"{module.__name__}.{name}", getattr(module, name))
        else:
            report(
                "SKIP", f"decode: no helper named {' or '.join(DECODE_NAMES)} (stock TRL has none)"
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
