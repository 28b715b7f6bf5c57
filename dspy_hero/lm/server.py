"""An in-process llama.cpp server on 127.0.0.1, through xllamacpp's prebuilt wheel.

Why in-process: no binary to find, no child process to orphan; the server's threads live and die
with a Python object. Why HTTP at all: DSPy then talks to it exactly as it talks to any
OpenAI-compatible server (``openai/<name>`` with ``api_base``), so the local model is a default, not a
special case.

Prompt-prefix reuse matters for HERO: every call of one program shares its instructions, which come
first in the prompt, so the server keeps each slot's KV cache between requests (``cache_prompt``),
picks the slot whose cached prefix is longest, and may shift-reuse chunks (``n_cache_reuse``).

Shutdown: ``close()`` (or leaving a ``with`` block) stops the HTTP listener and the inference loop and
joins their threads; a ``weakref.finalize`` does the same when the object is collected or the
interpreter exits, so no thread outlives its server.
"""

from __future__ import annotations

import json
import logging
import os
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
    threads: int | None = None  # None: default_threads() (every usable core)
    parallel: int = 2  # decoding slots; DSPy's threads map onto them
    cache_reuse: int = 256  # min chunk (tokens) for KV shift-reuse of a cached prefix
    cache_ram_mib: int = 1024  # host RAM for prompts evicted from slots
    poll: int = 50  # ggml worker busy-wait level 0-100 (0: sleep between work items)
    verbosity: int = 0  # llama.cpp log level; 0 keeps stderr quiet except errors
    startup_timeout_s: float = 120.0
    cache_prompt: bool = True  # reuse each slot's KV cache for a shared prompt prefix


def default_threads(neighbours: int = 0) -> int:
    """Threads for the model: every usable core less the CPU-bound workers that run beside it
    (at least 1, at most 8).

    `neighbours` counts what computes while the model generates: Python sandboxes running tests,
    metric threads that execute slow queries. DSPy threads waiting on HTTP and SQLite/Cypher executors
    that answer in milliseconds do not count. Why all the cores otherwise: generation on a CPU is
    bound by memory bandwidth and prompt processing by compute, and both scale with threads while the
    threads are scheduled; when more threads than free cores are asked for, llama.cpp's worker barrier
    waits on a descheduled thread every step and speed collapses (measured in
    benchmarks/results/throughput.json, plan ``threads``: MEASURED_THREADS).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores - max(0, int(neighbours))))


def _stop(box: list) -> None:
    """Drop the native server: its destructor stops the loop and joins the HTTP threads."""
    while box:
        server = box.pop()
        del server


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
        params.verbosity = int(self.config.verbosity)
        threads = self.config.threads or default_threads()
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.cpuparams.poll = int(self.config.poll)
        params.cpuparams_batch.poll = int(self.config.poll)

        started = time.perf_counter()
        server = xllamacpp.Server(params)
        self._box: list[Any] = [server]
        self._finalizer = weakref.finalize(self, _stop, self._box)
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
