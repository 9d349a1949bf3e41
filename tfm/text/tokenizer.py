"""Byte-level BPE tokenizer served by tiktoken (no downloads; tokenizer.json files: tfm.text.hf_tokenizer).

Two sources: a `.tiktoken` ranks file (the project's own vocabulary, see `tfm.train.bpe`) or a
Hugging Face GPT-2 folder (`vocab.json` + `merges.txt`). Token ids are what the model sees;
tiktoken works in "ranks" (merge priority). For `.tiktoken` files and real GPT-2 the two are
the same; for other HF vocabularies we keep numpy arrays translating between them.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import tiktoken

from ..core.files import read_json, reading
from .bpe_files import EOT, check_ranks, gpt2_folder, read_ranks_file, write_ranks_file  # noqa: F401 (EOT re-exported)
from .token_files import checked_spec, spec_file, token_ids

PATTERNS = {
    # GPT-2's pre-tokenizer regex (same as HF ByteLevel's), written tiktoken-style.
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
}
RANKS_FILE = "tokenizer.tiktoken"
IDS_FILE = "tokenizer_ids.json"
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}


class TokenText:
    """Text and readable pieces from `decode_bytes`; shared by every tokenizer class
    (`Tokenizer` here, the Hugging Face ones in tfm.text.hf_bytelevel / tfm.text.hf_libtokenizer).
    Needs `decode_bytes(ids)`, `special_tokens` and a `_display` dict."""

    bos_id: int | None = None  # a token to put before a text (Llama's <s>); none for GPT-2 style
    add_bos = False  # whether the model was trained with it before every text
    chat_template: str | None = None  # a Jinja chat template (tfm.text.chat renders it), if the model has one
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

    def __init__(
        self,
        ranks: dict[bytes, int],
        special_tokens: dict[str, int],
        pattern: str = "gpt2",
        name: str = "tfm",
        rank_to_id=None,
    ):
        check_ranks(ranks, "ranks")
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
        self._enc = tiktoken.Encoding(
            name, pat_str=PATTERNS.get(pattern, pattern), mergeable_ranks=ranks, special_tokens=internal
        )
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
    def from_tiktoken_file(
        cls, path, special_tokens: dict[str, int], pattern: str = "gpt2", name: str | None = None, rank_to_id=None
    ):
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
        """Build from a Hugging Face GPT-2 style `vocab.json` + `merges.txt` (read by
        `tfm.text.bpe_files.gpt2_folder`: its docstring says how ranks and ids are made)."""
        ranks, specials, rank_to_id = gpt2_folder(Path(folder))
        with reading("vocab.json"):
            return cls(ranks, specials, "gpt2", name or Path(folder).name, rank_to_id)

    def save(self, folder) -> dict:
        """Write `tokenizer.tiktoken` (sorted by rank) into folder; return its spec dict."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_ranks_file(folder / RANKS_FILE, self._ranks)
        spec = {"file": RANKS_FILE, "pattern": self.pattern, "name": self.name, "special_tokens": dict(self._special)}
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
            raise ValueError(f"token id {int(arr[bad][0])} is not in this vocabulary (vocab_size {self.vocab_size})")
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
            text, end, stop = data[i : i + e.start].decode("utf-8"), i + e.start, i + e.end
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


def _check_specials(ranks: dict[bytes, int], internal: dict[str, int]) -> None:
    used = set(ranks.values())
    for text, r in internal.items():
        if r in used:
            raise ValueError(f"special token {text!r} id {r} collides with a ranked token")
