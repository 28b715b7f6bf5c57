"""Side-by-side comparison: seed prompt, HERO-O, HERO-O + HERO-T, GEPA, MIPROv2 and ReAct on one task.

All methods share the task LM, the reflection LM, the optimization data (train + val), the evaluation
set, the seed and the rollout budget (HERO-O and GEPA get exactly GEPA's `auto` budget, or
``--max-metric-calls``; MIPROv2 gets the zero-shot setting whose expected rollouts come closest, and
its actual rollouts are counted). Per-example outcomes of every method are saved, so paired
differences and bootstrap intervals can be recomputed from the JSON.

Resumable: each method's result is written to ``<out>/methods/<method>.json`` as soon as it finishes
and is not re-run; HERO-O and GEPA keep their own checkpoints under ``<out>/logs/``.

Examples::

    python benchmarks/compare.py --task spider --simulate --train-size 40 --test-size 40 --out /tmp/sim
    python benchmarks/compare.py --task spider --train-size 60 --test-size 100 --auto light --out runs/spider
    python benchmarks/compare.py --task bigcodebench --stdlib-only --lm openai/gpt-4o-mini --out runs/bcb
    python benchmarks/compare.py --aggregate runs/s0 runs/s1 runs/s2 --out runs/all   # mean over seeds
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

import dspy_hero
from dspy_hero.bench.accounting import track_usage
from dspy_hero.bench.methods import DEFAULT_METHODS, METHODS, NEEDS, MethodResult, RunContext, run_method
from dspy_hero.bench.report import aggregate, aggregate_markdown, write_comparison
from dspy_hero.files import write_json_atomic as write_json
from dspy_hero.lm.local import local_spec
from dspy_hero.tasks.splits import cap, split_by_fraction, split_by_group

log = logging.getLogger("hero.compare")


@dataclass
class CompareConfig:
    task: str = "spider"
    data: str | None = None
    train_size: int | None = 40
    test_size: int | None = 40
    val_fraction: float = 0.5
    auto: str | None = "light"
    max_metric_calls: int | None = None
    threads: int = 4
    seed: int = 0
    split_seed: int = 0
    methods: Sequence[str] = DEFAULT_METHODS
    out: str = "compare_out"
    lm: str | None = None
    reflection_lm: str | None = None
    simulate: bool = False
    deterministic: bool = True  # embedded model: one slot, pinned shared-prefix reuse, so re-runs repeat themselves
    stdlib_only: bool = False
    refine_only_failing: bool = False  # HERO-T: leave programs that execute cleanly alone (CPU time)
    refine_repairs: bool = True  # HERO-T: programmatic repairs of failing programs before the reviser
    training_references: bool = False  # HERO-O reflects with its TRAINING cases' reference programs
    rounds: int | None = None  # HERO-O's T (None: its `auto` level's); a small budget funds one well-powered test
    candidates: int | None = None  # HERO-O's K per round (None: its `auto` level's)
    ves_repetitions: int = 5
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    aggregate: Sequence[str] | None = None
    command: str = ""


# ----------------------------------------------------------------------------------------- setup

def load_task(config: CompareConfig):
    from dspy_hero.tasks import registry  # benchmarks and built-in tasks (builtin-sql, ...) are registered
    kwargs = dict(config.task_kwargs)
    if config.data:
        kwargs["data_dir"] = config.data
    if config.stdlib_only:
        kwargs["stdlib_only"] = True
    kwargs.setdefault("split_seed", config.split_seed)
    return registry.load_task(config.task, **kwargs)


def optimization_pools(task, train_size: int | None, val_fraction: float, seed: int):
    """(train, val): the optimization pool capped to `train_size`, split by group when possible."""
    pool = cap(task.train, train_size, seed, task.group_key)
    groups = {str(ex[task.group_key]) for ex in pool} if task.group_key else set()
    if len(groups) >= 2:
        train, val = split_by_group(pool, task.group_key, val_fraction, seed=seed)
        how = f"by {task.group_key}"
    else:
        train, val = split_by_fraction(pool, 1.0 - val_fraction, seed=seed)
        how = "by example"
    return train, val, how


# Environment references HERO-T and ReAct need at test time (metrics/base.py allows them as inputs;
# GenerateProgram still shows the LM only its own signature fields).
ENV_REFS = ("db_path", "db_id", "graph", "graph_source", "entry_point", "code_prompt")


def with_env_refs(examples: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Examples whose environment references are marked as inputs (a task may have left them out)."""
    out = []
    for ex in examples:
        current = list(ex.inputs().keys())
        keys = current + [k for k in ENV_REFS if k in ex and k not in current]
        out.append(ex.with_inputs(*keys))
    return out


def make_lms(config: CompareConfig, examples: Sequence[dspy.Example]):
    """(task LM, reflection LM, their names). Distinct objects, so their usage is counted apart."""
    if config.simulate:
        from dspy_hero.bench.simulate import simulated_lms

        if any(ex.get("gold_sql") is None for ex in examples):
            raise ValueError("--simulate scripts SQL tasks only (spider, bird): its world is made of SQL skills")

        task_lm, refl_lm, _ = simulated_lms(examples)
        return track_usage(task_lm), track_usage(refl_lm), "scripted simulation (task)", "scripted simulation (reflection)"
    def embedded(spec: str) -> dspy.LM:
        from dspy_hero.lm.local import local_lm
        from dspy_hero.lm.server import default_threads

        # Python tasks run a sandbox per rollout: while the model serves one thread, up to threads-1
        # sandboxes compute beside it, so the model leaves them those cores (default_threads' rule).
        sandboxes = max(0, config.threads - 1) if any("entry_point" in ex for ex in examples[:1]) else 0
        return local_lm(parallel=max(1, config.threads), deterministic=config.deterministic,
                        threads=default_threads(neighbours=sandboxes), **local_spec(spec))

    task_spec = config.lm or "local"
    # provider defaults for a hosted model (reasoning models reject temperature=0)
    task_lm = embedded(task_spec) if is_local(task_spec) else dspy.LM(task_spec, cache=False)
    refl_spec = config.reflection_lm
    if refl_spec is None or refl_spec == task_spec:
        refl_lm = task_lm.copy()
    else:  # e.g. a 1.5B reflector teaching a 0.5B task model: --lm local:0.5b --reflection-lm local:1.5b
        refl_lm = embedded(refl_spec) if is_local(refl_spec) else dspy.LM(refl_spec, cache=False)
    return track_usage(task_lm), track_usage(refl_lm), task_lm.model, refl_lm.model


def is_local(spec: str) -> bool:
    """'local', 'local:0.5b' or 'local:/path/model.gguf': the embedded model (as the `hero` CLI reads it)."""
    return local_spec(spec) is not None


def resolve_budget(config: CompareConfig, program: dspy.Module, train, val) -> tuple[int, str]:
    if config.max_metric_calls is not None:
        return int(config.max_metric_calls), "--max-metric-calls"
    from dspy_hero.optimizer.budget import gepa_auto_budget

    n = gepa_auto_budget(config.auto or "light", len(program.named_predictors()), len(train), len(val))
    return n, f"dspy.GEPA auto={config.auto or 'light'} on this program and data"


def ordered_methods(methods: Sequence[str]) -> list[str]:
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    wanted = list(dict.fromkeys(methods))
    for m in list(wanted):
        if m in NEEDS and NEEDS[m] not in wanted:
            wanted.insert(0, NEEDS[m])  # HERO-T and HERO-O+ReAct start from HERO-O's prompt
    return [m for m in METHODS if m in wanted]


def code_version(root: Path = Path(__file__).resolve().parent.parent) -> str:
    """The commit of the checkout that runs the comparison, with "+changes" when tracked files under
    `dspy_hero/` or `benchmarks/` differ from it (new result files do not count), so a results file
    says which code produced each row (a resumed run may mix code versions; the fingerprint below
    deliberately ignores it). Outside a git checkout: the installed package's version."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                              check=True, stdin=subprocess.DEVNULL).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "dspy_hero", "benchmarks")
    except (OSError, subprocess.SubprocessError):
        return f"dspy-hero {dspy_hero.__version__} (not a git checkout)"
    return head + ("+changes" if changed else "")


def fingerprint(meta: dict[str, Any]) -> dict[str, Any]:
    """What must match for a resumed run to reuse saved method results."""
    keys = ("task", "task_lm", "reflection_lm", "seed", "budget", "train_ids", "val_ids", "test_ids", "simulate",
            "training_references", "hero_rounds", "hero_candidates")
    return {k: meta.get(k) for k in keys}


# Settings that only some methods read: a saved result of such a method is reused only when it ran with
# the values asked for now (so a run can grow a HERO-T row with another --refine-only-failing than its
# HERO-O row, without a second run directory), and it is re-run otherwise.
METHOD_SETTINGS = {"hero_o_t": (("only_failing", "refine_only_failing"), ("repairs", "refine_repairs")),
                   "hero_o_t_paper": (("only_failing", "refine_only_failing"),)}


def stale_setting(method: str, saved: MethodResult, config: CompareConfig) -> str | None:
    """Why a saved result of `method` does not answer this invocation (None: it does)."""
    if method not in METHOD_SETTINGS:
        return None
    for recorded, option in METHOD_SETTINGS[method]:
        wanted = getattr(config, option)
        if saved.extras.get(recorded) != wanted:
            return f"it ran with {option}={saved.extras.get(recorded)}, this invocation asks for {wanted}"
    return None


def hero_o_args(config: CompareConfig) -> dict[str, Any]:
    """HeroOptimizer settings this invocation gives beyond the budget (the rest are its defaults)."""
    given = {"training_references": True if config.training_references else None,
             "num_rounds": config.rounds, "num_candidates": config.candidates}
    return {k: v for k, v in given.items() if v is not None}


# ------------------------------------------------------------------------------------------- run

def run_comparison(config: CompareConfig) -> dict[str, Any]:
    """Run (or resume) the comparison; returns the results dictionary also written to results.json."""
    out = Path(config.out)
    (out / "methods").mkdir(parents=True, exist_ok=True)
    task = load_task(config)
    try:
        # Splits and pools depend on split_seed only, so runs with different seeds share them (paper, App. A).
        train, val, pool_how = optimization_pools(task, config.train_size, config.val_fraction, config.split_seed)
        test = cap(task.test, config.test_size, config.split_seed, task.group_key)
        train, val, test = with_env_refs(train), with_env_refs(val), with_env_refs(test)
        task_lm, refl_lm, task_name, refl_name = make_lms(config, [*train, *val, *test])
        budget, budget_source = resolve_budget(config, task.make_program(), train, val)
        meta = {
            "task": task.name, "split_note": task.split_note, "pools": f"optimization pool split {pool_how} "
            f"(val fraction {config.val_fraction})", "sizes": {"train": len(train), "val": len(val), "test": len(test)},
            "task_lm": task_name, "reflection_lm": refl_name, "seed": config.seed, "split_seed": config.split_seed,
            "budget": budget,
            "budget_source": budget_source, "simulate": config.simulate, "threads": config.threads,
            "refine_only_failing": config.refine_only_failing,
            **({} if config.refine_repairs else {"refine_repairs": False}),
            **({"training_references": True} if config.training_references else {}),
            **({"hero_rounds": config.rounds} if config.rounds is not None else {}),
            **({"hero_candidates": config.candidates} if config.candidates is not None else {}),
            "train_ids": [e.example_id for e in train], "val_ids": [e.example_id for e in val],
            "test_ids": [e.example_id for e in test], "command": config.command, "code": code_version(),
            "machine": f"{platform.node()} {platform.platform()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        }
        meta_path = out / "meta.json"
        if meta_path.exists():
            old = json.loads(meta_path.read_text(encoding="utf-8"))
            if fingerprint(old) != fingerprint(meta):
                diff = [k for k in fingerprint(meta) if fingerprint(old).get(k) != fingerprint(meta).get(k)]
                raise ValueError(f"{out} holds a run with different settings ({', '.join(diff)}); use a new --out")
        write_json(meta_path, meta)

        ctx = RunContext(task=task, train=train, val=val, test=test, task_lm=task_lm, reflection_lm=refl_lm,
                         budget=budget, threads=config.threads, seed=config.seed, out_dir=out,
                         ves_repetitions=config.ves_repetitions, refine_only_failing=config.refine_only_failing,
                         refine_repairs=config.refine_repairs,
                         optimizer_args=hero_o_args(config))
        results: dict[str, MethodResult] = {}
        order = ordered_methods(config.methods)
        for method in order:
            path = out / "methods" / f"{method}.json"
            if path.exists():
                saved = MethodResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
                stale = stale_setting(method, saved, config)
                if stale:
                    log.info("%s: saved result not reused (%s): running it again", method, stale)
                elif saved.status == "done":
                    log.info("%s: already done, reusing %s", method, path)
                    results[method] = saved
                    ctx.instructions[method] = saved.instructions
                    ctx.outcomes[method] = saved.outcomes  # HERO-O + HERO-T starts from HERO-O's programs
                    if saved.extras.get("program_fingerprint"):  # a later method with the same program reuses it
                        ctx.fingerprints[method] = saved.extras["program_fingerprint"]
                    continue
            log.info("%s: running (budget %d rollouts)", method, budget)
            results[method] = run_method(ctx, method)
            results[method].extras["code"] = meta["code"]
            write_json(path, results[method].to_dict())
            log.info("%s: %s pass@1=%.3f", method, results[method].status, results[method].pass_at_1)
        for method in METHODS:  # methods finished by earlier invocations stay in the report
            path = out / "methods" / f"{method}.json"
            if method not in results and path.exists():
                saved = MethodResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
                if saved.status == "done":
                    results[method] = saved
        return write_comparison(out, meta, results, [m for m in METHODS if m in results])
    finally:
        task.close()


# ------------------------------------------------------------------------------------------- CLI

def parse_args(argv: Sequence[str] | None = None) -> tuple[CompareConfig, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="spider", help="bird | spider | cypherbench | bigcodebench | dscodebench | builtin-sql | ...")
    p.add_argument("--data", default=None, help="benchmark directory in the official layout (default: ../shared/benchmarks/<task>)")
    p.add_argument("--train-size", type=int, default=40, help="cap on the optimization pool (train + val)")
    p.add_argument("--test-size", type=int, default=40, help="cap on the evaluation set")
    p.add_argument("--val-fraction", type=float, default=0.5)
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--auto", choices=["light", "medium", "heavy"], default=None)
    budget.add_argument("--max-metric-calls", type=int, default=None)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="run seed (optimizers, bootstrap); splits use --split-seed")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the fixed splits and pools, shared by all runs")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (default: all but hero_o_t_paper)")
    p.add_argument("--out", default="compare_out")
    p.add_argument("--lm", default=None, help="task LM: 'local' (default, the embedded 1.5B model), 'local:0.5b', "
                   "'local:/path/model.gguf' or a litellm model string")
    p.add_argument("--reflection-lm", default=None, help="the same kinds of value (default: a copy of the task LM)")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                   help="embedded model only: serve requests in parallel slots with free prefix reuse (outputs "
                        "then vary between runs at temperature 0; the deterministic default also reuses prefixes)")
    p.add_argument("--simulate", action="store_true", help="scripted task and reflection LMs over real execution (seconds)")
    p.add_argument("--stdlib-only", action="store_true", help="BigCodeBench: only tasks whose libraries are all stdlib")
    p.add_argument("--refine-only-failing", action="store_true",
                   help="HERO-T: refine only programs whose execution shows a problem (paper: every program; "
                        "saves CPU time with local models; recorded in meta.json)")
    p.add_argument("--no-repairs", dest="refine_repairs", action="store_false",
                   help="HERO-T: no programmatic repairs of failing programs (every revision from the reviser LM, "
                        "as in the paper; hero_o_t_paper never repairs)")
    p.add_argument("--training-references", action="store_true",
                   help="HERO-O: show the reflector its TRAINING cases' reference programs and their diff "
                        "(label-free evidence otherwise; recorded in meta.json)")
    p.add_argument("--rounds", type=int, default=None,
                   help="HERO-O rounds T (default: its auto level's, 5 for light). Each round holds alpha/T, split over its "
                        "K candidates (half to the first by default), so at small budgets fewer rounds and candidates give the one affordable test power")
    p.add_argument("--candidates", type=int, default=None, help="HERO-O candidates K per round (default: 4 for light)")
    p.add_argument("--ves-repetitions", type=int, default=5, help="timing repetitions for SQL VES (0: skip VES)")
    p.add_argument("--aggregate", nargs="+", default=None, metavar="RUN_DIR",
                   help="instead of running: combine finished runs (e.g. one per seed) into <out>/aggregate.{json,md}")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    return CompareConfig(
        task=a.task, data=a.data, train_size=a.train_size, test_size=a.test_size, val_fraction=a.val_fraction,
        auto=a.auto if a.max_metric_calls is None else None, max_metric_calls=a.max_metric_calls, threads=a.threads,
        seed=a.seed, split_seed=a.split_seed, methods=[m.strip() for m in a.methods.split(",") if m.strip()], out=a.out, lm=a.lm,
        reflection_lm=a.reflection_lm, simulate=a.simulate, stdlib_only=a.stdlib_only, deterministic=a.deterministic,
        refine_only_failing=a.refine_only_failing, refine_repairs=a.refine_repairs,
        training_references=a.training_references,
        rounds=a.rounds, candidates=a.candidates,
        ves_repetitions=a.ves_repetitions, aggregate=a.aggregate,
        command="python benchmarks/compare.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
    ), a.verbose


def aggregate_runs(run_dirs: Sequence[str], out: str) -> dict[str, Any]:
    """Combine finished runs (their results.json) into <out>/aggregate.json and aggregate.md."""
    runs = []
    for d in run_dirs:
        path = Path(d) / "results.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: run the comparison there first")
        runs.append(json.loads(path.read_text(encoding="utf-8")))
    tasks = {r["meta"]["task"] for r in runs}
    if len(tasks) > 1:
        raise ValueError(f"runs are on different tasks {sorted(tasks)}; aggregate one task at a time")
    agg = aggregate(runs)
    write_json(Path(out) / "aggregate.json", agg)
    (Path(out) / "aggregate.md").write_text(aggregate_markdown(agg, METHODS), encoding="utf-8")
    return agg


def main(argv: Sequence[str] | None = None) -> int:
    config, verbose = parse_args(argv)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if config.aggregate:
        aggregate_runs(config.aggregate, config.out)
        sys.stdout.write((Path(config.out) / "aggregate.md").read_text(encoding="utf-8"))
        return 0
    data = run_comparison(config)
    sys.stdout.write((Path(config.out) / "results.md").read_text(encoding="utf-8"))
    failed = [m for m, r in data["methods"].items() if r["status"] != "done"]
    return 1 if failed and len(failed) == len(data["methods"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
