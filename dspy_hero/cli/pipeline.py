"""The staged, resumable run behind `hero demo` (and reused by `optimize` / `evaluate` / `refine`).

Each stage writes its result into the run directory as soon as it finishes; running again skips
finished stages and HERO-O resumes from its own log directory, so Ctrl-C never loses paid work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import dspy

from dspy_hero.cli.report import MethodRow, write_json_atomic, write_report
from dspy_hero.tasks.base import Task
from dspy_hero.tasks.evaluate import EvalReport, evaluate_program, lm_usage

logger = logging.getLogger("dspy_hero.cli")


@dataclass
class RunConfig:
    out_dir: Path
    max_metric_calls: int | None = None
    auto: str | None = None
    num_rounds: int = 5
    num_candidates: int = 4
    refine_budget: int = 3
    refine_only_failing: bool = False  # HERO-T only on programs whose execution shows a problem
    threads: int = 1
    seed: int = 0
    test_limit: int | None = None
    log_dir: Path | None = None  # HERO-O's resumable log; default OUT/hero_o_log
    extra_optimizer_args: dict[str, Any] = field(default_factory=dict)


Progress = Callable[[str, int], Callable[[int], None]]  # (label, total) -> advance(n)


def _no_progress(label: str, total: int) -> Callable[[int], None]:
    return lambda n: None


def per_round_fix_break(hero_result: dict[str, Any]) -> list[tuple[int, int]]:
    """(fixes, breaks) adopted in each round, from HeroResult.cumulative_fix_break's running sums."""
    out, prev_f, prev_b = [], 0, 0
    for entry in hero_result.get("cumulative_fix_break", []):
        f, b = entry.get("adopted_fixes", 0), entry.get("adopted_breaks", 0)
        out.append((f - prev_f, b - prev_b))
        prev_f, prev_b = f, b
    return out


class StagedRun:
    """seed eval → HERO-O → eval → HERO-T eval, each stage cached in `out_dir`."""

    def __init__(self, task: Task, lm: Any, reflection_lm: Any, config: RunConfig, progress: Progress | None = None,
                 announce: Callable[[str], None] | None = None):
        self.task = task
        self.announce = announce or (lambda line: None)  # one line as each stage starts (the demo prints it)
        self.lm = lm
        self.reflection_lm = reflection_lm or lm
        self.config = config
        self.progress = progress or _no_progress
        self.out = Path(config.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        test = task.test if config.test_limit is None else task.test[: config.test_limit]
        self.test = test

    # -- stages -------------------------------------------------------------------------------------
    def evaluate(self, name: str, program: dspy.Module) -> EvalReport:
        path = self.out / f"eval_{name}.json"
        key = self.fingerprint(program)
        if path.exists():
            saved = EvalReport.from_dict(json.loads(path.read_text()))
            if saved.extras.get("fingerprint") == key:
                logger.info("stage %s already done; reusing %s", name, path)
                self.announce(f"{METHOD_LABELS.get(name, name)}: already evaluated, reusing {path.name}")
                return saved
            logger.warning("%s was written for another task, split or program; evaluating again", path)
        self.announce(f"{METHOD_LABELS.get(name, name)}: evaluating on {len(self.test)} held-out examples")
        advance = self.progress(f"evaluate {name}", len(self.test))
        report = evaluate_program(program, self.test, self.task.metric, name=name, lm=self.lm,
                                  num_threads=self.config.threads, progress=advance)
        report.extras["fingerprint"] = key
        write_json_atomic(path, report.to_dict())
        return report

    def fingerprint(self, program: dspy.Module) -> str:
        """What a cached evaluation must match to be reused: the task, the evaluated examples, the
        program's instructions and HERO-T's settings (a re-run with another --task, --limit, --program
        or --refine-all starts afresh)."""
        ids = [str(getattr(ex, "example_id", None) or ex.get("question") or ex.get("prompt") or i)
               for i, ex in enumerate(self.test)]
        prompts = {n: p.signature.instructions for n, p in program.named_predictors()}
        settings = {k: getattr(program, k) for k in ("budget", "only_failing", "max_demos") if hasattr(program, k)}
        text = json.dumps([self.task.name, type(program).__name__, ids, prompts, settings], sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def optimize(self) -> dspy.Module:
        from dspy_hero.optimizer.hero import HeroOptimizer

        program_path = self.out / "hero_o_program.json"
        program = self.task.make_program()
        if program_path.exists():
            self.announce(f"HERO-O: already optimized, reusing {program_path.name}")
            program.load(str(program_path))
            return program
        budget: dict[str, Any] = {}
        if self.config.max_metric_calls is not None:
            budget["max_metric_calls"] = self.config.max_metric_calls
        else:
            budget["auto"] = self.config.auto or "light"
        optimizer = HeroOptimizer(
            metric=self.task.metric,
            reflection_lm=self.reflection_lm,
            num_threads=self.config.threads,
            num_rounds=self.config.num_rounds,
            num_candidates=self.config.num_candidates,
            group_key=self.task.group_key,
            log_dir=str(self.config.log_dir or self.out / "hero_o_log"),
            seed=self.config.seed,
            **budget,
            **self.config.extra_optimizer_args,
        )
        self.announce(f"HERO-O: optimizing on {len(self.task.train)} training examples "
                      f"({self.config.max_metric_calls if self.config.max_metric_calls is not None else 'auto=' + str(self.config.auto or 'light')} "
                      f"rollouts, {self.config.num_rounds} round(s) of up to {self.config.num_candidates} candidate(s); "
                      "resumable from its log)")
        start = time.perf_counter()
        calls_before = lm_usage(self.lm)
        with dspy.context(lm=self.lm):
            optimized = optimizer.compile(program, trainset=self.task.train)
        result = optimized.detailed_results
        result_dict = result.to_dict()
        result_dict["wall_s"] = time.perf_counter() - start
        result_dict["task_lm_calls_measured"] = lm_usage(self.lm)[0] - calls_before[0]
        write_json_atomic(self.out / "hero_o_result.json", result_dict)
        optimized.save(str(program_path))
        return optimized

    def refiner(self, generator: dspy.Module) -> dspy.Module:
        from dspy_hero.refine.demos import verified_demo_bank
        from dspy_hero.refine.module import HeroRefine

        # The task's environments, for refining: they share the metric's engine (a Cypher server) and
        # are reused per database or graph, where HeroRefine's own defaults would start engines of
        # their own. The demos are verified by the task metric, as in the harness and the notebooks.
        demos = verified_demo_bank(self.task.train, self.task.metric)
        return HeroRefine(generator=generator, environment=self.task.environment_for, demos=demos,
                          budget=self.config.refine_budget, only_failing=self.config.refine_only_failing)

    # -- whole run ----------------------------------------------------------------------------------
    def run_all(self) -> dict[str, Any]:
        seed_report = self.evaluate("seed", self.task.make_program())
        optimized = self.optimize()
        hero_o_report = self.evaluate("hero_o", optimized)
        hero_t_report = self.evaluate("hero_o_hero_t", self.refiner(optimized))
        return self.write(seed_report, hero_o_report, hero_t_report)

    def write(self, *reports: EvalReport) -> dict[str, Any]:
        hero_path = self.out / "hero_o_result.json"
        hero = json.loads(hero_path.read_text()) if hero_path.exists() else {}
        notes = [f"task: {self.task.name}; split: {self.task.split_note}", f"test examples: {len(self.test)}"]
        return write_run_report(self.out, f"HERO on {self.task.name}", list(reports), hero, notes)


METHOD_LABELS = {"seed": "seed prompt", "hero_o": "HERO-O", "hero_o_hero_t": "HERO-O + HERO-T"}
# The order stages run in (demo) and then `hero evaluate` / `hero refine`'s names; others follow by name.
REPORT_ORDER = ("seed", "hero_o", "hero_o_hero_t", "program", "refined", "seed_refined")


def method_rows(reports: list[EvalReport], hero: dict[str, Any]) -> list[MethodRow]:
    """One table row per evaluation; rows of HERO-O programs carry its rollouts and fix:break."""
    fix_break = f"{hero.get('adopted_fixes', 0)}:{hero.get('adopted_breaks', 0)}" if hero else None
    seed = next((r for r in reports if r.name == "seed"), None)
    rows = []
    for report in reports:
        is_hero = report.name.startswith("hero_o")
        rows.append(MethodRow(
            method=METHOD_LABELS.get(report.name, report.name),
            pass_at_1=report.pass_at_1,
            n=len(report.outcomes),
            rollouts=hero.get("total_metric_calls") if is_hero else None,
            lm_calls=report.lm_calls,
            tokens=report.input_tokens + report.output_tokens,
            wall_s=report.wall_s,
            fix_break=fix_break if is_hero else None,
            vs_seed=vs_seed(seed, report) if seed is not None and report is not seed else None,
        ))
    return rows


def vs_seed(seed: EvalReport, other: EvalReport) -> str | None:
    """"fixes:breaks" of `other` against the seed on the examples both evaluated (by index: the same
    held-out list), or None when they evaluated different numbers of examples."""
    if len(seed.outcomes) != len(other.outcomes):
        return None
    fixes = sum(o.score > s.score for s, o in zip(seed.outcomes, other.outcomes))
    breaks = sum(o.score < s.score for s, o in zip(seed.outcomes, other.outcomes))
    return f"{fixes}:{breaks}"


def write_run_report(out: Path, title: str, reports: list[EvalReport], hero: dict[str, Any],
                     notes: list[str]) -> dict[str, Any]:
    """results.json, report.md and the plots of a run directory, from its evaluations and HERO-O result."""
    rows = method_rows(reports, hero)
    notes = list(notes)
    for report in reports:
        errors = [o.error for o in report.outcomes if o.error]
        if errors:
            notes.append(f"{report.name}: {len(errors)} example(s) raised and scored 0; first: {errors[0][:200]}")
    if hero:
        notes.append(
            f"HERO-O: {hero.get('total_metric_calls')} rollouts, optimization wall {hero.get('wall_s', 0):.0f}s, "
            f"final prompt ~{hero.get('final_prompt_tokens')} tokens"
        )
    results = {"reports": {r.name: r.to_dict() for r in reports}, "hero_o": hero, "notes": notes}
    paths = write_report(out, title, rows, results, per_round_fix_break(hero) if hero else None)
    return {"rows": rows, "paths": paths, "notes": notes}


def read_run_dir(out: Path) -> tuple[list[EvalReport], dict[str, Any]]:
    """The evaluations (eval_*.json) and HERO-O result (hero_o_result.json) a run directory holds, whichever
    command wrote it: `demo` (all), `optimize` (HERO-O only), `evaluate` / `refine` (evaluations only)."""
    found = {p.name[len("eval_"):-len(".json")]: p for p in out.glob("eval_*.json")}
    names = [n for n in REPORT_ORDER if n in found] + sorted(n for n in found if n not in REPORT_ORDER)
    reports = [EvalReport.from_dict(json.loads(found[n].read_text())) for n in names]
    hero_path = out / "hero_o_result.json"
    hero = json.loads(hero_path.read_text()) if hero_path.exists() else {}
    return reports, hero
