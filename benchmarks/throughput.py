"""How many rollouts per minute the embedded model serves, next to its floor.

One rollout is one seed-program call plus its metric. For each configuration (task seed, model pack,
LM mode, prompt layout, model threads, slots, DSPy threads) a fresh server is started and the same
questions are evaluated once; per rollout we keep the wall time and whether it was *cold* (the first
rollout of its shared-prefix group in run order, so the schema had to be computed) or *warm*.

The floor is what the rollout would cost if the prompt were free: generated tokens per rollout divided
by the generation speed the server measured in the same run. Configurations of one plan run
interleaved (A B A B ...) so that a change in the machine's load hits both alike; the load average is
recorded before and after each run.

    python benchmarks/throughput.py --plan layout      # Spider 1.5B: old vs new layout x default vs deterministic
    python benchmarks/throughput.py --plan threads     # model threads 1 vs 2 (DSPy threads 1)
    python benchmarks/throughput.py --plan slots       # 1 vs 2 slots with 2 DSPy threads (default mode)
    python benchmarks/throughput.py --plan small       # 0.5B Spider and built-in SQL
    python benchmarks/throughput.py --plan bcb         # BigCodeBench seed
    python benchmarks/throughput.py --plan demo        # the demo's seed stage (20 held-out questions)

The demo plan also records the server's prompt rate: a rollout costs its uncached prompt tokens at that
rate plus its generated tokens at the generation rate, and on a 2-core CPU the first can be the larger.

Each run's row is merged into benchmarks/results/throughput.json as soon as it finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).parent))
from determinism import sample_questions

from dspy_hero.lm.local import close_local_servers, engine_of, local_lm, server_of
from dspy_hero.tasks.evaluate import SharedPrefixOrder, evaluate_program, shared_input_field
from dspy_hero.tasks.programs import GenerateProgram
from dspy_hero.tasks.registry import load_task

RESULTS = Path(__file__).parent / "results" / "throughput.json"
OLD_LAYOUT = {"spider": ("question", "db_schema"), "builtin-sql": ("question", "db_schema")}


@dataclass(frozen=True)
class Config:
    task: str = "spider"
    size: str = "1.5b"
    mode: str = "default"  # default | deterministic | from-scratch
    layout: str = "new"  # new: shared inputs first; old: question first
    model_threads: int | None = None  # None: default_threads()
    slots: int = 2
    dspy_threads: int = 1
    databases: int = 2
    per_db: int = 6
    max_tokens: int = 512

    @property
    def label(self) -> str:
        return (f"{self.task}/{self.size}/{self.mode}/{self.layout}-layout/threads={self.model_threads or 'auto'}"
                f"/slots={self.slots if self.mode == 'default' else 1}/dspy={self.dspy_threads}")


class TimedProgram(dspy.Module):
    """The program under test, timing each call (start, seconds, shared-input value)."""

    def __init__(self, inner: dspy.Module, shared_field: str | None):
        super().__init__()
        self.inner = inner
        self.shared_field = shared_field
        self.calls: list[tuple[float, float, str]] = []
        self._lock = threading.Lock()

    def forward(self, **inputs: Any) -> dspy.Prediction:
        start = time.perf_counter()
        try:
            return self.inner(**inputs)
        finally:
            with self._lock:
                self.calls.append((start, time.perf_counter() - start, str(inputs.get(self.shared_field, ""))))


def examples_for(task: Any, cfg: Config) -> list[dspy.Example]:
    if cfg.task in ("spider", "builtin-sql"):
        pool = task.test if cfg.task == "spider" else task.train + task.test
        return sample_questions(pool, cfg.databases, cfg.per_db)
    return list(task.test[: cfg.per_db])


def program_for(task: Any, cfg: Config) -> dspy.Module:
    program = task.make_program()
    if cfg.layout == "old":
        if cfg.task not in OLD_LAYOUT:
            raise ValueError(f"{cfg.task} has a single input: its old and new layouts are the same prompt")
        return GenerateProgram(task.language, OLD_LAYOUT[cfg.task], instructions=program.generate.signature.instructions)
    return program


def make_lm(cfg: Config) -> dspy.LM:
    kwargs: dict[str, Any] = {"size": cfg.size, "threads": cfg.model_threads, "max_tokens": cfg.max_tokens,
                              "allow_download": False}
    if cfg.mode == "default":
        return local_lm(parallel=cfg.slots, **kwargs)
    return local_lm(deterministic=True, reuse_prefix=cfg.mode == "deterministic", **kwargs)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def summary(times: list[float]) -> dict[str, float]:
    if not times:
        return {"n": 0}
    return {"n": len(times), "median_s": round(statistics.median(times), 2), "p90_s": round(pct(times, 0.9), 2)}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def measure(cfg: Config, tasks: dict[str, Any]) -> dict[str, Any]:
    task = tasks.setdefault(cfg.task, load_task(cfg.task))
    examples = examples_for(task, cfg)
    load_before, up_before = list(os.getloadavg()), uptime()
    started = time.perf_counter()
    lm = make_lm(cfg)
    startup_s = time.perf_counter() - started
    server = server_of(lm)
    engine = engine_of(lm)
    inner = program_for(task, cfg)
    # Both layouts run in the order (and count cold/warm by the groups) of the new layout's shared
    # input, so a layout row differs from its twin only in the prompt.
    seed = task.make_program()
    program = TimedProgram(inner, shared_input_field(seed, examples))
    grouped = SharedPrefixOrder()(seed, examples)
    m0 = server.metrics()
    report = evaluate_program(program, examples, task.metric, lm=lm, num_threads=cfg.dspy_threads,
                              order=lambda _program, _examples: grouped)
    m1 = server.metrics()
    close_local_servers()
    calls = sorted(program.calls)
    seen: set[str] = set()
    cold, warm = [], []
    for _, seconds, key in calls:
        (warm if key in seen else cold).append(seconds)
        seen.add(key)
    times = [c[1] for c in calls]
    if engine is not None:
        gen_tokens, gen_s = engine.stats.generated_tokens, engine.stats.generation_s
    else:
        gen_tokens = m1.get("tokens_predicted_total", 0) - m0.get("tokens_predicted_total", 0)
        gen_s = m1.get("tokens_predicted_seconds_total", 0) - m0.get("tokens_predicted_seconds_total", 0)
    gen_tps = gen_tokens / gen_s if gen_s else float("nan")
    prompt_tokens = m1.get("prompt_tokens_total", 0) - m0.get("prompt_tokens_total", 0)
    prompt_s = m1.get("prompt_seconds_total", 0) - m0.get("prompt_seconds_total", 0)
    per_rollout_tokens = gen_tokens / max(1, len(examples))
    row = {
        "config": asdict(cfg), "label": cfg.label, "rollouts": len(examples),
        "all": summary(times), "cold": summary(cold), "warm": summary(warm),
        "rollouts_per_min": round(60 * len(examples) / report.wall_s, 2), "wall_s": round(report.wall_s, 1),
        "server_startup_s": round(startup_s, 1), "model_threads": server.threads,
        "generated_tokens_per_rollout": round(per_rollout_tokens, 1), "generation_tok_per_s": round(gen_tps, 2),
        "floor_s_per_rollout": round(per_rollout_tokens / gen_tps, 2) if gen_s else None,
        "prompt_tokens_computed": int(prompt_tokens),
        # the server's own prompt counters (default mode only: the pinned engine computes prompts itself)
        "prompt_tok_per_s": round(prompt_tokens / prompt_s, 2) if engine is None and prompt_s else None,
        "pass_at_1": round(report.pass_at_1, 4), "correct": sum(o.score >= 1.0 for o in report.outcomes),
        "errors": sum(o.error is not None for o in report.outcomes),
        "programs": {ex.get("example_id", str(i)): o.program for i, (ex, o) in enumerate(zip(examples, report.outcomes))},
        "pin_stats": vars(engine.stats) if engine is not None else None,
        "load_avg_before": load_before, "load_avg_after": list(os.getloadavg()),
        "uptime_before": up_before, "uptime_after": uptime(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return row


def plans(reps: int) -> dict[str, list[Config]]:
    spider = Config(task="spider", size="1.5b")
    layout = [replace(spider, mode=m, layout=lay) for m in ("default", "deterministic") for lay in ("new", "old")]
    threads = [replace(spider, per_db=3, model_threads=t) for t in (2, 1)]
    slots = [replace(spider, per_db=4, dspy_threads=2, slots=s) for s in (2, 1)]
    small = [replace(spider, size="0.5b", per_db=4, mode=m) for m in ("default", "deterministic")] + [
        replace(spider, task="builtin-sql", per_db=4, mode=m) for m in ("default", "deterministic")]
    bcb = [Config(task="bigcodebench", size=s, mode="deterministic", per_db=3, max_tokens=768) for s in ("1.5b", "0.5b")]
    scratch = [replace(spider, mode=m) for m in ("deterministic", "from-scratch")]
    demo = [Config(task="builtin-conventions-demo", per_db=20)]  # the demo's seed stage, as `hero demo` serves it
    interleave = lambda configs: [c for _ in range(reps) for c in configs]
    return {"layout": interleave(layout), "threads": interleave(threads), "slots": interleave(slots),
            "small": small, "bcb": bcb, "scratch": interleave(scratch),
            "demo": interleave(demo)}


def save(out: Path, plan: str, row: dict[str, Any]) -> None:
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault("plans", {}).setdefault(plan, []).append(row)
    data["note"] = ("Each row records the load average before and after its run (on a 2-core machine ~2 is the model "
                    "alone); compare configurations within one plan (interleaved), not across plans.")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")


def print_summary(out: Path) -> None:
    """One line per configuration of each plan: its runs' medians, warm medians, floors, accuracy, load."""
    data = json.loads(out.read_text())
    for plan, rows in data.get("plans", {}).items():
        print(f"== {plan}")
        labels: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            labels.setdefault(row["label"], []).append(row)
        for label, runs in labels.items():
            def fmt(key: str, sub: str = "median_s", runs=runs) -> str:
                return "/".join(str(r[key].get(sub)) if isinstance(r.get(key), dict) else str(r.get(key)) for r in runs)

            loads = "/".join(f"{r['load_avg_before'][0]:.1f}" for r in runs)
            print(f"  {label:72s} median {fmt('all')} p90 {fmt('all', 'p90_s')} warm {fmt('warm')} s; "
                  f"{fmt('rollouts_per_min')} per min; floor {fmt('floor_s_per_rollout')} s; "
                  f"prompt {fmt('prompt_tok_per_s')} / generated {fmt('generation_tok_per_s')} tok/s; "
                  f"correct {fmt('correct')} of {runs[0]['rollouts']}; load {loads}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", choices=sorted(plans(1)))
    p.add_argument("--summary", action="store_true", help="print the table of what --out holds and exit")
    p.add_argument("--reps", type=int, default=2, help="interleaved repetitions of each configuration")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    if a.summary:
        print_summary(a.out)
        return
    if a.plan is None:
        p.error("--plan is required (or --summary)")
    tasks: dict[str, Any] = {}
    for cfg in plans(a.reps)[a.plan]:
        row = measure(cfg, tasks)
        save(a.out, a.plan, row)
        print(f"{row['label']:72s} median {row['all'].get('median_s')}s p90 {row['all'].get('p90_s')}s "
              f"cold {row['cold'].get('median_s')}s warm {row['warm'].get('median_s')}s "
              f"{row['rollouts_per_min']}/min floor {row['floor_s_per_rollout']}s "
              f"correct {row['correct']}/{row['rollouts']} threads {row['model_threads']} load {row['load_avg_before'][0]:.2f}->{row['load_avg_after'][0]:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
