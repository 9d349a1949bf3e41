"""A tokenizer.json served by the `tokenizers` library, behind tfm's tokenizer interface.

For what tiktoken cannot reproduce: SentencePiece-style BPE (Llama 2, TinyLlama, Mistral
v0.1: byte fallback tokens such as <0x0A>, ▁ for spaces) and byte-level files with unusual
options. Encoding is the library's (exact by construction). Each token's bytes are derived
here from its vocabulary text, so pieces stream byte-exactly during generation and show
readably (<0x0A> is a newline, ▁ a space) in every table.
"""

from __future__ import annotations

import json
import re
import threading

import numpy as np

from .bpe_files import bytes_to_unicode
from .hf_tokenizer_file import FromTokenizerFile, TokenizerFile
from .tokenizer import TokenText

BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _decoder_kind(decoder) -> tuple[str, str, int]:
    """("bytelevel" | "metaspace", the space symbol, how many leading spaces decode strips)."""
    steps = decoder.get("decoders", []) if decoder and decoder.get("type") == "Sequence" else [decoder]
    kinds = {s.get("type"): s for s in steps if s}
    if set(kinds) == {"ByteLevel"}:
        return "bytelevel", " ", 0
    if "Metaspace" in kinds and set(kinds) <= {"Metaspace", "ByteFallback", "Fuse", "Strip"}:
        meta = kinds["Metaspace"]
        first = meta.get("prepend_scheme", "always" if meta.get("add_prefix_space", True) else "never")
        return "metaspace", meta.get("replacement", "▁"), int(first != "never")
    replace = kinds.get("Replace", {})
    strip = kinds.get("Strip", {})
    if (
        set(kinds) <= {"Replace", "ByteFallback", "Fuse", "Strip"}
        and replace.get("content") == " "
        and strip.get("content", " ") == " "
        and not strip.get("stop")
    ):
        return "metaspace", replace.get("pattern", {}).get("String", "▁"), int(strip.get("start", 0))
    raise ValueError(
        f"tokenizer.json decoder {json.dumps(decoder)[:120]} is not supported: tfm reads "
        "byte-level (GPT-2 style) and SentencePiece-style (▁, <0xNN>) BPE tokenizers"
    )


def _library(tokenizers, text: str):
    """The tokenizers library's Tokenizer of a tokenizer.json text, without truncation or padding."""
    try:
        tok = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception for bad files
        raise ValueError(f"tokenizer.json: the tokenizers library cannot read it: {str(e)[:200]}") from None
    tok.no_truncation()  # a file may set them; HF's own tokenizer class turns them off too
    tok.no_padding()
    return tok


class LibTokenizer(FromTokenizerFile, TokenText):
    """Same interface the app uses of `tfm.text.tokenizer.Tokenizer`: encode / decode /
    decode_bytes / piece_bytes / display_piece(s) / vocab_size / eot_id / special_tokens."""

    backend = "tokenizers"
    _read_decoder = staticmethod(_decoder_kind)  # tfm.text.wordpiece reads its own decoder

    def __init__(self, file: TokenizerFile, name: str, note: str):
        import tokenizers  # the app's dependency for exactly this case

        self.name, self.backend_note = name, note
        self._use_file(file)
        self._kind, self._space, self._strip = self._read_decoder(file.data.get("decoder"))
        self._plain = _library(tokenizers, json.dumps(file.data))
        self._plain.encode_special_tokens = True  # user text: "<s>" typed is three characters
        # the tokenizer that reads special-token text as the token: built on first use (reading
        # the file is seconds for a 262k vocabulary, and most prompts never ask for it)
        self._special, self._special_lock = None, threading.Lock()
        self._byte_ids: set[int] = set()  # <0xNN> byte-fallback tokens: shown as their byte
        self._pieces = self._piece_table()
        self.vocab_size = len(self._pieces)
        self._display: dict[int, str] = {}

    @property
    def _with_special(self):
        with self._special_lock:
            if self._special is None:
                import tokenizers

                self._special = _library(tokenizers, json.dumps(self._file.data))
            return self._special

    def _piece_table(self) -> list[bytes | None]:
        vocab = {**self._file.data["model"].get("vocab", {}), **{a.content: a.id for a in self._file.added}}
        table: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
        added = {a.id for a in self._file.added}
        byte_fallback = bool(self._file.data["model"].get("byte_fallback"))
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        for text, i in vocab.items():
            if byte_fallback and BYTE_TOKEN.fullmatch(text):
                table[i] = bytes([int(text[3:5], 16)])
                self._byte_ids.add(i)
            elif i in added:
                table[i] = text.encode("utf-8")
            elif self._kind == "bytelevel":
                if not set(text) <= to_byte.keys():
                    raise ValueError(f"token {text!r} is not written in the byte-level alphabet")
                table[i] = bytes(to_byte[c] for c in text)
            else:
                table[i] = text.replace(self._space, " ").encode("utf-8")
        return table

    # ---- encode / decode ----------------------------------------------------------
    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Ids as HF's tokenizer gives them without bos/eos; special-token text stays plain
        text unless `allow_special`."""
        tok = self._with_special if allow_special else self._plain
        return tok.encode(text, add_special_tokens=False).ids

    def decode_bytes(self, ids) -> bytes:
        """The tokens' bytes, less the leading space(s) HF's decoder strips from a text."""
        pieces = [self.piece_bytes(i) for i in ids]
        out = b"".join(pieces)
        n = 0
        while n < self._strip and n < len(out) and out[n : n + 1] == b" ":
            n += 1
        return out[n:]

    def piece_bytes(self, id: int) -> bytes:
        """The token's own bytes (▁ as a space, <0x0A> as byte 0x0A): what it adds mid-text."""
        i = int(np.int64(id))
        if not 0 <= i < len(self._pieces) or self._pieces[i] is None:
            raise ValueError(f"token id {id} is not in this vocabulary (vocab_size {self.vocab_size})")
        return self._pieces[i]

    def _special_text(self, id: int):
        return None if id in self._byte_ids else super()._special_text(id)

    # ---- properties ---------------------------------------------------------------

    def __repr__(self) -> str:
        return f"LibTokenizer(name={self.name!r}, vocab_size={self.vocab_size})"
