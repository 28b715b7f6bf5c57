"""Floor-0 network check: whether the Hugging Face hub can be reached, shared by the dataset loaders
(`tasks/hub.py`) and the local model's download (`lm/model_pack.py`), so neither imports the other.
Standard library only; nothing here imports another dspy_hero module."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

__all__ = ["hub_reachable"]

_TRUE = frozenset({"1", "true", "yes", "on"})


def hub_reachable(timeout_s: float = 1.0, offline_flags: tuple[str, ...] = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")) -> bool:
    """True when the hub endpoint (HF_ENDPOINT) accepts a TCP connection and no offline flag is set.
    The dataset loaders pass both offline flags; the model download passes HF_HUB_OFFLINE only."""
    for flag in offline_flags:
        if os.environ.get(flag, "").strip().lower() in _TRUE:
            return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
