"""`local_lm()`: the embedded default model, a real `dspy.LM` pointed at a llama.cpp server on 127.0.0.1.

A new user with no API key and no server gets a working LM in one call::

    lm = local_lm(size="0.5b")           # resolves the GGUF, starts the server, returns dspy.LM
    with dspy.context(lm=lm): ...

Servers are kept in a `ServerRegistry` (one per model file and configuration), so asking for the same
model twice reuses the running server instead of loading the weights again. The module holds one
documented default registry, `SERVERS`; pass your own `registry=` to scope servers to a block of code,
or call `close_local_servers()` to stop them early. Every server also stops at interpreter exit.

Offline by construction: litellm is told to use its bundled cost map (``LITELLM_LOCAL_MODEL_COST_MAP``)
before anything imports it, the model is resolved from local files first, and the server only binds
to 127.0.0.1.
"""

from __future__ import annotations

import os

# Must precede any litellm import, or litellm fetches its cost map from the network at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import logging
import threading
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.lm.model_pack import resolve_model
from dspy_hero.lm.server import LocalServer, ServerConfig

logger = logging.getLogger(__name__)

LOCAL_API_KEY = "local"  # the server checks no key; litellm/lm15 want a non-empty one


class ServerRegistry:
    """Running local servers keyed by (model file, config); thread-safe; closes them all on `close()`."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, ServerConfig], LocalServer] = {}
        self._lock = threading.Lock()

    def get(self, model_path: Path, name: str, config: ServerConfig) -> LocalServer:
        key = (str(Path(model_path).resolve()), config)
        with self._lock:
            server = self._servers.get(key)
            if server is None or server.closed:
                server = LocalServer(model_path, name=name, config=config)
                self._servers[key] = server
            return server

    def servers(self) -> list[LocalServer]:
        with self._lock:
            return [s for s in self._servers.values() if not s.closed]

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()


SERVERS = ServerRegistry()  # the default registry; servers start only when local_lm() is called


def close_local_servers() -> None:
    """Stop every server started through the default registry."""
    SERVERS.close()


def local_lm(
    model: str | os.PathLike | None = None,
    *,
    size: str = "1.5b",
    n_ctx: int = 8192,
    threads: int | None = None,
    parallel: int = 2,
    deterministic: bool = False,
    temperature: float = 0.0,
    max_tokens: int = 1024,
    cache: bool = False,
    allow_download: bool = True,
    registry: ServerRegistry | None = None,
    **lm_kwargs: Any,
) -> dspy.LM:
    """A `dspy.LM` backed by the embedded llama.cpp server.

    `model` is a GGUF path or a pack size such as ``"0.5b"`` (else ``$HERO_LOCAL_MODEL``, else the
    installed model pack of `size`, else a hub download; see `dspy_hero.lm.model_pack`). `threads`
    None uses half the cores (see `dspy_hero.lm.server.default_threads`); `parallel` decoding slots
    serve concurrent DSPy threads. The DSPy response cache is off by default so that
    repeated evaluations measure the model, not the cache; the server's prompt-prefix cache is always
    on. `server_of(lm)` finds the server behind the returned LM (for metrics or an early close).

    `deterministic=True` serves one request at a time with no prompt-prefix reuse: at temperature 0
    the default server (2 slots, prefix reuse) returned different queries for 10 of 30 Spider questions
    when the same prompt was evaluated twice, which is enough to swamp small differences between
    methods. Use it for comparisons; it is slower.
    """
    resolved = resolve_model(size, model, allow_download=allow_download)
    config = (ServerConfig(n_ctx=n_ctx, threads=threads, parallel=1, cache_reuse=0, cache_prompt=False)
              if deterministic else ServerConfig(n_ctx=n_ctx, threads=threads, parallel=parallel))
    server = (registry or SERVERS).get(resolved.path, resolved.name, config)
    lm = dspy.LM(
        f"openai/{server.name}",
        api_base=server.base_url,
        api_key=LOCAL_API_KEY,
        temperature=temperature,
        max_tokens=max_tokens,
        cache=cache,
        num_retries=lm_kwargs.pop("num_retries", 1),
        **lm_kwargs,
    )
    logger.info("local_lm: %s from %s (%s)", server.name, resolved.path, resolved.source)
    return lm


def server_of(lm: dspy.LM, registry: ServerRegistry | None = None) -> LocalServer | None:
    """The running local server an LM talks to, found by its ``api_base`` (None for other LMs)."""
    base = (getattr(lm, "kwargs", None) or {}).get("api_base")
    return next((s for s in (registry or SERVERS).servers() if s.base_url == base), None)
