"""BigCodeBench(-Instruct) as a task: Python function generation judged by the task's unittest suite.

Layout: one or more ``*.jsonl`` / ``*.jsonl.gz`` files of BigCodeBench rows (``task_id,
complete_prompt, instruct_prompt, canonical_solution, code_prompt, test, entry_point, libs``), e.g.
the ``hf_data/`` export or the shared ``bigcodebench_v0.1.0_part_a.jsonl.gz`` (tasks 0-569 only).
Online, rows come from the hub dataset ``bigcode/bigcodebench``.

Paper split (Appendix A): 1,140 tasks, 3 excluded, 500 for optimization and 637 for evaluation. The
same ratio (500/1137) is applied, by a seeded task-level order, to whichever tasks are present, and the
note states the counts. The paper does not name its 3 exclusions; pass `exclude=` to drop tasks.
`stdlib_only=True` keeps tasks whose libraries are all in the standard library, for machines
without the benchmark's third-party stack.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.benchmarks import build_task
from dspy_hero.tasks.hub import find_data_dir, load_hub_rows
from dspy_hero.tasks.splits import Split, cap, split_by_fraction

INPUTS = ("prompt", "code_prompt", "entry_point")
PROGRAM_INPUTS = ("prompt",)
HUB_REPO, HUB_SPLIT = "bigcode/bigcodebench", "v0.1.4"
PAPER_TRAIN, PAPER_TEST = 500, 637


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from exc
    return rows


def parse_libs(value: Any) -> list[str]:
    """``libs`` is a list, or its Python repr as a string in the hub export."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if not value:
        return []
    parsed = ast.literal_eval(value)
    return [str(v) for v in parsed]


def is_stdlib(libs: Iterable[str]) -> bool:
    return all(lib.split(".")[0] in sys.stdlib_module_names for lib in libs)


def imported_modules(code: str) -> set[str]:
    """Top-level module names a piece of code imports (tests sometimes import more than ``libs`` lists)."""
    try:
        tree = ast.parse(code or "")
    except SyntaxError:
        return set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", code or "", re.MULTILINE))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def runs_on_stdlib(example: dspy.Example) -> bool:
    """True when the listed libraries and everything the prompt, solution and tests import are stdlib."""
    sources = (example.code_prompt, example.canonical_solution, example.test_code)
    return is_stdlib(example.libs) and all(is_stdlib(imported_modules(code)) for code in sources)


def primary_library(libs: list[str]) -> str:
    """The pool-grouping key: the first third-party library (sorted), else the first stdlib one."""
    third = sorted(lib for lib in libs if not is_stdlib([lib]))
    return (third or sorted(libs) or ["none"])[0]


def to_example(row: dict[str, Any], variant: str) -> dspy.Example:
    prompt = row["instruct_prompt"] if variant == "instruct" else row["complete_prompt"]
    libs = parse_libs(row.get("libs"))
    return dspy.Example(
        example_id=row["task_id"],
        prompt=prompt,
        code_prompt=row.get("code_prompt", ""),
        entry_point=row.get("entry_point", "task_func"),
        test_code=row["test"],
        # the complete reference program: the official field holds only the body under code_prompt
        canonical_solution=row.get("code_prompt", "") + row.get("canonical_solution", ""),
        libs=libs,
        library=primary_library(libs),
    ).with_inputs(*INPUTS)


def bigcodebench_split(
    data_dir=None,
    split_seed: int = 0,
    limit: int | None = None,
    variant: str = "instruct",
    stdlib_only: bool = False,
    exclude: Iterable[str] = (),
    calibrated: bool = True,
    **_: object,
) -> Split:
    """BigCodeBench with the paper's 500:637 optimization/evaluation ratio over the tasks present."""
    if variant not in ("instruct", "complete"):
        raise ValueError(f"variant must be 'instruct' or 'complete', got {variant!r}")
    root = find_data_dir("bigcodebench", data_dir)
    if root is not None:
        files = sorted([*root.glob("*.jsonl"), *root.glob("*.jsonl.gz")])
        if not files:
            raise FileNotFoundError(f"bigcodebench: no *.jsonl or *.jsonl.gz files under {root}")
        rows = [r for f in files for r in read_jsonl(f)]
        source = ", ".join(str(f) for f in files)
    else:
        rows = load_hub_rows("bigcodebench", HUB_REPO, HUB_SPLIT)
        source = f"{HUB_REPO} split {HUB_SPLIT}"
    excluded = set(exclude)
    examples = [to_example(r, variant) for r in rows if r["task_id"] not in excluded]
    n_loaded = len(examples)
    if stdlib_only:
        examples = [ex for ex in examples if runs_on_stdlib(ex)]
    if len(examples) < 2:
        raise ValueError(f"bigcodebench: only {len(examples)} task(s) left from {source}")
    fraction = PAPER_TRAIN / (PAPER_TRAIN + PAPER_TEST)
    train, test = split_by_fraction(examples, fraction, seed=split_seed)
    train, test = cap(train, limit, split_seed), cap(test, limit, split_seed)
    note = (
        f"BigCodeBench-{variant.capitalize()} from {source}: {len(rows)} tasks, {len(excluded & {r['task_id'] for r in rows})} "
        f"excluded by request, {n_loaded - len(examples) if stdlib_only else 0} dropped by stdlib_only"
        f"{' (kept tasks whose libs and the imports of prompt, solution and tests are all standard library)' if stdlib_only else ''}; {len(examples)} split "
        f"at the task level in the paper's ratio {PAPER_TRAIN}:{PAPER_TEST} (seed {split_seed}) into "
        f"{len(train)} optimization / {len(test)} evaluation"
        + (f", each pool capped at {limit}" if limit is not None else "")
        + f". Semantics: unittest TestCases must all pass ({'calibrated' if calibrated else 'uncalibrated'})."
    )

    return Split(train, test, note, {"source": source})


def load_bigcodebench(
    data_dir=None,
    split_seed: int = 0,
    limit: int | None = None,
    variant: str = "instruct",
    stdlib_only: bool = False,
    exclude: Iterable[str] = (),
    calibrated: bool = True,
    **_: object,
) -> Task:
    """The BigCodeBench Task: the pools of `bigcodebench_split`, the official metric and the paper-style seed program."""
    split = bigcodebench_split(data_dir=data_dir, split_seed=split_seed, limit=limit, variant=variant, stdlib_only=stdlib_only, exclude=exclude, calibrated=calibrated)

    def metric():
        from dspy_hero.metrics.python import python_tests_metric

        return python_tests_metric(calibrated=calibrated)

    return build_task(
        name="bigcodebench", language="python", train=split.train, test=split.test, metric_factory=metric,
        program_inputs=PROGRAM_INPUTS, group_key="library", split_note=split.note, extras=split.extras,
    )
