"""The staged, resumable run behind `hero demo` (and reused by `optimize` / `evaluate` / `refine`).

A thin staging layer over the harness (`dspy_hero.bench.methods`): every evaluation, the HERO-O run
and the HERO-T refiner are the harness's own, so the CLI and `benchmarks/compare.py` build them the
same way. What is added here is only the run directory: each stage writes its result there as soon as
it finishes; running again skips finished stages and HERO-O resumes from its own log directory, so
Ctrl-C never loses paid work.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.bench.methods import (
    MethodResult,
    answered_from,
    Progress,
    RunContext,
    evaluate,
    evaluated_as,
    example_key,
    hero_t_refiner,
    instructions_of,
    optimize_hero_o,
)
from dspy_hero.bench.run_report import write_run_report
from dspy_hero.files import write_json_atomic
from dspy_hero.tasks.base import Task

logger = logging.getLogger("dspy_hero.cli")


@dataclass
class RunConfig:
    out_dir: Path
    max_metric_calls: int | None = None
    auto: str | None = None
    num_rounds: int = 5
    num_candidates: int = 4
    refine_budget: int = 3
    refine_reask: bool = True  # HERO-T re-asks a reviser whose answer is no revision (`HeroRefine.reask`)
    refine_only_failing: bool = False  # HERO-T only on programs whose execution shows a problem
    threads: int = 1
    seed: int = 0
    test_limit: int | None = None
    log_dir: Path | None = None  # HERO-O's resumable log; default OUT/hero_o_log
    extra_optimizer_args: dict[str, Any] = field(default_factory=dict)


STAGE_LABELS = {"seed": "seed prompt", "hero_o": "HERO-O", "hero_o_hero_t": "HERO-O + HERO-T"}
# The order stages run in (demo) and then `hero evaluate` / `hero refine`'s names; others follow by name.
REPORT_ORDER = ("seed", "hero_o", "hero_o_hero_t", "program", "refined", "seed_refined")


def run_context(task: Task, lm: Any, reflection_lm: Any, config: RunConfig,
                progress: Progress | None = None) -> RunContext:
    """The harness context of a CLI run: HERO-O optimizes on the task's whole optimization split (it
    draws its own pools, no separate valset) and evaluations skip VES, which the CLI does not report."""
    out = Path(config.out_dir)
    test = task.test if config.test_limit is None else task.test[: config.test_limit]
    return RunContext(
        task=task, train=list(task.train), val=[], test=list(test), task_lm=lm, reflection_lm=reflection_lm or lm,
        budget=config.max_metric_calls, auto=config.auto, threads=config.threads, seed=config.seed, out_dir=out,
        ves_repetitions=0, refine_only_failing=config.refine_only_failing, refine_budget=config.refine_budget,
        refine_reask=config.refine_reask,
        hero_o_log_dir=Path(config.log_dir) if config.log_dir else out / "hero_o_log", progress=progress,
        optimizer_args={"num_rounds": config.num_rounds, "num_candidates": config.num_candidates,
                        **config.extra_optimizer_args})


class StagedRun:
    """seed eval → HERO-O → eval → HERO-T eval, each stage cached in `out_dir`."""

    def __init__(self, task: Task, lm: Any, reflection_lm: Any, config: RunConfig, progress: Progress | None = None,
                 announce: Callable[[str], None] | None = None):
        self.task = task
        self.config = config
        self.announce = announce or (lambda line: None)  # one line as each stage starts (the demo prints it)
        self.out = Path(config.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ctx = run_context(task, lm, reflection_lm, config, progress)

    @property
    def test(self) -> list[dspy.Example]:
        return self.ctx.test

    @property
    def progress(self) -> Progress | None:
        return self.ctx.progress

    @progress.setter
    def progress(self, value: Progress | None) -> None:
        self.ctx.progress = value

    # -- stages -------------------------------------------------------------------------------------
    def evaluate(self, name: str, program: dspy.Module) -> MethodResult:
        path = self.out / f"eval_{name}.json"
        key = self.fingerprint(program)
        label = STAGE_LABELS.get(name, name)
        if path.exists():
            saved = read_stage(path)
            if saved.extras.get("fingerprint") == key:
                logger.info("stage %s already done; reusing %s", name, path)
                self.announce(f"{label}: already evaluated, reusing {path.name}")
                self.ctx.outcomes[name] = saved.outcomes
                if saved.extras.get("program_fingerprint"):  # a later stage with the same program reuses it
                    self.ctx.fingerprints[name] = saved.extras["program_fingerprint"]
                return saved
            logger.warning("%s was written for another task, split or program (or by an older version); "
                           "evaluating again", path)
        same = evaluated_as(self.ctx, program)  # e.g. HERO-O returned the seed program: the harness reuses it
        self.announce(f"{label}: the same program as {STAGE_LABELS.get(same, same)}; reusing its evaluation"
                      if same is not None else f"{label}: evaluating on {len(self.test)} held-out examples")
        settings = refine_settings(program)
        extras = {"fingerprint": key, **({"hero_t": settings} if settings else {})}
        result = evaluate(self.ctx, program, MethodResult(method=name, label=label, extras=extras))
        write_json_atomic(path, result.to_dict())
        return result

    def fingerprint(self, program: dspy.Module) -> str:
        """What a cached evaluation must match to be reused: the task, the evaluated examples, the
        program's instructions and HERO-T's settings (a re-run with another --task, --limit, --program
        or --refine-all starts afresh)."""
        ids = [example_key(ex, i) for i, ex in enumerate(self.test)]
        prompts = instructions_of(program)
        text = json.dumps([self.task.name, type(program).__name__, ids, prompts, refine_settings(program)],
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def optimize(self) -> dspy.Module:
        program_path = self.out / "hero_o_program.json"
        if program_path.exists():
            self.announce(f"HERO-O: already optimized, reusing {program_path.name}")
            program = self.task.make_program()
            program.load(str(program_path))
            return program
        budget = self.ctx.budget if self.ctx.budget is not None else f"auto={self.ctx.auto or 'light'}"
        self.announce(f"HERO-O: optimizing on {len(self.ctx.train)} training examples ({budget} rollouts, "
                      f"{self.config.num_rounds} round(s) of up to {self.config.num_candidates} candidate(s); "
                      "resumable from its log)")
        result = MethodResult(method="hero_o", label=STAGE_LABELS["hero_o"])
        optimized, detailed = optimize_hero_o(self.ctx, result)
        detailed["wall_s"] = result.wall_s_optimization
        detailed["task_lm_calls_measured"] = result.lm_optimization.get("task", {}).get("calls", 0)
        write_json_atomic(self.out / "hero_o_result.json", detailed)
        optimized.save(str(program_path))
        return optimized

    def refiner(self, generator: dspy.Module) -> dspy.Module:
        """HERO-T around the HERO-O program, starting from the programs its evaluation stage produced
        (when that stage ran on these examples), as the harness does."""
        return hero_t_refiner(self.ctx, answered_from(self.ctx, generator, "hero_o"))

    # -- whole run ----------------------------------------------------------------------------------
    def run_all(self) -> dict[str, Any]:
        seed_report = self.evaluate("seed", self.task.make_program())
        optimized = self.optimize()
        hero_o_report = self.evaluate("hero_o", optimized)
        hero_t_report = self.evaluate("hero_o_hero_t", self.refiner(optimized))
        return self.write(seed_report, hero_o_report, hero_t_report)

    def write(self, *reports: MethodResult) -> dict[str, Any]:
        hero_path = self.out / "hero_o_result.json"
        hero = json.loads(hero_path.read_text()) if hero_path.exists() else {}
        notes = [f"task: {self.task.name}; split: {self.task.split_note}", f"test examples: {len(self.test)}"]
        return write_run_report(self.out, f"HERO on {self.task.name}", list(reports), hero, notes)


def refine_settings(program: dspy.Module) -> dict[str, Any]:
    """The HERO-T settings a stage's result depends on (empty for a plain program)."""
    return {k: getattr(program, k) for k in ("budget", "only_failing", "max_demos", "reask") if hasattr(program, k)}


def read_stage(path: Path) -> MethodResult:
    """One evaluation stage file. Files of an older version (a bare EvalReport: outcomes by index, one
    LM's usage) are read as such, without their fingerprint, so a re-run evaluates them again while
    `hero report` can still render them."""
    data = json.loads(path.read_text())
    if "method" in data:
        return MethodResult.from_dict(data)
    name = str(data.get("name") or path.stem[len("eval_"):])
    outcomes = [{"example_id": f"#{o['index']}", **o} for o in data.get("outcomes", [])]
    scores = [float(o["score"]) for o in outcomes]
    return MethodResult(
        method=name, label=STAGE_LABELS.get(name, name), outcomes=outcomes,
        pass_at_1=sum(s >= 1.0 for s in scores) / max(1, len(scores)), wall_s_evaluation=float(data.get("wall_s", 0.0)),
        lm_evaluation={"task": {"calls": int(data.get("lm_calls", 0)), "input_tokens": int(data.get("input_tokens", 0)),
                                "output_tokens": int(data.get("output_tokens", 0))}})


def read_run_dir(out: Path) -> tuple[list[MethodResult], dict[str, Any]]:
    """The evaluations (eval_*.json) and HERO-O result (hero_o_result.json) a run directory holds, whichever
    command wrote it: `demo` (all), `optimize` (HERO-O only), `evaluate` / `refine` (evaluations only)."""
    found = {p.name[len("eval_"):-len(".json")]: p for p in out.glob("eval_*.json")}
    names = [n for n in REPORT_ORDER if n in found] + sorted(n for n in found if n not in REPORT_ORDER)
    reports = [read_stage(found[n]) for n in names]
    hero_path = out / "hero_o_result.json"
    hero = json.loads(hero_path.read_text()) if hero_path.exists() else {}
    return reports, hero
