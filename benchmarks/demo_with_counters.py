"""`hero demo` (or any `hero` command) in-process, then the local servers' own counters.

The demo's stage times say where its wall time goes by stage; llama.cpp's ``/metrics`` says where it goes
inside the model: prompt tokens computed and their seconds, tokens generated and theirs. Prints the wall time
and, per server still running at the end, its ``*_total`` counters as JSON.

    cd "$(mktemp -d)" && time python /path/to/benchmarks/demo_with_counters.py demo
"""

from __future__ import annotations

import json
import sys
import time

from dspy_hero.cli.app import app
from dspy_hero.lm.local import SERVERS


def main() -> None:
    start = time.perf_counter()
    try:
        app(sys.argv[1:], standalone_mode=False)
    finally:
        print(f"wall {time.perf_counter() - start:.1f} s")
        for server in SERVERS.servers():
            counters = {k: v for k, v in server.metrics().items() if k.endswith("_total")}
            print("server", server.name, json.dumps(counters))


if __name__ == "__main__":
    main()
