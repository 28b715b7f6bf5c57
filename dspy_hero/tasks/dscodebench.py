"""DSCodeBench as a task: data-science function generation judged by output comparison.

Layout: ``*.jsonl`` (or the upstream ``DS_bench.json`` list) of ``{problem_id, library, code_problem,
ground_truth_code, test_script}``. The shared copy holds problems 0-499 (``ds_bench_part_a.jsonl``).

Paper split (Appendix A): 1,000 problems, 18 excluded, 500 for optimization and 482 for evaluation.
The paper does not list the exclusions; the 500:482 ratio is applied by a seeded problem-level order
to whatever is present (pass `exclude=` to drop problems), and the note states the counts.
Candidates are judged by `ds_outputs_metric` (200 seeded generated inputs, outputs must all match).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.benchmarks import build_task, read_json
from dspy_hero.tasks.bigcodebench import read_jsonl
from dspy_hero.tasks.hub import find_data_dir, no_hub
from dspy_hero.tasks.splits import Split, cap, split_by_fraction

INPUTS = ("prompt",)
PROGRAM_INPUTS = ("prompt",)
PAPER_TRAIN, PAPER_TEST = 500, 482


def to_example(row: dict[str, Any]) -> dspy.Example:
    return dspy.Example(
        example_id=f"dscodebench/{row['problem_id']}",
        prompt=row["code_problem"],
        library=row.get("library") or str(row["problem_id"]).rsplit("_", 1)[0],
        ground_truth_code=row["ground_truth_code"],
        test_script=row["test_script"],
    ).with_inputs(*INPUTS)


def read_rows(root: Path) -> tuple[list[dict[str, Any]], str]:
    files = sorted([*root.glob("*.jsonl"), *root.glob("*.jsonl.gz")])
    if files:
        return [r for f in files for r in read_jsonl(f)], ", ".join(str(f) for f in files)
    listing = root / "DS_bench.json"
    if listing.is_file():
        rows = read_json(listing)
        return (list(rows.values()) if isinstance(rows, dict) else rows), str(listing)
    raise FileNotFoundError(f"dscodebench: no *.jsonl files or DS_bench.json under {root}")


def dscodebench_split(
    data_dir=None, split_seed: int = 0, limit: int | None = None, exclude: Iterable[str] = (),
    libraries: Iterable[str] | None = None, **_: object,
) -> Split:
    """DSCodeBench in the paper's 500:482 ratio over the problems present (optionally some libraries)."""
    root = find_data_dir("dscodebench", data_dir)
    if root is None:
        raise no_hub("dscodebench", "DSCodeBench has no hub dataset this loader knows; use the upstream DS_bench.json")
    rows, source = read_rows(root)
    excluded = set(exclude)
    examples = [to_example(r) for r in rows if str(r["problem_id"]) not in excluded]
    wanted = set(libraries) if libraries is not None else None
    if wanted is not None:
        examples = [ex for ex in examples if ex.library in wanted]
    if len(examples) < 2:
        raise ValueError(f"dscodebench: only {len(examples)} problem(s) left from {source}")
    fraction = PAPER_TRAIN / (PAPER_TRAIN + PAPER_TEST)
    train, test = split_by_fraction(examples, fraction, seed=split_seed)
    train, test = cap(train, limit, split_seed, "library"), cap(test, limit, split_seed, "library")
    libs = sorted({ex.library for ex in examples})
    note = (
        f"DSCodeBench from {source}: {len(rows)} problems, {len(excluded & {str(r['problem_id']) for r in rows})} excluded "
        f"by request{f', libraries restricted to {sorted(wanted)}' if wanted is not None else ''}; {len(examples)} "
        f"problems ({', '.join(libs)}) split at the problem level in the paper's ratio {PAPER_TRAIN}:{PAPER_TEST} "
        f"(seed {split_seed}) into {len(train)} optimization / {len(test)} evaluation"
        + (f", each pool capped at {limit}" if limit is not None else "")
        + ". Semantics: outputs on 200 seeded generated inputs must all match the ground truth."
    )

    return Split(train, test, note, {"source": source})


def load_dscodebench(
    data_dir=None, split_seed: int = 0, limit: int | None = None, exclude: Iterable[str] = (),
    libraries: Iterable[str] | None = None, **_: object,
) -> Task:
    """The DSCodeBench Task: the pools of `dscodebench_split`, the official metric and the paper-style seed program."""
    split = dscodebench_split(data_dir=data_dir, split_seed=split_seed, limit=limit, exclude=exclude, libraries=libraries)

    def metric():
        from dspy_hero.metrics.python import ds_outputs_metric

        return ds_outputs_metric()

    return build_task(
        name="dscodebench", language="python", train=split.train, test=split.test, metric_factory=metric,
        program_inputs=PROGRAM_INPUTS, group_key="library", split_note=split.note, extras=split.extras,
    )
