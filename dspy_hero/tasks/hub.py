"""Where benchmark data comes from: a local directory in the official layout, or the Hugging Face hub.

Local data wins: an explicit `data_dir`, then ``$HERO_DATA_DIR/<name>``, then the shared checkout
(``../shared/benchmarks/<name>`` next to the repository, or ``$HERO_SHARED/<name>``). The hub is
tried only when none exists, and only after a one-second reachability check, so an offline machine
fails in about a second with a message that says what to pass instead of hanging in retries.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dspy_hero.net import hub_reachable  # floor 0, shared with lm/model_pack; re-exported here


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
