"""`python -m rlzero [--option value ...]`: a run configured from the command line.

Every RunConfig field is an option (`kl_coef` as `--kl-coef`), typed as the field is: a bool
takes `true` or `false`, a tuple its items separated by commas, an optional field `none`.
`--dataset file.jsonl` trains on the prompts of a file instead of the toy task's, and
`--eval-dataset file.jsonl` evaluates on another file's (with `--eval-every`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from rlzero.config import RunConfig

_SCALARS = {"int": int, "float": float, "str": str, "bool": bool}


def _kind(annotation: str) -> tuple[str, bool, bool]:
    """(scalar type name, optional, tuple) of a RunConfig annotation such as
    "tuple[float, ...] | None"."""
    optional = annotation.endswith("| None")
    core = annotation.removesuffix("| None").strip()
    if core.startswith("tuple["):
        return core[len("tuple[") :].split(",")[0].strip(), optional, True
    return core, optional, False


def _parser_for(annotation: str):
    scalar, optional, is_tuple = _kind(annotation)
    convert = _SCALARS[scalar]

    def parse(text: str):
        if optional and text.lower() == "none":
            return None
        if scalar == "bool":
            if text.lower() not in ("true", "false"):
                raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
            return text.lower() == "true"
        if is_tuple:
            return tuple(convert(item) for item in text.split(",") if item.strip())
        return convert(text)

    parse.__name__ = scalar  # argparse names the type in its error messages
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rlzero", description=__doc__.splitlines()[0])
    for field in dataclasses.fields(RunConfig):
        # config.py postpones its annotations: each is its source text, "float | None" say.
        annotation = str(field.type)
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=_parser_for(annotation),
            default=field.default,
            help=f"default: {field.default}",
        )
    parser.add_argument("--dataset", default=None, help="a JSON-lines file of prompts")
    parser.add_argument(
        "--eval-dataset", default=None, help="a JSON-lines file of prompts to evaluate on"
    )
    return parser


def parse_config(argv: list[str]) -> tuple[RunConfig, dict[str, str | None]]:
    """The run's configuration and its data files, {"dataset": ..., "eval_dataset": ...} (None:
    the toy task's prompts, no evaluation set); a value RunConfig refuses exits with its message,
    as argparse does for a malformed one."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    files = {name: args.pop(name) for name in ("dataset", "eval_dataset")}
    try:
        return RunConfig(**args), files
    except ValueError as error:
        parser.error(str(error))


def main(argv: list[str] | None = None) -> None:
    import torch

    from rlzero.data import load_jsonl
    from rlzero.learner import Learner
    from rlzero.metrics import summary
    from rlzero.tiny import load_tiny
    from rlzero.toy_tasks import TOY_TASKS

    cfg, files = parse_config(sys.argv[1:] if argv is None else argv)
    if cfg.task not in TOY_TASKS:
        sys.exit(f"unknown task {cfg.task!r}; the toy tasks are {sorted(TOY_TASKS)}")
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_tiny()
    tokenizer.pad_token = tokenizer.eos_token
    toy = TOY_TASKS[cfg.task]
    dataset = load_jsonl(files["dataset"]) if files["dataset"] else toy.dataset().to_list()
    held_out = load_jsonl(files["eval_dataset"]) if files["eval_dataset"] else None
    learner = Learner(cfg, model, tokenizer, list(toy.reward_funcs))
    logs = learner.train(dataset, lambda log: print(_line(log), flush=True), held_out)
    print(f"finished after {len(logs)} rollouts")
    for name, value in summary(logs, cfg.target, cfg.target_window).items():
        print(f"{name}: {value}")


def _line(log) -> str:
    extra = "".join(f"  {name} {value:.4f}" for name, value in log.stats.items())
    return (
        f"step {log.step:3d}  reward {log.reward:.3f}  loss {log.loss:+.4f}  "
        f"length {log.length:.2f}{extra}"
    )
