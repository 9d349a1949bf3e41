"""Which folders a browser may load: the server owner's allowed roots, checked by containment.

`tfm.load(path)` from Python stays unrestricted; the app passes every path a browser typed or
linked through `resolve_allowed` first. The path is resolved (symlinks followed, `..` removed)
before the check, so neither can lead outside a root, and a refusal says the same thing whether
the path exists, is a file, a folder, or a link: it must not tell a visitor what is on disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..core.escape import short


def parse_roots(text: str) -> list[Path]:
    """Folders from an `os.pathsep`-separated list (TFM_MODEL_ROOTS=/data/models:/home/me/ckpts)."""
    return [Path(p.strip()).expanduser() for p in text.split(os.pathsep) if p.strip()]


def resolve_allowed(
    path: str | Path, roots: Iterable[str | Path], base: str | Path | None = None, shown: Iterable[str] | None = None
) -> Path:
    """`path` resolved, if it lies inside one of `roots` (also resolved); else ValueError.

    A relative path is taken from `base` (default: the working directory). The message names the
    path as given (shortened) and the roots as `shown` (default: as given), never anything
    learned from the disk: a server shows its folders by name, not by install path."""
    given = str(path).strip()
    roots = list(roots)
    allowed = [Path(r).expanduser().resolve() for r in roots]
    names = list(shown) if shown is not None else [str(r) for r in roots]
    refusal = ValueError(
        f"{short(given, 200)!r} is not inside a model folder this server allows "
        f"({', '.join(names) or 'none'}); put the model in one of those "
        "folders, or start the app with its folder allowed (README, 'Running for a class')"
    )
    if not given or "\0" in given:
        raise refusal
    try:
        p = Path(given).expanduser()
        resolved = (Path(base or Path.cwd()) / p).resolve()
    except (OSError, RuntimeError, ValueError):  # symlink loops, unknown ~user: refused the same way
        raise refusal from None
    if not any(resolved == root or resolved.is_relative_to(root) for root in allowed):
        raise refusal
    return resolved
