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
    --std unbiased|population                the advantage std the trainer intends (default
                                             unbiased, TRL's; population is a legitimate choice)

Checks, one output line each (PASS, FAIL or SKIP, with expected and seen values), at T = 0.7:
- logprobs, TRL 0.15 to 1.14: the trainer's own scoring method, run on a stub model whose logits
  are known, must equal log_softmax(logits / T) at each completion token, with the gradient of
  that expression; it divides by T itself, so a trainer that stops dividing fails (0.15 scores at
  T = 1 as released, and is held to that). The log-softmax helpers it calls are then checked
  alone in fp32 and bf16 (their CPU branches: CUDA-only kernels cannot run here).
- logprobs, TRL 1.15 on: the fused head's kernel `ChunkedLogProbFunction` (CPU tile path),
  given raw logits as hidden states, an identity LM head in vocabulary tiles of 4 and T, forward
  in fp32 and bf16 and backward in fp32; and the trainer must patch its models with its own
  temperature (`add_fused_lm_head(..., temperature=self.temperature)`).
- advantages: rewards [0, 1] in a group of 2 and a constant group [0.5, 0.5], expected
  (r - mean) / (std + 1e-4) with the declared std;
- decode: plain text comes back unchanged; "<think>a</think>b" gives "b"; an unclosed
  "<think>a" gives "".
Exit status: 0 if every check that ran passed, 1 if a check failed or raised, 2 if the target
could not be loaded or no check could run.

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
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path

import torch

TEMPERATURE = 0.7
ADVANTAGE_EPSILON = 1e-4  # TRL: advantages / (std + 1e-4), in every release
OPEN_TAG, CLOSE_TAG = "<think>", "</think>"
DECODE_CASES = (  # (name, text, expected, needs reasoning support)
    ("plain text unchanged", "The answer is 42.", "The answer is 42.", False),
    ("closed block gives the answer", f"{OPEN_TAG}a{CLOSE_TAG}b", "b", True),
    ("unclosed block gives empty", f"{OPEN_TAG}a", "", True),
)
DECODE_NAMES = ("strip_reasoning", "decode_and_strip_padding")
counts = {"PASS": 0, "FAIL": 0, "ERROR": 0, "SKIP": 0}


def report(status: str, probe: str, expected: object = "", seen: object = "") -> None:
    """Print one result line; FAIL and ERROR lines make the exit status 1."""
    counts[status] += 1
    line = f"{status:5} {probe}"
    if status != "PASS" or expected != "":
        line += f"  expected: {expected}  seen: {seen}"
    print(line, flush=True)


def exit_status() -> int:
    """1 on any failure; 2 when every check was skipped (nothing was checked); else 0."""
    if counts["FAIL"] or counts["ERROR"]:
        return 1
    if not counts["PASS"]:
        print("nothing was checked: every check above was skipped", flush=True)
        return 2
    return 0


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


def import_trl(path: str | None) -> tuple[types.ModuleType, Path | None]:
    """Import TRL, from `path` first when given (a checkout root or the `trl` package folder).
    Returns the module and the root folder of the tree that was asked for (None: the installed one)."""
    root = None
    if path:
        root = Path(path).resolve()
        if (root / "trainer" / "grpo_trainer.py").is_file():  # the package folder itself
            root = root.parent
        if not (root / "trl" / "trainer" / "grpo_trainer.py").is_file():
            raise FileNotFoundError(f"no trl/trainer/grpo_trainer.py under {root}")
        sys.path.insert(0, str(root))
    trl = importlib.import_module("trl")
    importlib.import_module("trl.trainer.grpo_trainer")
    return trl, root


VERSION_LITERAL = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
PROJECT_VERSION = re.compile(r"""^version\s*=\s*["']?([0-9][^"'\s]*)""", re.MULTILINE)


def tree_version(trl: types.ModuleType, root: Path | None) -> str:
    """The version of the TRL tree being checked, read from the tree itself.

    TRL 1.x sets `__version__` from the installed distribution's metadata, so for a source tree
    `trl.__version__` may name another TRL; the tree's own record wins: a literal `__version__`
    in its `__init__.py`, a `trl-X.dist-info` folder beside it (pip --target), or the `version`
    of its pyproject.toml, setup.cfg or VERSION file (a git checkout).
    """
    if root is None:
        return str(trl.__version__)
    init = (root / "trl" / "__init__.py").read_text(encoding="utf-8", errors="replace")
    found = VERSION_LITERAL.search(init)
    if found:
        return found.group(1)
    for info in sorted(root.glob("trl-*.dist-info")) + sorted(root.glob("trl-*.egg-info")):
        return info.name.split("-")[1].removesuffix(".dist").removesuffix(".egg")
    for name in ("pyproject.toml", "setup.cfg", "VERSION"):
        if (root / name).is_file():
            text = (root / name).read_text(encoding="utf-8", errors="replace")
            found = PROJECT_VERSION.search(text) or re.match(r"\s*([0-9][^\s]*)", text)
            if found:
                return found.group(1)
    return f"unknown (the tree records no version; the installed metadata says {trl.__version__})"


def parsed_version(version: str) -> tuple[int, ...] | None:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


# --------------------------------------------------------------------------- log-probs


def expected_logprobs(
    logits: torch.Tensor, index: torch.Tensor, temperature: float
) -> torch.Tensor:
    """log_softmax(logits / T) at `index`, in float64."""
    scaled = logits.double() / temperature
    return torch.log_softmax(scaled, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def compare(
    label: str, expected: torch.Tensor, seen: torch.Tensor, tolerance: torch.Tensor
) -> None:
    """One PASS/FAIL line: `seen` within `tolerance` of `expected` everywhere."""
    seen, expected = seen.double(), expected.double()
    gaps = (seen - expected).abs()
    worst = int((gaps - tolerance).flatten().argmax())
    ok = seen.shape == expected.shape and bool((gaps <= tolerance).all())
    expected_text = f"{[round(x, 4) for x in expected.flatten()[:3].tolist()]}, ..."
    seen_text = f"{[round(x, 4) for x in seen.flatten()[:3].tolist()]}, ... (largest gap {gaps.max().item():.3g})"
    if not ok:
        expected_text += f" at {worst}: {expected.flatten()[worst].item():.4f} ± {tolerance.flatten()[worst].item():.2g}"
        seen_text += f" at {worst}: {seen.flatten()[worst].item():.4f}"
    report("PASS" if ok else "FAIL", label, expected_text, seen_text)


def probe_logprobs(name: str, function: Callable, takes_temperature: bool = False) -> None:
    """`function(logits / T, index)`, or `function(logits, index, T)` when it applies T itself."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=generator) * 3
    index = torch.randint(0, 11, (3, 5), generator=generator)
    # fp32: 1e-5 absolute. bf16 keeps 8 significant bits, so a correct bf16 result may be off by
    # about one unit in the last place of its magnitude: allow two (|x| / 64) plus 2^-8.
    for dtype, relative, absolute in ((torch.float32, 0.0, 1e-5), (torch.bfloat16, 2**-6, 2**-8)):
        given = logits.to(dtype) if takes_temperature else (logits / TEMPERATURE).to(dtype)
        expected = expected_logprobs(given, index, TEMPERATURE if takes_temperature else 1.0)
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
        tolerance = relative * expected.abs() + absolute
        compare(f"{label}: equals log_softmax(logits / T) at the index", expected, seen, tolerance)


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


def probe_fused_head_backward(kernel: type) -> None:
    """The kernel's hand-written backward: d(sum_t w_t logp_t) with respect to the hidden states and
    the LM head equals autograd's through log_softmax(hidden @ head.T / T), in fp32."""
    generator = torch.Generator().manual_seed(1)
    hidden = (torch.randn(6, 5, generator=generator) * 2).requires_grad_()
    head = torch.randn(11, 5, generator=generator).requires_grad_()
    targets = torch.randint(0, 11, (6,), generator=generator)
    weights = torch.randn(6, generator=generator)
    label = "logprobs ChunkedLogProbFunction backward float32: gradient of log_softmax(logits / T)"
    try:
        seen = kernel.apply(hidden, head, None, targets, TEMPERATURE, 4)[0]
        seen_grads = torch.autograd.grad((seen * weights).sum(), (hidden, head))
    except Exception as error:
        report("ERROR", label, "gradients", f"{type(error).__name__}: {error}")
        return
    hidden64, head64 = (
        hidden.double().detach().requires_grad_(),
        head.double().detach().requires_grad_(),
    )
    expected = expected_logprobs(hidden64 @ head64.t(), targets, TEMPERATURE)
    expected_grads = torch.autograd.grad((expected * weights.double()).sum(), (hidden64, head64))
    seen_flat = torch.cat([g.flatten() for g in seen_grads])
    expected_flat = torch.cat([g.flatten() for g in expected_grads])
    compare(label, expected_flat, seen_flat, 1e-4 * expected_flat.abs() + 1e-4)


def probe_fused_head_temperature(trainer_module: types.ModuleType) -> None:
    """TRL 1.15+ scales by T inside the fused head, with the temperature it was patched with: every
    `add_fused_lm_head(...)` of the trainer must pass the trainer's own temperature."""
    source = inspect.getsource(trainer_module)
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "add_fused_lm_head"
    ]
    if not calls:
        report("SKIP", "logprobs: the trainer never calls add_fused_lm_head")
        return
    for call in calls:
        given = {k.arg: ast.unparse(k.value) for k in call.keywords}.get(
            "temperature", "(none: 1.0)"
        )
        ok = given in ("self.temperature", "args.temperature", "self.args.temperature")
        report(
            "PASS" if ok else "FAIL",
            f"logprobs GRPOTrainer patches its model with its temperature (grpo_trainer.py:L{call.lineno})",
            "temperature=self.temperature",
            f"temperature={given}",
        )


class TokenTableModel(torch.nn.Module):
    """A causal LM whose logits at a position are a learnable row picked by the token there, so
    the expected log-probs are known exactly; accepts and ignores the keywords TRL passes."""

    def __init__(self, vocab: int, generator: torch.Generator) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=generator) * 3)

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0, **_):
        logits = self.table[input_ids]
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return types.SimpleNamespace(logits=logits, aux_loss=None)


SCORING_METHODS = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")


def probe_trainer_scoring(trainer_class: type, version: str) -> None:
    """TRL 0.15 to 1.14: the trainer's own scoring method, on a stub trainer at T = 0.7 and a model
    whose logits are known. 0.16 on divide the logits by T in that method (or pass T to 1.14's
    helpers); 0.15 scores at T = 1 as released, so that is what it is held to."""
    name = next((n for n in SCORING_METHODS if hasattr(trainer_class, n)), None)
    if name is None:
        report(
            "SKIP",
            "logprobs: no scoring method (TRL 0.14 computes log-probs inline in compute_loss)",
        )
        return
    release = parsed_version(version)
    temperature = 1.0 if release is not None and release < (0, 16) else TEMPERATURE
    note = " (as released, TRL 0.15 scores at T = 1)" if temperature == 1.0 else ""
    stub = object.__new__(trainer_class)  # methods only: no __init__, no model, no accelerator
    stub.__dict__.update(
        temperature=TEMPERATURE,
        model_kwarg_keys={"input_ids", "attention_mask", "logits_to_keep"},
        use_liger_kernel=False,
        _entropy_bonus_enabled=False,
        accelerator=types.SimpleNamespace(
            autocast=contextlib.nullcontext, unwrap_model=lambda m: m
        ),
    )
    generator = torch.Generator().manual_seed(2)
    model = TokenTableModel(13, generator)
    prompt, completion = 3, 4
    input_ids = torch.randint(0, 13, (2, prompt + completion), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    targets = input_ids[:, prompt:]
    predicting = input_ids[:, prompt - 1 : -1]  # position p's logits score token p + 1
    weights = torch.randn(2, completion, generator=generator)
    passes = [("", {})]
    if "compute_entropy=" in inspect.getsource(sys.modules[trainer_class.__module__]):
        # 0.20 on: the policy pass asks for entropies too, which 1.14 routes to another helper
        passes = [
            (" policy pass (with entropies)", {"compute_entropy": True}),
            (" old/reference pass", {}),
        ]
    for suffix, kwargs in passes:
        label = f"logprobs GRPOTrainer.{name}{suffix} at T = {TEMPERATURE}"
        model.zero_grad()
        try:
            # unwrapped: TRL's profiling decorator needs a trainer's state, the method does not
            method = inspect.unwrap(getattr(trainer_class, name))
            output = method(stub, model, input_ids, attention_mask, completion, **kwargs)
            seen = output[0] if isinstance(output, tuple | list) else output
            (seen * weights).sum().backward()
        except Exception as error:
            report("ERROR", label, "log-probs", f"{type(error).__name__}: {error}")
            continue
        table = model.table.detach().double().requires_grad_()
        expected = expected_logprobs(table[predicting], targets, temperature)
        compare(
            f"{label}: equals log_softmax(logits / {temperature:g}){note}",
            expected,
            seen,
            torch.full_like(expected, 1e-5),
        )
        (expected_grad,) = torch.autograd.grad((expected * weights.double()).sum(), table)
        seen_grad = (
            model.table.grad if model.table.grad is not None else torch.zeros_like(model.table)
        )
        used = predicting.unique()  # the table rows the completion's logits came from
        expected_grad, seen_grad = expected_grad[used], seen_grad[used]
        compare(
            f"{label}: its gradient", expected_grad, seen_grad, 1e-4 * expected_grad.abs() + 1e-5
        )


# --------------------------------------------------------------------------- advantages

ADVANTAGE_CASES = (  # (name, rewards, group size)
    ("rewards [0, 1], G = 2", [0.0, 1.0], 2),
    ("constant group [0.5, 0.5]", [0.5, 0.5], 2),
)


def expected_advantages(rewards: list[float], group: int, population: bool) -> list[float]:
    """(r - group mean) / (group std + 1e-4), std with Bessel's correction unless `population`."""
    grouped = torch.tensor(rewards, dtype=torch.float64).view(-1, group)
    std = grouped.std(dim=1, keepdim=True, correction=0 if population else 1)
    return (
        ((grouped - grouped.mean(dim=1, keepdim=True)) / (std + ADVANTAGE_EPSILON))
        .flatten()
        .tolist()
    )


def check_advantages(
    name: str, compute: Callable[[torch.Tensor, int], torch.Tensor], population: bool = False
) -> None:
    for case, rewards, group in ADVANTAGE_CASES:
        expected = [round(e, 4) for e in expected_advantages(rewards, group, population)]
        label = f"advantages {name}: {case} ({'population' if population else 'unbiased'} std)"
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
    parser.add_argument("--std", choices=("unbiased", "population"), default="unbiased")
    args = parser.parse_args(argv)
    renames = dict(item.split("=", 1) for item in args.name)
    population = args.std == "population"

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
                if stage == "advantages":
                    check_advantages(spec, function, population)
                else:
                    {"logprobs": probe_logprobs, "decode": probe_decode}[stage](spec, function)
            return exit_status()
        trl, root = import_trl(args.trl or None)
    except Exception as error:
        print(f"ERROR cannot load the target: {type(error).__name__}: {error}")
        return 2

    version = tree_version(trl, root)
    print(f"TRL {version} from {Path(trl.__file__).parent}")
    utils = importlib.import_module("trl.trainer.utils")
    trainer_module = importlib.import_module("trl.trainer.grpo_trainer")
    probe_trl_logprobs(trainer_module, utils, version, renames)

    if "advantages" in renames:
        check_advantages(
            renames["advantages"], resolve(renames["advantages"], trainer_module), population
        )
    else:
        try:
            method, span, run = trl_advantage_code(trainer_module.GRPOTrainer)
            check_advantages(f"GRPOTrainer.{method} ({span})", run, population)
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
    return exit_status()


def probe_trl_logprobs(
    trainer_module: types.ModuleType, utils: types.ModuleType, version: str, renames: dict
) -> None:
    """The log-prob checks for the TRL release in front of us (see the module docstring)."""
    if "logprobs" in renames:
        probe_logprobs(renames["logprobs"], resolve(renames["logprobs"], utils))
        return
    fused = "add_fused_lm_head(" in inspect.getsource(trainer_module)
    if not fused:  # 0.14 to 1.14: the trainer's method, then the helpers it calls
        probe_trainer_scoring(trainer_module.GRPOTrainer, version)
        helpers = [
            n
            for n in ("selective_log_softmax", "selective_log_softmax_and_entropy")
            if hasattr(utils, n)
        ]
        for helper in helpers:
            function = getattr(utils, helper)
            if helper.endswith("_and_entropy"):
                function = lambda logits, index, f=function: f(logits, index)[0]  # noqa: E731
            probe_logprobs(f"trl.trainer.utils.{helper}", function)
        return
    probe_fused_head_temperature(trainer_module)
    try:
        kernel = importlib.import_module("trl.kernels").ChunkedLogProbFunction
    except Exception as error:  # TRL 1.15's kernel module imports triton unconditionally
        report(
            "SKIP",
            "logprobs: cannot import the fused head's kernel trl.kernels.ChunkedLogProbFunction",
            "",
            f"{type(error).__name__}: {error}",
        )
        return
    probe_logprobs(
        "trl.kernels.chunked_logprob.ChunkedLogProbFunction (the fused head)",
        fused_head_logprobs(kernel),
        takes_temperature=True,
    )
    probe_fused_head_backward(kernel)


if __name__ == "__main__":
    sys.exit(main())
