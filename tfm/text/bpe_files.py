"""The files a byte-level BPE vocabulary comes in, read with every count checked: `.tiktoken` ranks
files (`base64token rank` lines; the project's own, from `tfm.train.bpe`) and Hugging Face GPT-2
folders (vocab.json + merges.txt, GPT-2's printable byte alphabet `bytes_to_unicode`).
`tfm.text.tokenizer.Tokenizer` is built from either."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from ..core.files import MAX_JSON_BYTES, read_bytes, read_json, read_text, reading
from .token_files import MAX_TOKEN_ID, token_ids

EOT = "<|endoftext|>"


# ---- ranks files ---------------------------------------------------------------------
def read_ranks_file(path: Path) -> dict[bytes, int]:
    """Parse `base64token rank` lines, with errors that name the file and line."""
    if not path.is_file():
        raise FileNotFoundError(
            f"tokenizer ranks file not found: {path}. Pass the path of a .tiktoken file, "
            "or build the project's vocabulary with `python -m tfm.train.bpe --out assets/tokenizer "
            "FILE...`."
        )
    ranks: dict[bytes, int] = {}
    seen: dict[int, int] = {}
    for lineno, line in enumerate(read_bytes(path, MAX_JSON_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        token, rank = _parse_rank_line(path, lineno, line)
        if rank in seen:
            raise ValueError(f"{path.name}:{lineno}: duplicate rank {rank} (also on line {seen[rank]})")
        if token in ranks:
            raise ValueError(f"{path.name}:{lineno}: duplicate token {token[:40]!r}")
        seen[rank] = lineno
        ranks[token] = rank
    check_ranks(ranks, path.name)
    return ranks


def _parse_rank_line(path: Path, lineno: int, line: bytes) -> tuple[bytes, int]:
    parts = line.split()
    if len(parts) != 2:
        raise ValueError(f"{path.name}:{lineno}: expected 'base64token rank', got {line[:60]!r}")
    try:
        token = base64.b64decode(parts[0], validate=True)
        rank = int(parts[1]) if len(parts[1]) <= 20 else -1
    except (binascii.Error, ValueError):
        raise ValueError(f"{path.name}:{lineno}: bad base64 token or rank in {line[:60]!r}") from None
    if not 0 <= rank < MAX_TOKEN_ID or not token:
        raise ValueError(
            f"{path.name}:{lineno}: empty token, or a rank outside 0..{MAX_TOKEN_ID - 1:,}, in {line[:60]!r}"
        )
    return token, rank


def write_ranks_file(path: Path, ranks: dict[bytes, int]) -> None:
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    lines = [f"{base64.b64encode(t).decode()} {r}\n" for t, r in ordered]
    Path(path).write_text("".join(lines), encoding="ascii")


def check_ranks(ranks: dict[bytes, int], where: str) -> None:
    # tiktoken panics on a byte it cannot encode: every single byte must be a token.
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(
            f"{where}: {len(missing)} of the 256 single bytes have no rank "
            f"(first: {missing[0]:#04x}); a byte-level vocabulary needs all of them"
        )


# ---- Hugging Face GPT-2 folders ------------------------------------------------------
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from bytes to printable characters (as in its encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _ranks_from_merges(path: Path) -> dict[bytes, int]:
    dec = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    if not path.is_file():
        raise FileNotFoundError(f"merges file not found: {path.name} (a GPT-2 folder needs vocab.json and merges.txt)")
    for lineno, line in enumerate(read_text(path, MAX_JSON_BYTES).splitlines(), 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{path.name}:{lineno}: expected two tokens, got {line[:60]!r}")
        try:
            token = bytes(dec[c] for c in parts[0] + parts[1])
        except KeyError:
            raise ValueError(f"{path.name}:{lineno}: not a byte-level merge: {line[:60]!r}") from None
        ranks.setdefault(token, len(ranks))
    return ranks


def _hf_specials(folder: Path, vocab: dict[str, int]) -> dict[str, int]:
    """<|endoftext|> (and other special added tokens) from tokenizer_config.json or vocab."""
    specials = {}
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        data = _read_json(cfg)
        with reading(cfg.name):
            added = data.get("added_tokens_decoder") or {}
            for sid, tok in added.items():
                if tok.get("special", True):
                    specials[str(tok["content"])] = token_ids([int(sid)], cfg.name)[0]
    if EOT not in specials and EOT in vocab:
        specials[EOT] = vocab[EOT]
    return specials


def _read_json(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} not found (a GPT-2 folder needs vocab.json and merges.txt)")
    return read_json(path)


def gpt2_folder(folder: Path) -> tuple[dict[bytes, int], dict[str, int], list[int]]:
    """(ranks, special tokens, rank -> id) of a Hugging Face GPT-2 style folder: ranks are the 256
    single bytes, then each merge in merges.txt order (a merge that re-creates an existing token
    keeps the first rank); ids come from vocab.json."""
    folder = Path(folder)
    vocab = _read_json(folder / "vocab.json")
    if not isinstance(vocab, dict):
        raise ValueError("vocab.json is not a JSON object of token -> id")
    token_ids(vocab.values(), "vocab.json")
    ranks = _ranks_from_merges(folder / "merges.txt")
    enc = bytes_to_unicode()
    rank_to_id = []
    for tok in sorted(ranks, key=ranks.get):
        key = "".join(enc[b] for b in tok)
        if key not in vocab:
            raise ValueError(f"vocab.json: no entry for token {key[:40]!r} (needed by merges.txt or the byte alphabet)")
        rank_to_id.append(vocab[key])
    specials = _hf_specials(folder, vocab)
    return ranks, specials, rank_to_id
