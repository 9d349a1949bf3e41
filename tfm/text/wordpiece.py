"""WordPiece tokenizers (BERT, MiniLM) from a tokenizer.json, served by the `tokenizers` library.

Encoding is the library's: its BertNormalizer lower-cases, strips accents and spaces out
Chinese characters as the file says, unknown words become [UNK]. A prompt becomes what the
model was trained on, `[CLS] text [SEP]`; a prompt with "[SEP]" in it is a sentence pair,
`[CLS] A [SEP] B [SEP]` (segment 1 from B on: `tfm.core.encoder.segment_ids`). Pieces show as
the vocabulary writes them ("play", "##ing"): a "##" piece continues the word before it.
"""

from __future__ import annotations

import json
import re

from .hf_libtokenizer import LibTokenizer
from .hf_tokenizer_file import TokenizerFile

CONTINUE = "##"
PAIR_MARK = "[SEP]"
MASK = "[MASK]"
_LAST_WORD = re.compile(r"\w+(?=\W*$)")


def mask_last_word(text: str) -> str:
    """The text with its last word replaced by [MASK] (unchanged when it has no word)."""
    return _LAST_WORD.sub(MASK, text, count=1)


def is_wordpiece(file: TokenizerFile) -> bool:
    return file.data["model"].get("type") == "WordPiece"


class WordPieceTokenizer(LibTokenizer):
    """LibTokenizer for a WordPiece model: pieces, display and the [CLS]/[SEP] prompt."""

    @staticmethod
    def _read_decoder(decoder) -> tuple[str, str, int]:
        if decoder is not None and (decoder.get("type") != "WordPiece" or decoder.get("prefix", CONTINUE) != CONTINUE):
            raise ValueError(
                f"tokenizer.json decoder {json.dumps(decoder)[:120]} is not supported with a WordPiece "
                f"model: tfm reads WordPiece with the '{CONTINUE}' prefix"
            )
        return "wordpiece", " ", 1  # words join with a space; decode strips the first

    def __init__(self, file: TokenizerFile, name: str, note: str = ""):
        prefix = file.data["model"].get("continuing_subword_prefix", CONTINUE)
        if prefix != CONTINUE:
            raise ValueError(f"tokenizer.json: WordPiece prefix {str(prefix)[:20]!r} is not supported (tfm reads '##')")
        super().__init__(file, name, note or "WordPiece served by the tokenizers library")
        self._vocab_text = {i: t for t, i in self._file.data["model"].get("vocab", {}).items()}
        specials = self.special_tokens
        self.sep_id, self.cls_id = specials.get("[SEP]"), specials.get("[CLS]")
        self.mask_id, self.pad_id = specials.get("[MASK]"), specials.get("[PAD]")

    def _piece_table(self) -> list[bytes | None]:
        vocab = {**self._file.data["model"].get("vocab", {}), **{a.content: a.id for a in self._file.added}}
        table: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
        added = {a.id for a in self._file.added}
        for text, i in vocab.items():
            if i in added:
                table[i] = b" " + text.encode("utf-8")  # [CLS], [SEP]: words of their own
            elif text.startswith(CONTINUE) and len(text) > len(CONTINUE):
                table[i] = text[len(CONTINUE) :].encode("utf-8")  # glued to the piece before
            else:
                table[i] = b" " + text.encode("utf-8")  # a word starts: a space before it
        return table

    def display_piece(self, id: int) -> str:
        """The vocabulary's own text: "play", "##ing", "[CLS]"."""
        i = int(id)
        text = self._special_text(i)
        if text is None:
            self.piece_bytes(i)  # range check
            text = self._vocab_text.get(i, "")
        return text

    def prompt_ids(self, text: str) -> list[int]:
        """`[CLS] text [SEP]`, or `[CLS] A [SEP] B [SEP]` when the text holds "[SEP]" with words
        after it (the first one splits A from B); special-token text such as [MASK] is the token."""
        a, mark, b = text.partition(PAIR_MARK)
        if mark and b.strip():
            return self._with_special.encode(a.strip(), b.strip(), add_special_tokens=True).ids
        return self._with_special.encode(a if mark else text, add_special_tokens=True).ids

    def pair_ids(self, a: str, b: str) -> list[int]:
        """`[CLS] A [SEP] B [SEP]` for two texts."""
        return self._with_special.encode(a, b, add_special_tokens=True).ids

    def segments(self, ids) -> list[int]:
        """Each position's segment (0 for [CLS] A [SEP], 1 after), as the model derives them."""
        seen, out = False, []
        for i in ids:
            out.append(int(seen))
            seen = seen or int(i) == self.sep_id
        return out

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(name={self.name!r}, vocab_size={self.vocab_size})"
