"""Does speculative decoding make the demo's rollouts faster on this machine?

The demo is slow because every rollout costs prompt tokens (compute-bound on a 2-core CPU) and
generated tokens (one forward pass each). Speculative decoding trades extra batched computation for
fewer sequential passes; whether that pays depends on how compute-bound the CPU is. This script runs
the demo's seed program on its held-out questions, grouped by database as the harness runs them, once
per mode on a fresh default server:

- ``none``: the server as `local_lm()` starts it;
- ``ngram_simple``: llama.cpp's prompt-lookup drafts (no second model);
- ``draftN``: the 0.5B model pack drafting up to N tokens for the 1.5B model (same tokenizer).

It records wall time per rollout, the server's generation counters and drafts, and how many programs
differ from mode ``none`` (a mode that changes programs changes results, not only speed).

    python benchmarks/speculative_decoding.py --modes none ngram_simple draft3 --limit 12

Writes benchmarks/results/speculative-decoding-qwen1.5b.json. Measurement only: the speculative
settings are applied to the server parameters here, not offered by `local_lm`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "speculative-decoding-qwen1.5b.json"


def one_mode(mode: str, limit: int) -> dict:
    """Run one mode in this process (a fresh server) and return its row."""
    import xllamacpp

    from dspy_hero.lm.model_pack import resolve_model

    kinds = xllamacpp.common_speculative_type
    start_server = xllamacpp.Server

    def with_speculation(params):
        spec = params.speculative
        if mode == "ngram_simple":
            spec.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        elif mode.startswith("draft"):
            spec.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
            spec.draft.mparams.path = str(resolve_model("0.5b", None, allow_download=False).path)
            spec.draft.n_max = int(mode[len("draft"):] or 3)
            spec.draft.cpuparams.n_threads = params.cpuparams.n_threads
            spec.draft.cpuparams_batch.n_threads = params.cpuparams.n_threads
        elif mode != "none":
            raise ValueError(f"unknown mode {mode!r}")
        return start_server(params)

    xllamacpp.Server = with_speculation
    import dspy

    from dspy_hero import load_task, local_lm
    from dspy_hero.lm.local import server_of

    task = load_task("builtin-conventions-demo")
    lm = local_lm()
    server = server_of(lm)
    program = task.make_program()
    # one group per database, as the harness's SharedPrefixOrder runs them (here groups in name order,
    # which the saved results were measured with; the prefix reuse is the same)
    examples = sorted(task.test[:limit], key=lambda ex: ex.db_id)
    with dspy.context(lm=lm):
        program(**examples[-1].inputs())  # warm-up, not timed
        before = server.metrics()
        started = time.perf_counter()
        programs = [program(**ex.inputs()).sql for ex in examples]
        wall = time.perf_counter() - started
    after = server.metrics()
    counters = ("tokens_predicted_total", "tokens_predicted_seconds_total", "prompt_tokens_total",
                "prompt_seconds_total", "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total")
    delta = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 3) for k in counters}
    return {"mode": mode, "rollouts": len(examples), "wall_s": round(wall, 1),
            "s_per_rollout": round(wall / len(examples), 2), "threads": server.threads,
            "load_before": os.getloadavg()[0], **delta, "programs": programs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["none", "ngram_simple", "draft3"])
    parser.add_argument("--limit", type=int, default=20, help="held-out questions (the demo's first N)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one mode in a child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_mode(args.one, args.limit)))
        return
    rows = []
    for mode in args.modes:  # each mode in its own process: a fresh server, no state carried over
        done = subprocess.run([sys.executable, __file__, "--one", mode, "--limit", str(args.limit)],
                              capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        gen = row["tokens_predicted_total"] / max(1e-9, row["tokens_predicted_seconds_total"])
        pp = row["prompt_tokens_total"] / max(1e-9, row["prompt_seconds_total"])
        same = sum(a == b for a, b in zip(row["programs"], rows[0]["programs"]))
        print(f"{mode:>13}: {row['s_per_rollout']:.2f} s/rollout; generation {gen:.1f} tok/s, prompt {pp:.1f} tok/s; "
              f"drafts {row['spec_decode_num_drafts_total']:.0f} ({row['spec_decode_num_draft_tokens_total']:.0f} "
              f"tokens); programs equal to {rows[0]['mode']}: {same}/{row['rollouts']}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"machine": os.uname().machine, "cores": os.cpu_count(), "rows": rows}, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
