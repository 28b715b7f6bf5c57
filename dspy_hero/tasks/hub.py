"""Where benchmark data comes from: a local directory in the official layout, or the Hugging Face hub.

Local data wins: an explicit `data_dir`, then ``$HERO_DATA_DIR/<name>``, then the shared checkout
(``../shared/benchmarks/<name>`` next to the repository, or ``$HERO_SHARED/<name>``). The hub is
tried only when none exists, and only after a one-second reachability check, so an offline machine
fails in about a second with a message that says what to pass instead of hanging in retries.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class DataUnavailable(FileNotFoundError):
    """No local copy of the benchmark and no reachable hub."""


def shared_benchmarks_dir() -> Path:
    """``$HERO_SHARED`` (the shared folder or its ``benchmarks/``) or ``../shared/benchmarks`` next to
    the repository root. Tests and loaders both locate the data here."""
    env = os.environ.get("HERO_SHARED")
    if env:
        root = Path(env)
        return root / "benchmarks" if (root / "benchmarks").is_dir() else root
    return Path(__file__).resolve().parents[3] / "shared" / "benchmarks"


def find_data_dir(name: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local directory for benchmark `name`, or None when there is none.

    An explicit `data_dir` that does not exist is an error (a typo must not silently fall back to
    other data).
    """
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise DataUnavailable(f"{name}: data directory {str(path)!r} does not exist")
        return path
    candidates = []
    if os.environ.get("HERO_DATA_DIR"):
        candidates.append(Path(os.environ["HERO_DATA_DIR"]) / name)
    candidates.append(shared_benchmarks_dir() / name)
    return next((p for p in candidates if p.is_dir()), None)


def hub_reachable(timeout_s: float = 1.0, offline_flags: tuple[str, ...] = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")) -> bool:
    """True when the hub endpoint (HF_ENDPOINT) accepts a TCP connection and no offline flag is set.
    Shared by the dataset loaders and the local model's hub download (which passes HF_HUB_OFFLINE only)."""
    for flag in offline_flags:
        if os.environ.get(flag, "").strip().lower() in {"1", "true", "yes", "on"}:
            return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def load_hub_rows(name: str, repo_id: str, split: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Rows of a hub dataset through `datasets`, or a clear `DataUnavailable` when offline."""
    if not hub_reachable():
        raise DataUnavailable(
            f"{name}: no local data (pass data_dir=..., set HERO_DATA_DIR, or provide ../shared/benchmarks/{name}) "
            f"and the Hugging Face hub is not reachable for {repo_id!r}"
        )
    import datasets  # deferred: heavy import, only needed online

    return [dict(row) for row in datasets.load_dataset(repo_id, split=split, **kwargs)]


def no_hub(name: str, why: str) -> DataUnavailable:
    return DataUnavailable(
        f"{name}: no local data found (pass data_dir=..., set HERO_DATA_DIR, or provide "
        f"../shared/benchmarks/{name}); {why}"
    )
