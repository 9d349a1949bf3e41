"""Reading untrusted files: the one bounded reader of every JSON and text file a model folder,
tokenizer or SAE holds, and the guard around what interprets them.

A folder from a browser, a link or a download is untrusted. Its files are sized before they
are read, must be UTF-8, and JSON's nesting depth and numbers are bounded (`"[" * 200000` makes
Python's parser raise RecursionError; 1e400 becomes inf, which `int()` cannot take). Any failure
while reading a file or turning it into a config or tokenizer (RecursionError, MemoryError, bad
UTF-8, a value of the wrong type, ...) is one ValueError that names the file by its name, never
by a server path, and says what to do. A missing file stays FileNotFoundError.

    data = read_json(folder / "config.json")      # bounded; ValueError naming config.json
    with reading("tokenizer.json"):                # interpret it: any failure named
        ...
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 128 << 20  # Qwen2's tokenizer.json is ~7 MB, Gemma's ~34 MB
MAX_JSON_DEPTH = 32  # published configs and tokenizer.json nest at most ~6 levels
FIX = "re-export or re-copy that file"


def folder_file(folder: Path | str, name: str, what: str) -> Path:
    """`folder`/`name` when it is a regular file of that folder (a link is followed only to a file
    inside the folder); ValueError naming it for a link out of the folder or in a loop, a directory
    or a device (/dev/zero never ends); FileNotFoundError when it is not there at all."""
    folder, path = Path(folder), Path(folder) / name
    if not path.is_symlink() and not path.exists():
        raise FileNotFoundError(f"{what} {name} is missing")
    try:
        real, home = path.resolve(strict=True), folder.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ValueError(f"{what} {name} is a link that leads nowhere (a loop or a missing file)") from None
    if real.parent != home:
        raise ValueError(f"{what} {name} is a link out of its folder: a folder's files must be its own")
    if not real.is_file():
        raise ValueError(f"{what} {name} is not a regular file (a folder or a device): {FIX}")
    return path


def bounded_member(path: Path, limit: int, what: str, holds: str) -> Path:
    """`folder_file` of path's own folder, at most `limit` bytes; a missing file is a ValueError
    saying what such a folder `holds`."""
    try:
        folder_file(path.parent, path.name, what)
    except FileNotFoundError:
        raise ValueError(f"{what} {path.name} is missing in {path.parent.name}: {holds}") from None
    if path.stat().st_size > limit:
        raise ValueError(f"{what} {path.name} is {path.stat().st_size} bytes, over the {limit} allowed")
    return path


def read_bytes(path: Path | str, max_bytes: int) -> bytes:
    """A file's bytes, refused (ValueError) over `max_bytes` before anything is read."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} is missing")
    with reading(path.name):
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path.name} holds {size:,} bytes; tfm reads such a file up to {max_bytes:,} bytes")
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)  # a file that grew since stat() is cut here, not read whole
    if len(data) > max_bytes:
        raise ValueError(f"{path.name} grew past {max_bytes:,} bytes while it was read")
    return data


def read_text(path: Path | str, max_bytes: int) -> str:
    """A UTF-8 text file, size-bounded; ValueError naming the file if it is not UTF-8."""
    path = Path(path)
    return decode(read_bytes(path, max_bytes), path.name)


def decode(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name} is not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start:,}); {FIX}") from None


def read_json(path: Path | str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file, size-bounded, UTF-8, nesting and numbers bounded (`parse_json`)."""
    path = Path(path)
    return parse_json(read_text(path, max_bytes), path.name)


def parse_json(text: str | bytes, name: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text from an untrusted source (`name` says which, in messages): at most `max_depth`
    levels of nesting, finite numbers only (no NaN, Infinity, or 1e400, which Python reads as
    inf); one ValueError otherwise."""
    if isinstance(text, bytes):
        text = decode(text, name)
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(
            f"{name} nests its JSON deeper than Python can read; tfm reads up to {max_depth} levels: {FIX}"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); {FIX}") from None
    except ValueError as e:  # a number json cannot hold here (ours, or int's 4300-digit limit)
        raise ValueError(f"{name} holds a number tfm cannot read ({str(e).split(':')[0][:80]}); {FIX}") from None
    depth = json_depth(data, max_depth)
    if depth > max_depth:
        raise ValueError(f"{name} nests its JSON more than {max_depth} levels deep; {FIX}")
    return data


def _no_constant(word: str):
    raise ValueError(f"{word} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is too large for a float")
    return value


def json_depth(data: Any, limit: int) -> int:
    """Levels of lists and dicts in `data` (a bare number or string is 0), counted level by
    level without recursion; stops once past `limit`. ~0.1 s for a 150k-token tokenizer.json."""
    level, depth = [data], 0
    while depth <= limit:
        level = [v for v in level if type(v) is list or type(v) is dict]
        if not level:
            break
        depth += 1
        lists = (v for v in level if type(v) is list)
        dicts = (v.values() for v in level if type(v) is dict)
        level = list(chain(chain.from_iterable(lists), chain.from_iterable(dicts)))
    return depth


@contextmanager
def reading(name: str, hint: str = FIX, name_values: bool = True) -> Iterator[None]:
    """Around the code that reads or interprets the untrusted file `name`: any failure becomes
    one ValueError naming it (with `name_values`, a ValueError that does not name it gets the
    name in front); FileNotFoundError passes as it is."""
    try:
        yield
    except FileNotFoundError:
        raise
    except ValueError as e:
        if not name_values or name in str(e):
            raise
        raise ValueError(f"{name}: {e}") from e
    except Exception as e:  # RecursionError, MemoryError, TypeError, KeyError, OSError, ...
        raise ValueError(f"{name} could not be read: {why(e)}; {hint}") from e


def why(e: BaseException) -> str:
    """An exception from reading an untrusted file, in words, without any path it may quote."""
    if isinstance(e, RecursionError):
        return "it nests too deeply"
    if isinstance(e, MemoryError):
        return "it is too large to hold in memory"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    if isinstance(e, KeyError):
        return f"it lacks the entry {str(e.args[0] if e.args else '')[:60]!r}"
    text = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    if isinstance(e, (TypeError, AttributeError, IndexError, OverflowError)):
        return f"a value has the wrong kind or size ({text})"
    return text


def write_card(path: Path, cfg: Any, card: dict) -> None:
    """A shipped set's card (JSON): its config, then what its trainer measured."""
    path.write_text(json.dumps({"config": cfg.to_dict(), **card}, indent=2) + "\n")


def check_width(cfg: Any, model_cfg: Any, what: str, fix: str) -> None:
    """One clear message when a set (`what`: "these transcoders are") was trained for another model."""
    if (cfg.d_model, cfg.n_layer) != (model_cfg.d_model, model_cfg.n_layer):
        raise ValueError(
            f"{what} for a model {cfg.d_model} wide with {cfg.n_layer} layers, but this one is "
            f"{model_cfg.d_model} wide with {model_cfg.n_layer}: {fix}"
        )
