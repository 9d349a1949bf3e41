"""Byte-level BPE tokenizer served by tiktoken (no downloads; tokenizer.json files: tfm.text.hf_tokenizer).

Two sources: a `.tiktoken` ranks file (the project's own vocabulary, see `tfm.train.bpe`) or a
Hugging Face GPT-2 folder (`vocab.json` + `merges.txt`). Token ids are what the model sees;
tiktoken works in "ranks" (merge priority). For `.tiktoken` files and real GPT-2 the two are
the same; for other HF vocabularies we keep numpy arrays translating between them.
"""

from __future__ import annotations

import base64
import binascii
import json
import unicodedata
from pathlib import Path

import numpy as np
import tiktoken

from ..core.files import MAX_JSON_BYTES, read_bytes, read_json, read_text, reading
from .token_files import MAX_TOKEN_ID, checked_spec, spec_file, token_ids

PATTERNS = {
    # GPT-2's pre-tokenizer regex (same as HF ByteLevel's), written tiktoken-style.
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}
EOT = "<|endoftext|>"
RANKS_FILE = "tokenizer.tiktoken"
IDS_FILE = "tokenizer_ids.json"
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}


class TokenText:
    """Text and readable pieces from `decode_bytes`; shared by every tokenizer class
    (`Tokenizer` here, the Hugging Face ones in tfm.text.hf_bytelevel / tfm.text.hf_libtokenizer).
    Needs `decode_bytes(ids)`, `special_tokens` and a `_display` dict."""

    bos_id: int | None = None  # a token to put before a text (Llama's <s>); none for GPT-2 style
    add_bos = False            # whether the model was trained with it before every text
    chat_template: str | None = None   # a Jinja chat template (tfm.text.chat renders it), if the model has one
    template_tokens: dict[str, str] = {}  # texts a chat template reads: bos_token, eos_token, ... (never mutated)

    def prompt_ids(self, text: str) -> list[int]:
        """The ids a model reads for a user's prompt: `encode(text)` (special-token text stays
        text) after the start token the model expects (Llama's <s>, Llama 3's
        <|begin_of_text|>), as Hugging Face's tokenizer adds it."""
        start = [self.bos_id] if self.add_bos and self.bos_id is not None else []
        return start + self.encode(text)

    def decode(self, ids) -> str:
        """Decode ids to text; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ---- pieces -------------------------------------------------------------------
    def piece_bytes(self, id: int) -> bytes:
        return self.decode_bytes([id])

    def piece(self, id: int) -> str:
        """The token's raw text (a partial UTF-8 character becomes U+FFFD)."""
        return self.piece_bytes(id).decode("utf-8", errors="replace")

    def display_piece(self, id: int) -> str:
        """Readable token text for tables: ␣ space, ↵ newline, ⇥ tab, \\xNN other controls,
        <E2 80> for bytes that are not a whole UTF-8 character; specials as their text."""
        if id not in self._display:
            text = self._special_text(id)
            self._display[id] = text if text is not None else readable_bytes(self.piece_bytes(id))
        return self._display[id]

    def display_pieces(self, ids) -> list[str]:
        return [self.display_piece(int(i)) for i in ids]

    def _special_text(self, id: int):
        for text, sid in self.special_tokens.items():
            if sid == id:
                return text
        return None


class Tokenizer(TokenText):
    """Encode/decode text and show tokens readably.

    `ranks` maps token bytes to tiktoken rank; `special_tokens` maps text to public id.
    `rank_to_id` (optional) maps each rank to its public id when they differ.
    """

    backend = "tiktoken"

    def __init__(self, ranks: dict[bytes, int], special_tokens: dict[str, int],
                 pattern: str = "gpt2", name: str = "tfm", rank_to_id=None):
        _check_ranks(ranks, "ranks")
        self.name = name
        self.pattern = pattern
        self._ranks = ranks
        self._special = dict(special_tokens)
        n_ranks = max(ranks.values()) + 1
        if rank_to_id is None:
            internal = dict(self._special)
            mapping = None
        else:
            # Specials get internal ranks right after the mergeable ones.
            internal = {t: n_ranks + i for i, t in enumerate(self._special)}
            mapping = np.full(n_ranks + len(internal), -1, dtype=np.int64)
            mapping[:n_ranks] = np.asarray(rank_to_id, dtype=np.int64)
            for t, r in internal.items():
                mapping[r] = self._special[t]
        _check_specials(ranks, internal)
        self._enc = tiktoken.Encoding(name, pat_str=PATTERNS.get(pattern, pattern),
                                      mergeable_ranks=ranks, special_tokens=internal)
        self._set_mapping(mapping, n_ranks, internal)
        self._display: dict[int, str] = {}
        self._piece_bytes: dict[int, bytes] = {}

    def _set_mapping(self, mapping, n_ranks, internal):
        """Build rank->id / id->rank arrays; dropped when they are the identity."""
        if mapping is not None and np.array_equal(mapping, np.arange(len(mapping))):
            mapping = None
        self._rank_to_id = mapping
        if mapping is None:
            ids = list(self._ranks.values()) + list(internal.values())
            self.vocab_size = max(ids) + 1
            self._id_to_rank = None
            self._valid = np.zeros(self.vocab_size, dtype=bool)
            self._valid[ids] = True
            return
        if len(set(mapping.tolist())) != len(mapping) or mapping.min() < 0:
            raise ValueError("token ids are not a one-to-one mapping of the ranks")
        self.vocab_size = int(mapping.max()) + 1
        self._id_to_rank = np.full(self.vocab_size, -1, dtype=np.int64)
        self._id_to_rank[mapping] = np.arange(len(mapping))
        self._valid = self._id_to_rank >= 0

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_tiktoken_file(cls, path, special_tokens: dict[str, int],
                           pattern: str = "gpt2", name: str | None = None, rank_to_id=None):
        """Load a `.tiktoken` ranks file (parsed here: tiktoken's loader caches by path)."""
        path = Path(path)
        ranks = read_ranks_file(path)
        return cls(ranks, special_tokens, pattern, name or path.parent.name or "tfm", rank_to_id)

    @classmethod
    def from_spec(cls, folder, spec: dict):
        """Rebuild from the dict `save()` returned (stored in a model's config.json); a copied
        Hugging Face tokenizer.json is `tfm.text.hf_tokenizer.tokenizer_from_spec`'s."""
        folder = Path(folder)
        file, specials, pattern, name = checked_spec(spec, PATTERNS)
        rank_to_id = None
        if spec.get("ids_file") is not None:
            ids_file = spec_file(spec, "ids_file")
            rank_to_id = token_ids(read_json(folder / ids_file), ids_file)
        if not (folder / file).is_file():
            raise FileNotFoundError(f"config.json's tokenizer names {file[:60]!r}, which is not in the model folder")
        with reading(file):
            return cls.from_tiktoken_file(folder / file, specials, pattern, name, rank_to_id)

    @classmethod
    def from_hf_gpt2_folder(cls, folder, name: str | None = None):
        """Build from a Hugging Face GPT-2 style `vocab.json` + `merges.txt`.

        Ranks are the 256 single bytes, then each merge in merges.txt order (a merge that
        re-creates an existing token keeps the first rank). Ids come from vocab.json.
        """
        folder = Path(folder)
        vocab = _read_json(folder / "vocab.json")
        if not isinstance(vocab, dict):
            raise ValueError("vocab.json is not a JSON object of token -> id")
        token_ids(vocab.values(), "vocab.json")
        ranks = _ranks_from_merges(folder / "merges.txt")
        enc = _bytes_to_unicode()
        rank_to_id = []
        for tok in sorted(ranks, key=ranks.get):
            key = "".join(enc[b] for b in tok)
            if key not in vocab:
                raise ValueError(f"vocab.json: no entry for token {key[:40]!r} "
                                 "(needed by merges.txt or the byte alphabet)")
            rank_to_id.append(vocab[key])
        specials = _hf_specials(folder, vocab)
        with reading("vocab.json"):
            return cls(ranks, specials, "gpt2", name or folder.name, rank_to_id)

    def save(self, folder) -> dict:
        """Write `tokenizer.tiktoken` (sorted by rank) into folder; return its spec dict."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_ranks_file(folder / RANKS_FILE, self._ranks)
        spec = {"file": RANKS_FILE, "pattern": self.pattern, "name": self.name,
                "special_tokens": dict(self._special)}
        if self._rank_to_id is not None:
            n_ranks = len(self._ranks)
            (folder / IDS_FILE).write_text(json.dumps(self._rank_to_id[:n_ranks].tolist()))
            spec["ids_file"] = IDS_FILE
        return spec

    # ---- encode / decode ----------------------------------------------------------
    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Encode text to token ids.

        By default this is for user text: special-token text such as "<|endoftext|>" typed
        by a user is encoded as ordinary characters (several normal tokens), never as the
        control token and never raising. `allow_special=True` (programmatic use, e.g.
        document separators in training data) maps special-token text to its special id.
        """
        if allow_special:
            ranks = self._enc.encode(text, allowed_special="all")
        else:
            ranks = self._enc.encode_ordinary(text)
        if self._rank_to_id is None:
            return ranks
        return self._rank_to_id[np.asarray(ranks, dtype=np.int64)].tolist()

    def decode_bytes(self, ids) -> bytes:
        return self._enc.decode_bytes(self._to_ranks(ids))

    def piece_bytes(self, id: int) -> bytes:
        """One token's bytes, remembered per id (at most one entry per token): a batched
        generation step asks for every row's, and one id through `decode_bytes` pays tiktoken's
        array checks each time (docs/benchmarks.md)."""
        got = self._piece_bytes.get(id)
        if got is None:
            got = self._piece_bytes[int(id)] = self.decode_bytes([id])  # raises for an unknown id
        return got

    def _to_ranks(self, ids) -> list[int]:
        arr = np.asarray(list(ids), dtype=np.int64)
        bad = (arr < 0) | (arr >= self.vocab_size)
        if not bad.any():
            bad = ~self._valid[arr]
        if bad.any():
            raise ValueError(f"token id {int(arr[bad][0])} is not in this vocabulary "
                             f"(vocab_size {self.vocab_size})")
        return arr.tolist() if self._id_to_rank is None else self._id_to_rank[arr].tolist()

    # ---- properties ---------------------------------------------------------------
    @property
    def eot_id(self) -> int | None:
        return self._special.get(EOT)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    @property
    def n_ranks(self) -> int:
        return len(self._ranks)

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, vocab_size={self.vocab_size})"


# ---- display helpers ---------------------------------------------------------------
def readable_bytes(data: bytes) -> str:
    """Valid UTF-8 runs shown as text (whitespace/controls made visible), others as hex."""
    out, bad, i = [], [], 0
    while i < len(data):
        try:
            text, end, stop = data[i:].decode("utf-8"), len(data), len(data)
        except UnicodeDecodeError as e:
            text, end, stop = data[i:i + e.start].decode("utf-8"), i + e.start, i + e.end
        if text:  # flush pending invalid bytes before valid text
            out.append(_hex(bad) + _visible(text))
            bad = []
        bad.extend(data[end:stop])
        i = stop
    return "".join(out) + _hex(bad)


def _hex(bad: list[int]) -> str:
    return "<" + " ".join(f"{b:02X}" for b in bad) + ">" if bad else ""


def _visible(text: str) -> str:
    out = []
    for ch in text:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif unicodedata.category(ch) == "Cc":
            out.append(f"\\x{ord(ch):02X}")
        elif unicodedata.category(ch) in ("Cf", "Zl", "Zp"):  # invisible (the ZWJ) or line breaking
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


# ---- ranks files ---------------------------------------------------------------------
def read_ranks_file(path: Path) -> dict[bytes, int]:
    """Parse `base64token rank` lines, with errors that name the file and line."""
    if not path.is_file():
        raise FileNotFoundError(
            f"tokenizer ranks file not found: {path}. Pass the path of a .tiktoken file, "
            "or build the project's vocabulary with `python -m tfm.train.bpe --out assets/tokenizer "
            "FILE...`.")
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
    _check_ranks(ranks, path.name)
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
        raise ValueError(f"{path.name}:{lineno}: empty token, or a rank outside 0..{MAX_TOKEN_ID - 1:,}, "
                         f"in {line[:60]!r}")
    return token, rank


def write_ranks_file(path: Path, ranks: dict[bytes, int]) -> None:
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    lines = [f"{base64.b64encode(t).decode()} {r}\n" for t, r in ordered]
    Path(path).write_text("".join(lines), encoding="ascii")


def _check_ranks(ranks: dict[bytes, int], where: str) -> None:
    # tiktoken panics on a byte it cannot encode: every single byte must be a token.
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"{where}: {len(missing)} of the 256 single bytes have no rank "
                         f"(first: {missing[0]:#04x}); a byte-level vocabulary needs all of them")


def _check_specials(ranks: dict[bytes, int], internal: dict[str, int]) -> None:
    used = set(ranks.values())
    for text, r in internal.items():
        if r in used:
            raise ValueError(f"special token {text!r} id {r} collides with a ranked token")


# ---- Hugging Face GPT-2 folders ------------------------------------------------------
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from bytes to printable characters (as in its encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _ranks_from_merges(path: Path) -> dict[bytes, int]:
    dec = {c: b for b, c in _bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    if not path.is_file():
        raise FileNotFoundError(f"merges file not found: {path.name} (a GPT-2 folder needs "
                                "vocab.json and merges.txt)")
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
        raise FileNotFoundError(
            f"{path.name} not found (a GPT-2 folder needs vocab.json and merges.txt)")
    return read_json(path)
