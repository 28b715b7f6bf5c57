"""How often HERO-T's "suspect" and "failing" signals fire on reference programs (false alarms).

HERO-T refines by default only what execution shows to be suspect, and its gate lets the checks alone
replace a *failing* program. A signal that fires on right programs wastes refinement calls (suspect)
or lets a revision replace a right program without the judge (failing). This script assesses every
reference program of a task's shared examples exactly as HERO-T assesses a generated one
(`dspy_hero.refine.suspect.assess`: the environment's check, the shared diagnosis, the question's
column bound) and counts what fires, by category. No LM is run; the labels are read only here, to
know which program is the reference.

With ``--programs RESULTS.json`` it assesses instead the programs a finished `compare.py` run
recorded for one method (default ``hero_o``) and crosses the signals with the scores the metric gave
them: how many wrong programs the signals catch (what HERO-T would refine) and how many right ones
they flag.

    python benchmarks/hero_t_signals.py --task spider [--limit 0] [--out benchmarks/results/hero_t_signals_spider.json]
    python benchmarks/hero_t_signals.py --task bigcodebench --stdlib-only
    python benchmarks/hero_t_signals.py --task spider --programs benchmarks/results/spider-det-qwen1.5b.json
    python benchmarks/hero_t_signals.py --task bigcodebench --stdlib-only \
        --programs benchmarks/results/bcb-stdlib-qwen1.5b.json [--complete-prompt-examples]

``--complete-prompt-examples`` (BigCodeBench): run the examples of the task's ``complete_prompt``
docstring instead of the instruct prompt's (which shows none), to see what that signal would add.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from dspy_hero.fields import ENVIRONMENT_FIELDS, REFERENCE_PROGRAM_FIELDS, get_field
from dspy_hero.refine.suspect import assess
from dspy_hero.tasks.hub import shared_benchmarks_dir
from dspy_hero.tasks.registry import load_task

TASK_TEXT_FIELDS = ("question", "nl_question", "prompt", "code_prompt")


def measure(task_name: str, data: str | None, limit: int, stdlib_only: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"data": data or str(shared_benchmarks_dir() / task_name)}
    if stdlib_only:
        kwargs["stdlib_only"] = True
    task = load_task(task_name, **kwargs)
    try:
        examples = [*task.train, *task.test]
        if limit:
            examples = examples[:limit]
        suspect: Counter[str] = Counter()
        failing: Counter[str] = Counter()
        n_suspect = n_failing = n_assessed = 0
        flagged = []
        for ex in examples:
            reference = next((str(v) for f in REFERENCE_PROGRAM_FIELDS if (v := get_field(ex, f))), None)
            if not reference:
                continue
            env = task.environment_for(ex)
            inputs = {f: v for f in (*TASK_TEXT_FIELDS, *ENVIRONMENT_FIELDS) if (v := get_field(ex, f)) is not None}
            found = assess(task.language, reference, env.execute(reference), env, inputs)
            n_assessed += 1
            kinds = [s.category.value if s.category else "did not run / check failed" for s in found.suspicions]
            if found.suspect:
                n_suspect += 1
                suspect.update(set(kinds))
                flagged.append({"id": get_field(ex, "example_id"), "failing": found.failing,
                                "signals": [s.text[:160] for s in found.suspicions]})
            if found.failing:
                n_failing += 1
                failing.update(set(kinds))
        return {"task": task_name, "stdlib_only": stdlib_only, "examples": len(examples), "assessed": n_assessed,
                "reference_suspect": n_suspect, "reference_failing": n_failing,
                "suspect_by_category": dict(suspect.most_common()), "failing_by_category": dict(failing.most_common()),
                "flagged": flagged}
    finally:
        task.close()


def _complete_prompts(data_dir: Path) -> dict[str, str]:
    """BigCodeBench task id -> its ``complete_prompt`` (the docstring with examples), from the raw files."""
    prompts: dict[str, str] = {}
    for path in sorted(data_dir.glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    prompts[row["task_id"]] = row["complete_prompt"]
    return prompts


def measure_recorded(task_name: str, data: str | None, stdlib_only: bool, results: Path, method: str,
                     complete_prompt_examples: bool = False) -> dict[str, Any]:
    """The signals on a recorded run's programs, crossed with their recorded metric scores."""
    kwargs: dict[str, Any] = {"data": data or str(shared_benchmarks_dir() / task_name)}
    if stdlib_only:
        kwargs["stdlib_only"] = True
    run = json.loads(results.read_text(encoding="utf-8"))
    outcomes = run["methods"][method]["outcomes"]
    task = load_task(task_name, **kwargs)
    try:
        by_id = {get_field(ex, "example_id"): ex for ex in [*task.train, *task.test]}
        complete = _complete_prompts(Path(kwargs["data"])) if complete_prompt_examples else {}
        table: Counter[str] = Counter()
        categories: dict[str, Counter[str]] = {"right": Counter(), "wrong": Counter()}
        missing = 0
        for o in outcomes:
            ex = by_id.get(o["example_id"])
            if ex is None:
                missing += 1
                continue
            env = task.environment_for(ex)
            inputs = {f: v for f in (*TASK_TEXT_FIELDS, *ENVIRONMENT_FIELDS) if (v := get_field(ex, f)) is not None}
            if complete_prompt_examples:
                from dspy_hero.execution.python_environment import PythonEnvironment

                inputs["prompt"] = complete[o["example_id"]]
                env = PythonEnvironment(sandbox=env.sandbox, prompt=inputs["prompt"], entry_point=env.entry_point)
            program = o.get("program") or ""
            found = assess(task.language, program, env.execute(program), env, inputs)
            outcome = "right" if o["score"] >= 1.0 else "wrong"
            state = "failing" if found.failing else "suspect" if found.suspect else "plausible"
            table[f"{outcome}/{state}"] += 1
            categories[outcome].update({s.category.value if s.category else "did not run / check failed"
                                        for s in found.suspicions})
        return {"task": task_name, "results": str(results), "method": method,
                "complete_prompt_examples": complete_prompt_examples, "programs": len(outcomes) - missing,
                "not_in_task": missing, "outcome_by_signal": dict(sorted(table.items())),
                "categories": {k: dict(v.most_common()) for k, v in categories.items()}}
    finally:
        task.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="spider")
    p.add_argument("--data", default=None, help="benchmark directory (default: the shared one)")
    p.add_argument("--limit", type=int, default=0, help="first N examples of train + test (0: all)")
    p.add_argument("--stdlib-only", action="store_true", help="BigCodeBench: standard-library tasks only")
    p.add_argument("--programs", default=None, help="a compare.py results.json: assess its recorded programs")
    p.add_argument("--method", default="hero_o", help="with --programs: whose programs (default hero_o)")
    p.add_argument("--complete-prompt-examples", action="store_true",
                   help="with --programs, BigCodeBench: examples from the complete_prompt docstring")
    p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/hero_t_signals_<task>.json)")
    a = p.parse_args(argv)
    if a.programs:
        result = measure_recorded(a.task, a.data, a.stdlib_only, Path(a.programs), a.method, a.complete_prompt_examples)
        tag = "_complete_prompt" if a.complete_prompt_examples else ""
        out = Path(a.out or Path(__file__).parent / "results" / f"hero_t_signals_{a.task}_{Path(a.programs).stem}{tag}.json")
    else:
        result = measure(a.task, a.data, a.limit, a.stdlib_only)
        out = Path(a.out or Path(__file__).parent / "results" / f"hero_t_signals_{a.task}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    if a.programs:
        print(f"{result['task']}: {result['programs']} recorded {result['method']} programs from {result['results']}")
        print("  metric outcome / HERO-T signal:", result["outcome_by_signal"])
        print("  categories:", result["categories"])
        print(f"  written to {out}")
        return 0
    print(f"{result['task']}: {result['assessed']} reference programs assessed; suspect {result['reference_suspect']}, "
          f"failing {result['reference_failing']}")
    print("  suspect by category:", result["suspect_by_category"])
    print("  failing by category:", result["failing_by_category"])
    print(f"  written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
