"""How often the default (non-deterministic) local server recomputes a shared prefix in HERO-O's paired test.

HERO-O's acceptance test runs the current prompt on a chunk of update examples, then the candidate
on the same chunk (grouped by database). Each (prompt, database) pair has a schema-long shared prefix;
computing it is most of a cold rollout's time. This replays that pattern on the conventions demo's
training questions (the seed and the seed plus one rule) against the embedded server under named
llama.cpp slot/cache settings and counts, per setting, the requests whose shared prefix was computed
rather than reused (``timings.cache_n`` below the prefix), against the minimum: one per distinct
(prompt, database) pair. It prints cold requests, prompt tokens computed and wall time per setting,
and writes them as JSON. Cold counts do not depend on machine load; wall times do (one run each).

    python benchmarks/server_prefix_cache.py --questions 16 --chunk 8 --out benchmarks/results/server-prefix-cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import dspy

from dspy_hero.lm.model_pack import resolve_model
from dspy_hero.lm.scripted import scripted_lm
from dspy_hero.lm.server import LocalServer, ServerConfig
from dspy_hero.optimizer.instructions import build_variant, render_instructions
from dspy_hero.tasks.builtin.conventions_tasks import conventions_demo_task

RULE = ("When a table has a column that flags deleted or archived rows (such as deleted_at or archived_at), "
        "always leave those rows out.")

# name -> (ServerConfig fields, llama.cpp params set on top: slot similarity threshold, idle-slot caching)
SETTINGS = {
    "default": ({}, {}),  # today's local_lm default: 2 slots, similarity 0.1, idle slots to a 1 GiB RAM cache
    "slots8": ({"parallel": 8}, {}),
    "slots8-lru": ({"parallel": 8, "cache_ram_mib": 0}, {"slot_prompt_similarity": 0.5, "cache_idle_slots": False}),
    "slots2-sim0.5": ({}, {"slot_prompt_similarity": 0.5}),
}


def messages_for(program: dspy.Module, example: dspy.Example) -> list[dict]:
    """The chat messages the program sends for `example` (rendered by its adapter, no model call)."""
    lm = scripted_lm(lambda request: {"sql": "SELECT 1"})
    with dspy.context(lm=lm):
        program(**example.inputs())
    return lm.history[-1]["messages"]


def pattern(task, questions: int, chunk: int) -> list[tuple[str, dspy.Example]]:
    examples = list(task.train[:questions])
    out = []
    for lo in range(0, len(examples), chunk):
        part = sorted(examples[lo:lo + chunk], key=lambda e: str(e.db_id))
        out += [("current", e) for e in part] + [("candidate", e) for e in part]
    return out


def run_setting(model_path: str, name: str, prompts: list[tuple[str, str, list[dict]]]) -> dict:
    fields, extra = SETTINGS[name]
    import xllamacpp

    original = xllamacpp.Server

    def server_with(params):  # the two llama.cpp knobs ServerConfig does not expose
        for key, value in extra.items():
            setattr(params, key, value)
        return original(params)

    xllamacpp.Server = server_with
    load_before = os.getloadavg()[0]  # before this setting's server starts: other jobs only
    try:
        server = LocalServer(model_path, config=replace(ServerConfig(), **fields))
    finally:
        xllamacpp.Server = original
    rows, start = [], time.perf_counter()
    try:
        for label, db, msgs in prompts:
            t = time.perf_counter()
            out = server.post("/v1/chat/completions", {"messages": msgs, "temperature": 0, "max_tokens": 200})
            timings = out.get("timings") or {}
            rows.append({"prompt": label, "db": db, "s": round(time.perf_counter() - t, 2),
                         "cache_n": int(timings.get("cache_n", 0)), "prompt_n": int(timings.get("prompt_n", 0))})
    finally:
        server.close()
    wall = time.perf_counter() - start
    # cold: fewer tokens reused than the shortest prompt's share of a warm request (the schema is most of it)
    warm_floor = 0.6 * min(r["cache_n"] + r["prompt_n"] for r in rows)
    cold = sum(r["cache_n"] < warm_floor for r in rows)
    return {"setting": name, "server": fields, "llama_params": extra, "requests": len(rows), "cold": cold,
            "prompt_tokens_computed": sum(r["prompt_n"] for r in rows), "wall_s": round(wall, 1),
            "load_before": round(load_before, 2), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = conventions_demo_task()
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    ruled = build_variant(seed, {name: render_instructions(predictor.signature.instructions, [RULE])})
    programs = {"current": seed, "candidate": ruled}
    prompts = [(label, str(ex.db_id), messages_for(programs[label], ex)) for label, ex in pattern(task, args.questions, args.chunk)]
    minimum = len({(label, db) for label, db, _ in prompts})
    model_path = str(resolve_model(args.size, None, allow_download=False).path)
    results = []
    for setting in args.settings.split(","):
        row = run_setting(model_path, setting, prompts)
        results.append(row)
        print(f"{setting:14s} {row['cold']:3d} cold of {row['requests']} (minimum {minimum}); "
              f"{row['prompt_tokens_computed']} prompt tokens computed; {row['wall_s']}s (load {row['load_before']})",
              flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"questions": args.questions, "chunk": args.chunk, "size": args.size,
                                        "distinct_prefixes": minimum, "results": results}, indent=2))


if __name__ == "__main__":
    main()
