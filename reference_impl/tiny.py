"""A tiny causal LM and word-level tokenizer, built locally and cached on disk; nothing is downloaded.

The model is a randomly initialised Qwen2 (83,712 parameters with tied embeddings); the tokenizer knows 17 words. Both are
saved with `save_pretrained` so that code which reloads a model from its path (TRL re-loads the
reference model from `config._name_or_path` when beta != 0) finds them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

# Loading a 300 kB model needs no progress bars or advice on stderr.
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
VOCABULARY = [PAD, EOS, UNK, *[str(d) for d in range(10)], "=", "+", "A", "B"]


@dataclass(frozen=True)
class TinySpec:
    """What defines a tiny model; its hash names the cache folder."""

    hidden_size: int = 64
    """Width of the residual stream."""
    intermediate_size: int = 128
    """Width of each MLP's hidden layer."""
    num_hidden_layers: int = 2
    """Transformer blocks."""
    num_attention_heads: int = 4
    """Query heads per attention layer."""
    num_key_value_heads: int = 4
    """Key/value heads per attention layer (fewer than query heads: grouped-query attention)."""
    max_position_embeddings: int = 64
    """Longest prompt plus completion the model accepts, in tokens."""
    seed: int = 0
    """Seeds the random initial weights."""
    eos_bias: float = 0.0
    """Added to the EOS row of the output layer: > 0 makes an untrained model stop early, which
    gives completions of unequal length (needed to tell the loss normalisations apart)."""

    def folder_name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"tiny-qwen2-{digest[:12]}"


def cache_root() -> Path:
    """`$GRPO_SKILL_CACHE`, else `~/.cache/grpo-skill`."""
    return Path(os.environ.get("GRPO_SKILL_CACHE", Path.home() / ".cache" / "grpo-skill"))


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over digits, `=`, `+`, `A`, `B`; left padding for prompts."""
    vocab = {word: index for index, word in enumerate(VOCABULARY)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
    )


def _build_model(spec: TinySpec, tokenizer: PreTrainedTokenizerFast) -> torch.nn.Module:
    # The caller's random state is left as it was: a training script seeds, then loads; were the
    # first load (which builds) to reseed and draw, the first run would sample differently from
    # every later one, which loads from the cache.
    with torch.random.fork_rng(devices=[]):
        return _initialised_model(spec, tokenizer)


def _initialised_model(spec: TinySpec, tokenizer: PreTrainedTokenizerFast) -> torch.nn.Module:
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(VOCABULARY),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.eos_bias == 0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if spec.eos_bias:
        with torch.no_grad():
            model.lm_head.weight[tokenizer.eos_token_id] += spec.eos_bias
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def tiny_model_path(spec: TinySpec | None = None) -> Path:
    """The folder holding the saved model and tokenizer for `spec`, built on first use."""
    spec = spec or TinySpec()
    folder = cache_root() / spec.folder_name()
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        return folder
    tokenizer = build_tokenizer()
    model = _build_model(spec, tokenizer)
    # Write to a private folder, then rename: parallel test workers never see half a model.
    staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(folder)
    except OSError:  # another process finished first; its copy is identical
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return folder


def load_tiny(spec: TinySpec | None = None) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    """The tiny policy (fp32, train mode) and its tokenizer, from the cache folder."""
    path = tiny_model_path(spec)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    return model, tokenizer
