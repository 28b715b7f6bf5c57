"""An in-process llama.cpp server on 127.0.0.1, through xllamacpp's prebuilt wheel.

Why in-process: no binary to find, no child process to orphan; the server's threads live and die
with a Python object. Why HTTP at all: DSPy then talks to it exactly as it talks to any
OpenAI-compatible server (``openai/<name>`` with ``api_base``), so the local model is a default, not a
special case.

Prompt-prefix reuse matters for HERO: every call of one program shares its instructions, which come
first in the prompt, and the seed programs put the shared inputs (schemas) before the question, so the
server keeps each slot's KV cache between requests (``cache_prompt``), picks the slot whose cached
prefix is longest, and may shift-reuse chunks (``n_cache_reuse``). That reuse depends on what ran
before; `dspy_hero.lm.local.PinnedPrefixEngine` reuses prefixes in a way that does not.

Shutdown: ``close()`` (or leaving a ``with`` block) stops the HTTP listener and the inference loop and
joins their threads; a ``weakref.finalize`` does the same when the object is collected or the
interpreter exits, so no thread outlives its server.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """What the llama.cpp server is started with. Defaults suit a 2-4 core laptop."""

    n_ctx: int = 8192
    threads: int | None = None  # None: default_threads() (the cores idle when the server starts)
    parallel: int = 2  # decoding slots; DSPy's threads map onto them
    cache_reuse: int = 256  # min chunk (tokens) for KV shift-reuse of a cached prefix
    cache_ram_mib: int = 1024  # host RAM for prompts evicted from slots
    poll: int = 50  # ggml worker busy-wait level 0-100 (0: sleep between work items)
    verbosity: int = 0  # llama.cpp log level; 0 keeps stderr quiet except errors
    startup_timeout_s: float = 120.0
    cache_prompt: bool = True  # reuse each slot's KV cache for a shared prompt prefix
    slot_files: bool = False  # a private folder for the /slots save/restore endpoints (see `slot_dir`)


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)


def idle_cores(cores: int, sample_s: float = 0.25) -> float | None:
    """How many of `cores` were idle over the last `sample_s` seconds (None where it cannot be read)."""
    before = _cpu_times()
    if before is None:
        return None
    time.sleep(sample_s)
    after = _cpu_times()
    if after is None or after[1] == before[1]:
        return None
    busy_share = 1 - (after[0] - before[0]) / (after[1] - before[1])
    total = os.cpu_count() or cores
    return max(0.0, cores - busy_share * total)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads(neighbours: int = 0, idle: float | None = None) -> int:
    """Threads for the model: the cores that are free when the server starts, less the CPU-bound
    workers that will run beside it (at least 1, at most 8).

    `neighbours` counts what computes while the model generates: Python sandboxes running tests,
    metric threads that execute slow queries. DSPy threads waiting on HTTP and SQLite/Cypher executors
    that answer in milliseconds do not count. `idle` is the number of idle cores (default: sampled
    from /proc/stat for a quarter second), so other programs' load counts too.

    Why: on a CPU, llama.cpp's threads meet at a barrier after every operation, so a step is as slow
    as its slowest thread. With a core to itself each thread adds speed: on the idle 2-core machine,
    2 threads served the Spider seed (new layout) at a median 1.91 and 2.54 s per rollout against 3.20
    and 3.17 s with 1 thread, runs interleaved 2/1/2/1, same 6 queries, load 1.5-1.9 = the model alone
    (benchmarks/results/throughput-idle.json, plan ``threads``). When a
    thread has to share its core, the barrier waits for it to be scheduled and speed collapses:
    on the same 2 cores with 7 other test runs (load average 4.1-5.4), Spider 1.5B took a median
    16.2 and 11.2 s per rollout with 2 threads (generation 1.4 and 2.5 tok/s) against 4.5 and 6.2 s
    with 1 thread (14.5 and 9.4 tok/s), runs interleaved 2/1/2/1, the same 6 queries in all four
    (benchmarks/results/throughput.json, plan ``threads``). The thread count changes speed, not text.
    """
    cores = usable_cores()
    free = cores if idle is None else min(cores, max(1, int(idle + 0.5)))
    return max(1, min(8, free - max(0, int(neighbours))))


def _stop(box: list, slot_dir: str | None = None) -> None:
    """Drop the native server: its destructor stops the loop and joins the HTTP threads; then remove
    its slot-file folder."""
    while box:
        server = box.pop()
        del server
    if slot_dir:
        shutil.rmtree(slot_dir, ignore_errors=True)


class LocalServer:
    """One GGUF model served on ``127.0.0.1`` on a free port.

    Use as a context manager or call :meth:`close`. ``base_url`` is the OpenAI-compatible root
    (``http://127.0.0.1:PORT/v1``).
    """

    def __init__(self, model_path: str | os.PathLike, name: str | None = None, config: ServerConfig | None = None):
        try:
            import xllamacpp
        except ImportError as exc:  # the 'local' extra
            raise ImportError(
                "the embedded local model needs xllamacpp: pip install 'dspy-hero[local]'"
            ) from exc
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.name = name or self.model_path.stem
        self.config = config or ServerConfig()
        self._lock = threading.Lock()

        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.model_alias = {self.name}
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # the OS picks a free port
        params.offline = True  # never let llama.cpp fetch anything
        params.ui = False
        params.n_ctx = int(self.config.n_ctx)
        params.n_parallel = max(1, int(self.config.parallel))
        params.kv_unified = True  # slots share one KV buffer, so any one request may use all of n_ctx
        params.cache_prompt = bool(self.config.cache_prompt)
        params.n_cache_reuse = int(self.config.cache_reuse)
        params.cache_ram_mib = int(self.config.cache_ram_mib)
        params.endpoint_metrics = True
        # Slot files (KV states saved and restored by `PinnedPrefixEngine`) go to a folder of this server's
        # own, made when it starts and removed when it stops; llama.cpp joins the path and name as strings.
        self.slot_dir = tempfile.mkdtemp(prefix="hero-kv-") if self.config.slot_files else None
        if self.slot_dir:
            params.slot_save_path = os.path.join(self.slot_dir, "")
        params.verbosity = int(self.config.verbosity)
        threads = self.config.threads or default_threads(idle=idle_cores(usable_cores()))
        self.threads = threads  # what the model runs with (the config may leave it to default_threads)
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.cpuparams.poll = int(self.config.poll)
        params.cpuparams_batch.poll = int(self.config.poll)

        started = time.perf_counter()
        try:
            server = xllamacpp.Server(params)
        except BaseException:
            if self.slot_dir:
                shutil.rmtree(self.slot_dir, ignore_errors=True)
            raise
        self._box: list[Any] = [server]
        self._finalizer = weakref.finalize(self, _stop, self._box, self.slot_dir)
        self.root_url = str(server.listening_address).rstrip("/")
        try:
            self._wait_healthy(self.config.startup_timeout_s)
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - started
        logger.info("local model %s serving at %s (started in %.1fs)", self.name, self.root_url, self.startup_s)

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    @property
    def port(self) -> int:
        return int(self.root_url.rsplit(":", 1)[1])

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.root_url + "/health", timeout=5) as resp:
                    if json.loads(resp.read()).get("status") == "ok":
                        return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"local model server did not become healthy in {timeout_s:.0f}s ({last})")

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 600.0) -> dict[str, Any]:
        """POST `body` as JSON to one of the server's native endpoints (``/completion``, ``/tokenize``,
        ``/apply-template``) and return the decoded reply; an HTTP error carries the server's message."""
        request = urllib.request.Request(
            self.root_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise RuntimeError(f"local model server {path}: HTTP {exc.code}: {detail}") from exc

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus counters (prompt/generated tokens and seconds) as a dict."""
        with urllib.request.urlopen(self.root_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key.split(":", 1)[-1]] = float(value)
                except ValueError:
                    continue
        return out

    def close(self) -> None:
        """Stop the server and join its threads; idempotent."""
        with self._lock:
            self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.root_url
        return f"LocalServer({self.name!r}, {state})"
