"""Ollama model folders: which GGUF blob each `name:tag` is.

Ollama keeps models as `<models>/manifests/<registry>/<namespace>/<name>/<tag>` (a small JSON
manifest) and content-addressed blobs `<models>/blobs/sha256-<hex>`. The manifest's layer of
media type `application/vnd.ollama.image.model` names the GGUF file by digest `sha256:<hex>`.

    models("~/.ollama/models")        # {"smollm2:135m": Path(".../manifests/.../smollm2/135m"), ...}
    blob_of(manifest_path)            # Path(".../blobs/sha256-<hex>"), the GGUF file

Names shown are `name:tag` for the default registry and library namespace, else the manifest's
path below manifests/ (e.g. `hf.co/user/repo:Q4_K_M`). Manifests are JSON, read bounded; a
digest must be 64 hex digits, so a manifest cannot point outside the blobs folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..core.files import read_json

MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_PREFIX = ("registry.ollama.ai", "library")
MAX_MANIFEST_BYTES = 1 << 20
MAX_MANIFESTS = 2000
DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def is_models_folder(path: Path) -> bool:
    return path.is_dir() and (path / "manifests").is_dir() and (path / "blobs").is_dir()


def models_root(manifest: Path) -> Path | None:
    """The models folder a manifest file lies in (the parent of its manifests/ folder), if any."""
    for parent in manifest.parents:
        if parent.name == "manifests" and (parent.parent / "blobs").is_dir():
            return parent.parent
    return None


def models(folder: str | Path) -> dict[str, Path]:
    """Every model of an Ollama models folder: display name -> manifest file (sorted by name)."""
    folder = Path(folder)
    manifests = folder / "manifests"
    found: dict[str, Path] = {}
    for i, path in enumerate(sorted(p for p in manifests.rglob("*") if p.is_file())):
        if i >= MAX_MANIFESTS:
            break
        parts = path.relative_to(manifests).parts
        if len(parts) < 2:
            continue
        *where, tag = parts
        if tuple(where[:2]) == DEFAULT_PREFIX and len(where) == 3:
            where = where[2:]
        found["/".join(where) + ":" + tag] = path
    return found


def blob_of(manifest: str | Path) -> Path:
    """The GGUF blob a manifest names (ValueError if it names none, or the blob is missing)."""
    manifest = Path(manifest)
    root = models_root(manifest)
    if root is None:
        raise ValueError(f"{manifest} is not inside an Ollama models folder (manifests/ beside blobs/)")
    data = read_json(manifest, MAX_MANIFEST_BYTES)  # ValueError naming the manifest: not JSON, too big
    layers = data.get("layers") if isinstance(data, dict) else None
    layers = layers if isinstance(layers, list) else []
    digests = [
        layer.get("digest") for layer in layers if isinstance(layer, dict) and layer.get("mediaType") == MODEL_LAYER
    ]
    if len(digests) != 1 or not isinstance(digests[0], str) or not DIGEST.fullmatch(digests[0]):
        raise ValueError(
            f"the Ollama manifest {manifest.name} names no single model layer ({MODEL_LAYER}) with a sha256 digest"
        )
    blob = root / "blobs" / ("sha256-" + digests[0].removeprefix("sha256:"))
    if not blob.is_file():
        raise FileNotFoundError(
            f"the Ollama manifest {manifest.name} names {blob.name}, which is not in its "
            "blobs folder; pull the model again"
        )
    return blob


def gguf_in(path: Path) -> Path | None:
    """The GGUF file `path` stands for: itself (a .gguf or an Ollama blob), the one .gguf in a
    folder, an Ollama manifest's blob, or an Ollama folder's only model; None if none of these.
    ValueError when a folder holds several and the caller must pick one."""
    if path.is_file():
        if path.suffix == ".gguf" or _starts_gguf(path):
            return path
        return blob_of(path) if models_root(path) is not None else None
    if not path.is_dir():
        return None
    if is_models_folder(path):
        found = models(path)
        if len(found) == 1:
            return blob_of(next(iter(found.values())))
        raise ValueError(
            f"{path} is an Ollama models folder with {len(found)} models "
            f"({', '.join(list(found)[:8])}); give the manifest of one, e.g. "
            f"{next(iter(found.values()), path / 'manifests/...')}"
        )
    files = sorted(path.glob("*.gguf"))
    if len(files) > 1:
        raise ValueError(
            f"{path} holds {len(files)} GGUF files ({', '.join(f.name for f in files[:6])}); give the one to load"
        )
    return files[0] if files and not (path / "config.json").is_file() else None


def _starts_gguf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"GGUF"
