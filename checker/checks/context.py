"""What a check sees: the candidate behind a guarded `call`, the reference configured the same way,
a seeded generator, and helpers to compare tensors and word a failure.

`Context.call` is where bad candidate behaviour is caught: an exception, output of the wrong type
or shape, or an input tensor modified in place become `CandidateError` (status `error`).
Keyword arguments equal to the candidate's declared (or protocol-default) value are not passed, so
a candidate that does not take e.g. `loss_type` still runs every check at its own convention; a
check that needs a value the candidate cannot take is skipped.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import traceback

import torch

import checker
import reference_impl
from checker import conventions
from checker.candidate import Candidate
from checker.checks import CandidateError, CheckFailure, Skip
from reference_impl.protocol import CLIPPED_LOSS_TYPES, DEFAULTS


def stable_seed(seed: int, salt: str) -> int:
    """A per-check seed: the verdict of a check never depends on which checks ran before it."""
    digest = hashlib.sha256(f"{seed}:{salt}".encode()).hexdigest()
    return int(digest[:12], 16)


class Context:
    def __init__(self, candidate: Candidate, seed: int, salt: str):
        self.candidate = candidate
        self.config = candidate.config
        self.seed = stable_seed(seed, salt)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.last_function: str | None = None

    # -- calling the candidate ------------------------------------------------------------------

    def call(self, name: str, *args, shape: tuple | None = None, **kwargs):
        """Call the candidate's `name`, guarded; see the module docstring."""
        fn = self.candidate.functions.get(name)
        if fn is None:
            raise Skip(f"the candidate does not provide {name}")
        passed = self._keywords(name, fn, kwargs)
        before = [_snapshot(a) for a in (*args, *passed.values())]
        self.last_function = name
        try:
            out = fn(*args, **passed)
        except NotImplementedError as error:
            # The candidate says it does not implement this case, whatever the case is (a
            # keyword value, or a positional one such as two EOS ids): not provided, not a bug.
            # Every keyword that is not a tensor is named (the case may be eos_token_ids=[1, 9]).
            options = {k: v for k, v in passed.items() if not isinstance(v, torch.Tensor)}
            case = _kv(options) if options else "this input"
            why = f" ({_short(str(error))})" if str(error) else ""
            raise Skip(f"{name} does not implement {case}{why}") from None
        except (ValueError, KeyError) as error:
            # A trainer that implements some conventions rejects the others the way TRL does
            # (`ValueError: Unknown loss type: cispo`): an error naming a value this check asked
            # for is "not provided", not a bug. Any other exception stays an error.
            text = " ".join(str(error).split())[:200]
            options = {k: v for k, v in passed.items() if k in DEFAULTS}
            named = {k: v for k, v in options.items() if isinstance(v, str) and v in text}
            if named:
                raise Skip(f"{name} rejects {_kv(named)} ({_short(text)})") from None
            raise CandidateError(f"{name} raised {type(error).__name__}: {text}", name) from None
        except (Exception, SystemExit) as error:  # noqa: BLE001 - anything the candidate raises
            text = " ".join(str(error).split())[:200]
            where = raising_line(error, self.candidate.spec.cwd)
            at = f" (raised at {where})" if where else ""
            raise CandidateError(
                f"{name} raised {type(error).__name__}: {text}{at}", name
            ) from None
        for index, (value, snapshot) in enumerate(
            zip((*args, *passed.values()), before, strict=True)
        ):
            if snapshot is not None and not _unchanged(value, snapshot):
                label = list(passed)[index - len(args)] if index >= len(args) else f"#{index + 1}"
                raise CandidateError(f"{name} modified its input argument {label} in place", name)
        if shape is not None:
            out = self.expect_tensor(out, name, shape)
        return out

    def expect_tensor(self, out, name: str, shape: tuple) -> torch.Tensor:
        """The output as a tensor of `shape` (`()` accepts any one-element tensor)."""
        if not isinstance(out, torch.Tensor):
            raise CandidateError(
                f"{name} returned {type(out).__name__}, expected a torch.Tensor of shape {tuple(shape)}",
                name,
            )
        if tuple(shape) == ():
            if out.numel() != 1:
                raise CandidateError(
                    f"{name} returned shape {tuple(out.shape)}, expected a scalar", name
                )
            return out.reshape(())
        if tuple(out.shape) != tuple(shape):
            raise CandidateError(
                f"{name} returned shape {tuple(out.shape)}, expected {tuple(shape)}", name
            )
        return out

    def _keywords(self, name: str, fn, kwargs: dict) -> dict:
        """Drop keywords at the candidate's own convention; Skip if a needed one is not accepted."""
        passed = {}
        for key, value in kwargs.items():
            if key == "epsilon_high" and value is None:  # None means epsilon_low
                value = kwargs.get("epsilon_low", self.config["epsilon_low"])
            if key in DEFAULTS and _same(value, self._own(key)):
                continue
            if not _accepts(fn, key) or not self._supports(name, key, value):
                raise Skip(f"{name} does not take {_kv({key: value})}")
            passed[key] = value
        return passed

    def _own(self, key: str):
        """The candidate's own value of a keyword; epsilon_high None means epsilon_low."""
        if key == "epsilon_high" and self.config["epsilon_high"] is None:
            return self.config["epsilon_low"]
        return self.config.get(key)

    def _supports(self, name: str, key: str, value) -> bool:
        supported = self.candidate.supported
        if name in supported and key not in supported[name]:
            return False
        return not (key in supported and value not in supported[key])

    # -- the reference, configured like the candidate --------------------------------------------

    def ref_advantages(self, rewards, num_generations, **kwargs) -> torch.Tensor:
        """TRL's advantages, or those of the candidate's declared epsilon and std estimator."""
        options = {"scale_rewards": self.config["scale_rewards"]} | kwargs
        if conventions.is_trl_advantage(self.config):
            return reference_impl.compute_advantages(rewards, num_generations, **options)
        return conventions.advantages(rewards, num_generations, self.config, **options)

    def declared(self, key: str) -> bool:
        """True when the candidate declares a value of `key` other than TRL's default."""
        return self.config[key] != DEFAULTS[key]

    def skip_unless(self, key: str, *values, why: str) -> None:
        """Skip the check when the candidate's `key` convention is not one of `values`."""
        if self.config[key] not in values:
            raise Skip(f"{key}: {self.config[key]} ({why})")

    def clipped_loss_type(self) -> str:
        """A loss type of the clipped family: the candidate's own if it is one, else dapo."""
        own = self.config["loss_type"]
        return own if own in CLIPPED_LOSS_TYPES else "dapo"

    # -- randomness -------------------------------------------------------------------------------

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def rand(self, *shape) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen)

    def randint(self, low: int, high: int, shape: tuple) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen)


# -- comparing and wording ------------------------------------------------------------------------


def fmt(value) -> str:
    """A short rendering of a number or tensor for a one-line message."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.numel() == 1:
            return fmt(float(value))
        flat = [fmt(float(v)) for v in value.flatten()[:6]]
        more = ", ..." if value.numel() > 6 else ""
        return f"[{', '.join(flat)}{more}]"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4g}"
    return str(value)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference; inf if NaNs do not coincide."""
    a, b = a.detach().double(), b.detach().double()
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return math.inf
    both = ~torch.isnan(a)
    return float((a[both] - b[both]).abs().max()) if both.any() else 0.0


def assert_close(
    seen: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float = 0.0,
    what: str,
    causes: dict[str, torch.Tensor] | None = None,
    fallback_cause: str = "",
    function: str | None = None,
) -> None:
    """Fail unless `seen` equals `expected` within atol + rtol*|expected| (NaN where expected NaN).

    `causes` maps a plain-words cause to what a wrong implementation with that cause returns; the
    first one that matches `seen` is named in the failure.
    """
    seen = seen.detach().to(expected.dtype).reshape(expected.shape)
    if _within(seen, expected, atol, rtol):
        return
    cause = (
        explain(seen, causes or {}, atol, rtol) or generic_cause(seen, expected) or fallback_cause
    )
    raise CheckFailure(
        f"{what} {fmt(expected)}",
        f"{fmt(seen)} (max diff {fmt(max_diff(seen, expected))})",
        cause,
        function,
    )


def _within(seen: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    if not torch.equal(torch.isnan(seen), torch.isnan(expected)):
        return False
    keep = ~torch.isnan(expected)
    return bool(
        torch.all((seen[keep] - expected[keep]).abs() <= atol + rtol * expected[keep].abs())
    )


def explain(seen: torch.Tensor, causes: dict[str, torch.Tensor], atol: float, rtol: float) -> str:
    """The first cause whose wrong result equals `seen`."""
    for cause, wrong in causes.items():
        wrong = wrong.detach().to(seen.dtype).reshape(seen.shape)
        if _within(seen, wrong, max(atol, 1e-6), max(rtol, 1e-5)):
            return cause
    return ""


def generic_cause(seen: torch.Tensor, expected: torch.Tensor) -> str:
    """Patterns that hold whatever the function: NaN, a sign flip, a constant scale factor."""
    seen, expected = seen.double(), expected.double()
    if torch.isnan(seen).any() and not torch.isnan(expected).any():
        return "the candidate returned NaN where the reference is finite"
    keep = ~torch.isnan(expected) & ~torch.isnan(seen) & (expected.abs() > 1e-8)
    if not keep.any():
        return ""
    if torch.allclose(seen[keep], -expected[keep], rtol=1e-4, atol=1e-7):
        return "the sign is flipped"
    ratio = seen[keep] / expected[keep]
    factor = ratio.mean()
    spread = float((ratio - factor).abs().max())
    # a factor only where every element shares it, well apart from 1 (an additive term of a
    # few 1e-4, different per element, is not a scale)
    if (
        ratio.numel() > 1
        and spread <= 1e-3 * float(factor.abs())
        and spread < 0.1 * abs(float(factor) - 1)
    ):
        return f"off by a constant factor {fmt(float(factor))}: a scale or normaliser differs"
    return ""


# Folders whose frames are never the candidate's own: this package, torch, the standard library
# (but not the site-packages below it, where an installed TRL is the candidate).
_CHECKER, _TORCH, _STDLIB = (
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (checker, torch, os)
)


def _candidate_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith((_CHECKER, _TORCH)):
        return False
    return not path.startswith(_STDLIB) or "-packages" + os.sep in path


def raising_line(error: BaseException, cwd: str) -> str:
    """`path:line` of the innermost frame of the candidate's code (not torch's, the standard
    library's or the checker's) in `error`'s traceback, relative to `cwd` when inside it."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if _candidate_frame(frame.filename)
    ]
    if not frames:
        return ""
    file = os.path.abspath(frames[-1].filename)
    if file.startswith(os.path.abspath(cwd) + os.sep):
        file = os.path.relpath(file, cwd)
    return f"{file}:{frames[-1].lineno}"


def _snapshot(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return None


def _unchanged(value: torch.Tensor, snapshot: torch.Tensor) -> bool:
    current = value.detach()
    if current.shape != snapshot.shape or current.dtype != snapshot.dtype:
        return False
    if current.is_floating_point():
        return bool(torch.equal(torch.isnan(current), torch.isnan(snapshot))) and bool(
            torch.equal(torch.nan_to_num(current), torch.nan_to_num(snapshot))
        )
    return bool(torch.equal(current, snapshot))


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and float(a) == float(b)
    return a == b


def _accepts(fn, key: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD or p.name == key for p in parameters)


def _kv(options: dict) -> str:
    """`key=value, ...` for a skip reason: short, so that a tensor never fills the report."""
    return ", ".join(f"{k}={_brief(v)}" for k, v in options.items())


def _brief(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}" if value.numel() > 4 else repr(value.tolist())
    if isinstance(value, list | tuple) and len(value) > 4:
        return f"[{', '.join(map(repr, value[:3]))}, ... ({len(value)} items)]"
    return repr(value)


def _short(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
