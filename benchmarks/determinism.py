"""Does the embedded model repeat itself? Evaluate the seed program twice on the same Spider questions
and count identical generated queries, with the default server and with `deterministic=True`.

    python benchmarks/determinism.py [--size 0.5b] [--questions 12] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

from dspy_hero.lm.local import close_local_servers, local_lm
from dspy_hero.tasks.evaluate import evaluate_program
from dspy_hero.tasks.registry import load_task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", default="0.5b")
    p.add_argument("--questions", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    task = load_task("spider")
    test = task.test[: a.questions]
    for deterministic in (False, True):
        lm = local_lm(size=a.size, deterministic=deterministic, max_tokens=256)
        runs, walls = [], []
        for _ in range(2):
            start = time.perf_counter()
            report = evaluate_program(task.make_program(), test, task.metric, lm=lm, num_threads=a.threads)
            walls.append(time.perf_counter() - start)
            runs.append([o.program for o in report.outcomes])
        same = sum(x == y for x, y in zip(*runs))
        mode = "deterministic" if deterministic else "default"
        print(f"{mode:13s} identical queries {same}/{len(test)}; wall {walls[0]:.1f}s and {walls[1]:.1f}s")
        close_local_servers()


if __name__ == "__main__":
    main()
