"""`local_lm()`: the embedded default model, a real `dspy.LM` pointed at a llama.cpp server on 127.0.0.1.

A new user with no API key and no server gets a working LM in one call::

    lm = local_lm(size="0.5b")           # resolves the GGUF, starts the server, returns dspy.LM
    with dspy.context(lm=lm): ...

Servers are kept in a `ServerRegistry` (one per model file and configuration), so asking for the same
model twice reuses the running server instead of loading the weights again. The module holds one
documented default registry, `SERVERS`; pass your own `registry=` to scope servers to a block of code,
or call `close_local_servers()` to stop them early. Every server also stops at interpreter exit.

Offline by construction: litellm is told to use its bundled cost map (``LITELLM_LOCAL_MODEL_COST_MAP``,
set by the package's ``__init__``) before anything imports it, the model is resolved from local files first, and the server only binds
to 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Message, Response, Usage

from dspy_hero.lm.model_pack import resolve_model
from dspy_hero.lm.prefix_store import PrefixStore, prefix_name
from dspy_hero.lm.server import LocalServer, ServerConfig

logger = logging.getLogger(__name__)

LOCAL_API_KEY = "local"  # the server checks no key; litellm/lm15 want a non-empty one


# A ChatAdapter field header on a line of its own; the same marker quoted inside a sentence is not one.
_FIELD_HEADER = re.compile(r"^\[\[ ## \w+ ## \]\][ \t]*$", re.MULTILINE)


def shared_prefix_end(content: str) -> int:
    """Where the shared part of a user message ends: at the second field header, or just after the
    first one when there is a single field (0 when the message has no field header).

    Why the first field: every seed program puts the input shared across examples (db_schema,
    graph_schema, ...) first and the per-example input after it, so everything up to the second header
    is the same for every example of one database, and a rule that reads only the text gives the same
    boundary for the same prompt, whatever ran before it.
    """
    headers = list(_FIELD_HEADER.finditer(content))
    if not headers:
        return 0
    if len(headers) == 1:
        end = headers[0].end()
        return end + 1 if content[end : end + 1] == "\n" else end
    return headers[1].start()


@dataclass
class PinStats:
    """What the pinned-prefix engine did: requests served, prefixes computed from scratch, and
    requests whose reused KV was not exactly the pinned prefix (must stay 0 for determinism)."""

    requests: int = 0
    prefix_builds: int = 0
    prefix_restores: int = 0  # prefixes restored from their saved state (`PrefixStore`) instead of built
    prefix_tokens: int = 0
    unpinned: int = 0
    generated_tokens: int = 0  # from the generation requests' own timings (prefix-only fills excluded)
    generation_s: float = 0.0
    prompt_tokens_computed: int = 0  # suffix tokens computed by generation requests
    prompt_s: float = 0.0
    prefix_s: float = 0.0  # wall time putting pinned prefixes in the slot (builds, restores, re-evaluations)

    def minus(self, earlier: PinStats) -> PinStats:
        """What happened between `earlier` (a snapshot of these stats) and now."""
        return PinStats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)})


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PinnedPrefixEngine:
    """A DSPy engine (``complete(Request) -> Response``) over one llama.cpp slot that reuses the KV of a
    prompt's shared prefix, and always the same KV, so a prompt gives the same answer whatever ran before it.

    Why not the server's own prefix cache: llama.cpp reuses the longest common token prefix with
    whatever the slot last held, so the tokens after the shared prefix are computed from a start position
    (and in batch splits) that depend on the previous request; the numbers differ in the last bits and
    greedy decoding sometimes picks another token. Here each request is three steps under one lock:

    1. the prompt is rendered with the model's chat template and tokenized by the server; the shared
       prefix is the tokens up to `shared_prefix_end` of the last user message;
    2. when that prefix differs from the pinned one, it is computed from scratch in a prefix-only request
       (``cache_prompt`` off); then a second prefix-only request re-evaluates its last token alone. So the
       slot holds the same KV for this prefix every time: tokens ``[0, P-1)`` from one batch starting at
       position 0, token ``P-1`` evaluated on its own;
    3. the full prompt is sent as tokens with ``cache_prompt`` on; the slot's longest common prefix with it
       is exactly the pinned prefix (``timings.cache_n == P`` is checked), so the suffix is always
       computed from position P on top of the same KV.

    The server must run one slot with no shift-reuse (``n_cache_reuse`` 0) and no host-RAM prompt cache
    (``cache_ram_mib`` 0), which could restore a KV computed another way; `local_lm(deterministic=True)`
    starts it so. With ``reuse_prefix=False`` every prompt is computed from scratch (the old
    deterministic mode, kept to measure what the pinning buys).

    With a server that has a slot-file folder (``slot_files``) and ``store_mib`` > 0, step 2 saves each
    prefix's state right after computing it and, when that prefix comes back, restores the saved state
    instead of computing it again (`dspy_hero.lm.prefix_store`: a byte copy of the canonical state, so
    the answers are those of step 2 computed afresh).
    """

    def __init__(self, server: LocalServer, *, reuse_prefix: bool = True, seed: int = 0, store_mib: int = 0):
        cfg = server.config
        if cfg.parallel != 1 or cfg.cache_reuse != 0 or cfg.cache_ram_mib != 0:
            raise ValueError(
                "PinnedPrefixEngine needs a server with parallel=1, cache_reuse=0 and cache_ram_mib=0 "
                f"(got parallel={cfg.parallel}, cache_reuse={cfg.cache_reuse}, cache_ram_mib={cfg.cache_ram_mib})"
            )
        self.server = server
        self.reuse_prefix = reuse_prefix
        self.seed = seed
        self.stats = PinStats()
        self._pinned: list[int] | None = None
        self._lock = threading.Lock()
        self._warned = False
        folder = getattr(server, "slot_dir", None)
        if store_mib > 0 and not folder:
            raise ValueError("a prefix store needs a server started with slot_files=True")
        self.store = PrefixStore(folder, store_mib * 2**20) if store_mib > 0 else None

    def _prompt(self, request: Any) -> tuple[str, int]:
        """The rendered prompt and the character offset where its shared prefix ends."""
        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") for p in (request.system or ())
        )
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": str(getattr(m.role, "value", m.role)), "content": m.text or ""} for m in request.messages
        ]
        prompt = self.server.post("/apply-template", {"messages": messages})["prompt"]
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        start = prompt.rfind(last) if last else -1
        if start < 0:  # the template rewrote the message: no shared prefix, computed from scratch
            return prompt, 0
        return prompt, start + shared_prefix_end(last)

    def _tokens(self, text: str) -> list[int]:
        return [int(t) for t in self.server.post("/tokenize", {"content": text})["tokens"]]

    def _fill(self, tokens: list[int], *, cache: bool) -> dict[str, Any]:
        return self.server.post("/completion", {"prompt": tokens, "n_predict": 0, "cache_prompt": cache,
                                                "id_slot": 0, "temperature": 0.0})

    def _load(self, prefix: list[int]) -> None:
        """Put `prefix`'s canonical state in the slot: restored when saved before, else computed from
        scratch (and saved)."""
        name = prefix_name(prefix)
        if self.store is not None and name in self.store:
            try:
                out = self.server.post("/slots/0?action=restore", {"filename": name})
            except RuntimeError as exc:
                out = {"error": str(exc)}
            if int(out.get("n_restored", -1)) == len(prefix):
                self.store.touch(name)
                self.stats.prefix_restores += 1
                return
            logger.warning("saved prefix %s could not be restored (%s); computing it again", name, out)
            self.store.discard(name)
        self._fill(prefix, cache=False)
        self.stats.prefix_builds += 1
        self.stats.prefix_tokens += len(prefix)
        if self.store is not None:
            try:
                out = self.server.post("/slots/0?action=save", {"filename": name})
                self.store.add(name, int(out["n_saved"]), int(out["n_written"]))
            except (RuntimeError, KeyError, ValueError) as exc:
                logger.warning("the local server could not save a prompt prefix (%s): prefixes are computed "
                               "from scratch from now on (slower, same answers)", exc)
                self.store = None

    def complete(self, request: Any) -> Response:
        config = request.config
        body: dict[str, Any] = {
            "n_predict": int(config.max_tokens) if config.max_tokens else -1,
            "temperature": float(config.temperature or 0.0),
            "seed": int(config.seed) if config.seed is not None else self.seed,
            "id_slot": 0,
        }
        if config.top_p is not None:
            body["top_p"] = float(config.top_p)
        if config.stop:
            body["stop"] = list(config.stop) if not isinstance(config.stop, str) else [config.stop]
        with self._lock:
            prompt, cut = self._prompt(request)
            tokens = self._tokens(prompt)
            n_prefix = _lcp(self._tokens(prompt[:cut]), tokens) if (cut and self.reuse_prefix) else 0
            prefix = tokens[:n_prefix]
            if n_prefix:
                started = time.perf_counter()
                if prefix != self._pinned:
                    self._load(prefix)
                    self._pinned = prefix
                self._fill(prefix, cache=True)  # re-evaluates token P-1 alone, dropping what followed
                self.stats.prefix_s += time.perf_counter() - started
            else:
                self._pinned = None
            out = self.server.post("/completion", {**body, "prompt": tokens, "cache_prompt": bool(n_prefix)})
            self._pinned = prefix if n_prefix else None
            self.stats.requests += 1
            timings = out.get("timings") or {}
            cached = int(timings.get("cache_n", 0))
            self.stats.generated_tokens += int(timings.get("predicted_n", 0))
            self.stats.generation_s += float(timings.get("predicted_ms", 0.0)) / 1000
            self.stats.prompt_tokens_computed += int(timings.get("prompt_n", 0))
            self.stats.prompt_s += float(timings.get("prompt_ms", 0.0)) / 1000
            if n_prefix and cached != n_prefix:
                self.stats.unpinned += 1
                if not self._warned:
                    self._warned = True
                    logger.warning("pinned prefix not reused exactly (%d of %d tokens): this request may not "
                                   "repeat itself; is another client using the deterministic server?", cached, n_prefix)
        finish = "length" if out.get("stop_type") == "limit" else "stop"
        return Response(
            id=f"local-{self.stats.requests}",
            model=self.server.name,
            message=Message.assistant(out.get("content", "")),
            finish_reason=finish,
            usage=Usage(input_tokens=len(tokens), output_tokens=int(out.get("tokens_predicted", 0)),
                        cache_read_tokens=cached),
        )

    def snapshot(self) -> PinStats:
        """A consistent copy of the stats (taken between requests), to difference later with `minus`."""
        with self._lock:
            return replace(self.stats)

    def stream(self, request: Any):  # pragma: no cover - DSPy only streams when asked to
        raise NotImplementedError("the pinned-prefix engine does not stream")

    def close(self) -> None:
        return None


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


def local_spec(spec: str, size_default: str = "1.5b") -> dict[str, str] | None:
    """`local_lm`'s model argument for an LM spec as the `hero` CLI and `compare.py` take it: 'local'
    (the `size_default` pack), 'local:0.5b' (a pack size) or 'local:/path/model.gguf'; None for any
    other spec (a litellm model string)."""
    if not (spec == "local" or spec.startswith("local:")):
        return None
    arg = spec.partition(":")[2]
    if arg and (arg.endswith(".gguf") or os.sep in arg):
        return {"model": arg}
    return {"size": arg or size_default}


def local_lm(
    model: str | os.PathLike | None = None,
    *,
    size: str = "1.5b",
    n_ctx: int = 8192,
    threads: int | None = None,
    parallel: int = 2,
    deterministic: bool = False,
    reuse_prefix: bool = True,
    prefix_store_mib: int = 2048,
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
    None gives the model the cores that are idle when its server starts (see
    `dspy_hero.lm.server.default_threads`, which also says when to leave cores to sandboxes); `parallel` decoding slots serve concurrent DSPy threads: with 2 DSPy
    threads on 2 loaded cores, 2 slots served 9.5 and 5.6 Spider rollouts per minute against 7.6 and
    6.5 for 1 slot (runs interleaved; 16 rollouts each in 2.27 against 2.28 minutes), so there is no
    measured gain either way on 2 cores (idle, one run each: 19.4 rollouts/min with 2 slots, 22.1 with 1,
    benchmarks/results/throughput-idle.json) and the default stays 2, which lets a second request start
    its prompt while the first generates (benchmarks/results/throughput.json, plan ``slots``). The DSPy response cache is off by
    default so that repeated evaluations measure the model, not the cache; the server's prompt-prefix
    cache is on. `server_of(lm)` finds the server behind the returned LM (for metrics or an early close).

    `deterministic=True` gives the same answer for the same prompt whatever ran before it: one slot,
    requests served one at a time by a `PinnedPrefixEngine`, which reuses each shared prefix's KV but
    always the same KV (see its docstring). At temperature 0 the default server (2 slots, free prefix
    reuse) returned different queries for 10 of 30 Spider questions when the same prompt was evaluated
    twice, which is enough to swamp small differences between methods. Use it for comparisons: on
    12 Spider questions from 2 databases run in two orders (benchmarks/determinism.py, 2 DSPy threads)
    it repeated 12/12 queries with the 1.5B model and 8/8 with the 0.5B (the default server 7/8 there),
    and with the schema-first layout its median rollout (4.4 and 5.3 s) was within the default
    server's (7.9 and 3.3 s) on the same loaded 2 cores, against 16.3 and 13.9 s computing every
    prompt from scratch question-first (benchmarks/results/throughput.json, plan ``layout``).
    ``reuse_prefix=False`` computes every prompt from scratch instead (slower; kept for measurement).
    `prefix_store_mib` caps the disk the deterministic server's saved prefix states may take (a
    private temporary folder, removed with the server; 0: keep none, compute every new pin afresh);
    at ~29 KB per token for the 1.5B model, the default holds some 70-140 schema-long prefixes.
    """
    resolved = resolve_model(size, model, allow_download=allow_download)
    if deterministic:
        store_mib = prefix_store_mib if reuse_prefix else 0
        config = ServerConfig(n_ctx=n_ctx, threads=threads, parallel=1, cache_reuse=0, cache_ram_mib=0,
                              slot_files=store_mib > 0)
        server = (registry or SERVERS).get(resolved.path, resolved.name, config)
        engine = PinnedPrefixEngine(server, reuse_prefix=reuse_prefix, store_mib=store_mib)
        lm = dspy.LM(f"local/{server.name}", engine=engine, temperature=temperature, max_tokens=max_tokens,
                     cache=cache, num_retries=lm_kwargs.pop("num_retries", 1), **lm_kwargs)
    else:
        config = ServerConfig(n_ctx=n_ctx, threads=threads, parallel=parallel)
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


def engine_of(lm: dspy.LM) -> PinnedPrefixEngine | None:
    """The pinned-prefix engine behind a deterministic local LM (None for other LMs)."""
    engine = getattr(lm, "_engine_spec", None)
    return engine if isinstance(engine, PinnedPrefixEngine) else None


def server_of(lm: dspy.LM, registry: ServerRegistry | None = None) -> LocalServer | None:
    """The running local server an LM talks to, found by its ``api_base`` (None for other LMs)."""
    engine = engine_of(lm)
    if engine is not None:
        return engine.server if not engine.server.closed else None
    base = (getattr(lm, "kwargs", None) or {}).get("api_base")
    return next((s for s in (registry or SERVERS).servers() if s.base_url == base), None)
