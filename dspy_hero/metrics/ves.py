"""BIRD's Valid Efficiency Score (VES) and mini-dev's Reward-based VES (R-VES).

Both reward a *correct* prediction (BIRD semantics: same row set as the gold) by how fast it runs
relative to the gold query; an incorrect prediction earns 0.

Timing follows the official harness: prediction and gold run alternately `repetitions` times on one
connection (alternating spreads cache warm-up and machine noise over both), each round gives a ratio
gold_time / pred_time, ratios beyond mean ± 3σ are dropped, and the mean of the rest is the
example's ratio. VES averages sqrt(ratio); R-VES averages a bucketed reward of the ratio; both ×100.
We time execution *and* fetching of all rows on the same read-only guarded connection the metric
uses (the original times ``cursor.execute`` only, which for SQLite covers just the first row).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dspy_hero.execution.sqlite import SQLiteExecutor, Watchdog
from dspy_hero.fields import get_field
from dspy_hero.metrics.base import extract_code, prediction_text, require_fields
from dspy_hero.metrics.compare import bird_equal

logger = logging.getLogger(__name__)

__all__ = [
    "VESDetail",
    "VESResult",
    "r_ves",
    "r_ves_bucket",
    "r_ves_reward",
    "time_ratio",
    "ves",
    "ves_reward",
]


@dataclass(frozen=True)
class VESDetail:
    """One example's outcome: correctness, the mean time ratio (None if incorrect) and its reward."""

    correct: bool
    ratio: float | None
    reward: float
    gold_time_s: float | None = None
    pred_time_s: float | None = None
    note: str = ""


@dataclass(frozen=True)
class VESResult:
    """A corpus score in [0, 125] (R-VES) or [0, ∞) (VES), with the per-example details."""

    score: float
    details: tuple[VESDetail, ...]
    kind: str
    repetitions: int

    @property
    def accuracy(self) -> float:
        """Execution accuracy (BIRD EX, in %) of the same predictions, for reporting next to VES."""
        return 100.0 * sum(d.correct for d in self.details) / len(self.details) if self.details else 0.0


def drop_outliers(values: Sequence[float]) -> list[float]:
    """Values within mean ± 3 population standard deviations (all of them when fewer than 3)."""
    if len(values) < 3:
        return list(values)
    mean = statistics.fmean(values)
    sd = statistics.pstdev(values)
    kept = [v for v in values if mean - 3 * sd <= v <= mean + 3 * sd]
    return kept or list(values)


def _timed(
    gold_sql: str, pred_sql: str, db_path: str, repetitions: int, timeout_s: float, watchdog: Watchdog | None = None
) -> VESDetail:
    if repetitions < 1:
        raise ValueError(f"repetitions must be >= 1, got {repetitions!r}")
    executor = SQLiteExecutor(db_path, timeout_s=timeout_s, watchdog=watchdog)
    if not executor.exists():
        raise FileNotFoundError(f"VES: database file not found: {db_path}")
    try:
        return _timed_on(executor, gold_sql, pred_sql, repetitions)
    except Exception as exc:  # noqa: BLE001 - a prediction must get a score, whatever its text
        logger.warning("VES could not judge a prediction", exc_info=True)
        return VESDetail(False, None, 0.0, note=f"the prediction could not be judged: {type(exc).__name__}: {exc}"[:500])


def _timed_on(executor: SQLiteExecutor, gold_sql: str, pred_sql: str, repetitions: int) -> VESDetail:
    gold = executor.run(gold_sql)
    if not gold.ok or gold.truncated:
        return VESDetail(False, None, 0.0, note=f"gold query failed: {gold.describe(max_rows=0)}")
    pred = executor.run(pred_sql)
    if not pred.ok or pred.truncated:
        return VESDetail(False, None, 0.0, note=f"prediction failed: {pred.describe(max_rows=0)}")
    if not bird_equal(pred.rows, gold.rows):
        return VESDetail(False, None, 0.0, note="incorrect result")
    ratios, gold_times, pred_times = [], [], []
    with executor.session() as session:
        for _ in range(repetitions):
            p = session.run(pred_sql)
            g = session.run(gold_sql)
            if not (p.ok and g.ok):
                failing = p if not p.ok else g
                return VESDetail(False, None, 0.0, note=f"a timed run failed: {failing.describe(max_rows=0)}")
            pred_times.append(p.runtime_s)
            gold_times.append(g.runtime_s)
            ratios.append(g.runtime_s / max(p.runtime_s, 1e-9))
    ratio = statistics.fmean(drop_outliers(ratios))
    return VESDetail(True, ratio, 0.0, statistics.median(gold_times), statistics.median(pred_times))


def time_ratio(
    gold_sql: str, pred_sql: str, db_path: str, repetitions: int = 10, timeout_s: float = 30.0
) -> float | None:
    """Mean gold/prediction time ratio after outlier removal; None when the prediction is incorrect."""
    return _timed(gold_sql, pred_sql, db_path, repetitions, timeout_s).ratio


def r_ves_bucket(ratio: float) -> float:
    """mini-dev's reward for a time ratio: ≥2 → 1.25, [1,2) → 1, [0.5,1) → 0.75, [0.25,0.5) → 0.5, else 0.25."""
    if ratio >= 2:
        return 1.25
    if ratio >= 1:
        return 1.0
    if ratio >= 0.5:
        return 0.75
    if ratio >= 0.25:
        return 0.5
    return 0.25


def _with_reward(detail: VESDetail, reward_of: Callable[[float], float]) -> VESDetail:
    if not detail.correct or detail.ratio is None:
        return detail
    return VESDetail(
        True, detail.ratio, reward_of(detail.ratio), detail.gold_time_s, detail.pred_time_s, detail.note
    )


def ves_reward(
    gold_sql: str, pred_sql: str, db_path: str, repetitions: int = 10, timeout_s: float = 30.0
) -> float:
    """One example's VES reward: sqrt(time ratio) when correct, else 0."""
    return _with_reward(_timed(gold_sql, pred_sql, db_path, repetitions, timeout_s), math.sqrt).reward


def r_ves_reward(
    gold_sql: str, pred_sql: str, db_path: str, repetitions: int = 10, timeout_s: float = 30.0
) -> float:
    """One example's R-VES reward: the bucketed time ratio when correct, else 0."""
    return _with_reward(_timed(gold_sql, pred_sql, db_path, repetitions, timeout_s), r_ves_bucket).reward


def _corpus(
    examples: Sequence[Any],
    predictions: Sequence[Any],
    repetitions: int,
    timeout_s: float,
    reward_of: Callable[[float], float],
    kind: str,
) -> VESResult:
    if len(examples) != len(predictions):
        raise ValueError(f"{kind}: {len(examples)} examples but {len(predictions)} predictions")
    for ex in examples:
        require_fields(ex, ("gold_sql", "db_path"), kind)
    details = []
    watchdog = Watchdog()  # one backstop thread for the whole corpus
    for ex, pred in zip(examples, predictions):
        pred_sql = extract_code(prediction_text(pred, "sql"), "sql")
        detail = _timed(
            str(get_field(ex, "gold_sql")), pred_sql, str(get_field(ex, "db_path")), repetitions, timeout_s, watchdog
        )
        details.append(_with_reward(detail, reward_of))
    score = 100.0 * statistics.fmean(d.reward for d in details) if details else 0.0
    return VESResult(score, tuple(details), kind, repetitions)


def ves(
    examples: Sequence[Any], predictions: Sequence[Any], repetitions: int = 10, timeout_s: float = 30.0
) -> VESResult:
    """BIRD VES over examples (``gold_sql``, ``db_path``) and predictions (``sql``): mean sqrt(ratio) × 100.

    Runs sequentially on purpose: parallel timing would measure contention, not the queries.
    """
    return _corpus(examples, predictions, repetitions, timeout_s, math.sqrt, "ves")


def r_ves(
    examples: Sequence[Any], predictions: Sequence[Any], repetitions: int = 10, timeout_s: float = 30.0
) -> VESResult:
    """BIRD mini-dev R-VES: mean bucketed reward × 100 (at most 125)."""
    return _corpus(examples, predictions, repetitions, timeout_s, r_ves_bucket, "r_ves")
