"""The general text mix SAEs and transcoders train on: the kinds of text a small chat model read,
each domain split into a training part and a held-out part, read from where it lies (never copied);
books, verse and stories are read in 16 evenly spaced runs so every part of a file is seen.

    books       the 37 Gutenberg books (gutenberg_pd_37books.txt.gz): first 95% / last 5%
    shakespeare Tiny Shakespeare: first 90% / last 10%
    stories     TinyStories: tinystories_train.txt / tinystories_valid.txt
    python      the running interpreter's own standard library (every machine has it): its
                top-level .py files in name order, every 10th held out; `python_files` lists them

    texts = domain_texts(corpus, "train", chars=400_000)    # {"books": "...", ...}
    ids = mix_ids(lm.tokenizer, corpus, "train", tokens=160_000)   # equal share per domain

A domain's text is a deterministic slice (no randomness), so a card can name exactly what it read.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from .data import encode_text, read_text

Domain = Literal["books", "shakespeare", "stories", "python"]
Split = Literal["train", "heldout"]
DOMAINS: tuple[str, ...] = get_args(Domain)
HELD_OUT_EVERY = 10  # every 10th standard-library file is held out
MAX_PY_FILE = 200_000  # characters: one huge generated file would dominate the domain


def _check(split: str, domains) -> tuple[str, ...]:
    if split not in get_args(Split):
        raise ValueError(f"split {split!r}: choose 'train' or 'heldout'")
    bad = [d for d in domains if d not in DOMAINS]
    if bad:
        raise ValueError(f"unknown domain(s) {bad}: choose from {list(DOMAINS)}")
    return tuple(domains)


def python_files(split: Split) -> list[Path]:
    """The standard library's top-level modules this split reads, in name order."""
    _check(split, ())
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if p.is_file())
    keep = (
        (lambda i: i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1)
        if split == "heldout"
        else (lambda i: i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1)
    )
    return [p for i, p in enumerate(files) if keep(i)]


def _cut(text: str, split: Split, train_share: float) -> str:
    cut = int(len(text) * train_share)
    cut = text.find("\n", cut) + 1 or cut  # at a line end: no word cut in half
    return text[:cut] if split == "train" else text[cut:]


def _spread(text: str, chars: int, pieces: int = 16) -> str:
    """`chars` characters in `pieces` evenly spaced runs, each from a line start: every book of the
    37, not the first two, and still deterministic."""
    if len(text) <= chars:
        return text
    step, run = len(text) // pieces, chars // pieces
    starts = [text.find("\n", i * step) + 1 for i in range(pieces)]
    return "\n".join(text[a : a + run] for a in starts)


def domain_text(corpus: Path, domain: Domain, split: Split, chars: int) -> str:
    """Up to `chars` characters of one domain's split, in evenly spaced runs (deterministic)."""
    _check(split, (domain,))
    corpus = Path(corpus)
    if domain == "books":
        text = _cut(read_text(corpus / "gutenberg_pd_37books.txt.gz"), split, 0.95)
    elif domain == "shakespeare":
        text = _cut(read_text(corpus / "tinyshakespeare.txt"), split, 0.90)
    elif domain == "stories":
        text = read_text(corpus / ("tinystories_train.txt" if split == "train" else "tinystories_valid.txt"))
    else:
        parts, size = [], 0
        for p in python_files(split):
            if size >= chars:
                break
            parts.append(p.read_text(encoding="utf-8", errors="replace")[:MAX_PY_FILE])
            size += len(parts[-1])
        return "\n\n".join(parts)[:chars]
    return _spread(text, chars)[:chars]


def domain_texts(corpus: Path, split: Split, chars: int, domains=DOMAINS) -> dict[str, str]:
    return {d: domain_text(corpus, d, split, chars) for d in _check(split, domains)}


def domain_ids(tokenizer, corpus: Path, split: Split, tokens: int, domains=DOMAINS) -> dict[str, np.ndarray]:
    """Up to `tokens` token ids per domain (int64), from each domain's start."""
    # ~4 characters per token in English and code for a 49k vocabulary; 8 leaves room for small vocabularies
    return {
        d: encode_text(tokenizer, t)[:tokens].astype(np.int64)
        for d, t in domain_texts(corpus, split, tokens * 8, domains).items()
    }


def mix_ids(tokenizer, corpus: Path, split: Split, tokens: int, domains=DOMAINS) -> np.ndarray:
    """`tokens` ids in all, an equal share from each domain, domains one after another."""
    per = -(-tokens // len(_check(split, domains)))
    return np.concatenate(list(domain_ids(tokenizer, corpus, split, per, domains).values()))[:tokens]


def describe(split: Split) -> dict:
    """What a card records about this split: the files and the rule for each domain."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    return {
        "books": "gutenberg_pd_37books.txt.gz, " + ("first 95%" if split == "train" else "last 5%"),
        "shakespeare": "tinyshakespeare.txt, " + ("first 90%" if split == "train" else "last 10%"),
        "stories": "tinystories_train.txt" if split == "train" else "tinystories_valid.txt",
        "python": {
            "stdlib": f"Python {sysconfig.get_python_version()} standard library",
            "files": [str(p.relative_to(lib)) for p in python_files(split)],
        },
    }
