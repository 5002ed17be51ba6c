"""Shared test set-up: offline Hugging Face, one torch thread per xdist worker."""

import os

# Nothing may reach the Hub: set before transformers, datasets or trl are imported.
for name in (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
):
    os.environ.setdefault(name, "1")

import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: more threads per worker only adds contention.
    torch.set_num_threads(1)
