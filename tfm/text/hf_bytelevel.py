"""Byte-level BPE from a Hugging Face tokenizer.json, served by tiktoken.

GPT-2, GPT-NeoX (Pythia), Qwen2, Llama 3 and SmolLM files are byte-level BPE: a regex
splits the text into pieces, each piece's UTF-8 bytes are merged by BPE. tiktoken does the
same with "ranks": it merges the adjacent pair whose concatenation has the lowest rank. A
token's rank is the position of the first merge that makes it, so both agree (tests compare
every id with Hugging Face's own tokenizer). `plan_bytelevel` raises `Unexpressible` for
whatever this cannot reproduce exactly; `tfm.text.hf_tokenizer` then serves the file with the
`tokenizers` library instead.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex
import tiktoken

from .bpe_files import bytes_to_unicode
from .hf_tokenizer_file import AddedToken, FromTokenizerFile, TokenizerFile, Unexpressible
from .tokenizer import PATTERNS, Tokenizer

NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
WHOLE = r"[\s\S]+"  # no regex: the whole piece is one BPE word
# Rust's char::is_numeric (what HF's Digits pre-tokenizer splits on) is Unicode class N.
DIGITS = {True: r"\p{N}", False: r"\p{N}+"}


@dataclass(frozen=True)
class Plan:
    """What the tiktoken Tokenizer is built from. `ranks`: token bytes -> rank; `rank_to_id`:
    None when ranks are the ids; `extra`: added/unreachable tokens -> id (never merged into);
    `pre_split`: regexes applied (isolating matches) before `pattern`, tiktoken's own split."""

    ranks: dict[bytes, int]
    rank_to_id: list[int] | None
    extra: dict[str, int]
    pattern: str
    pre_split: tuple[str, ...]
    normal_form: str | None


def plan_bytelevel(file: TokenizerFile) -> Plan:
    model = file.data["model"]
    _check_model(model, file.data.get("decoder"))
    normal_form = _normal_form(file.data.get("normalizer"))
    *pre_split, pattern = _pre_tokenizer_regexes(file.data.get("pre_tokenizer"))
    for a in file.added:
        if a.lstrip or a.rstrip or a.single_word:
            raise Unexpressible(f"added token {a.content!r} uses lstrip/rstrip/single_word")
        if a.normalized and normal_form and unicodedata.normalize(normal_form, a.content) != a.content:
            raise Unexpressible(f"added token {a.content!r} changes under {normal_form}")
    ranks, rank_to_id, extra = _ranks(model, file.added)
    return Plan(ranks, rank_to_id, extra, pattern, tuple(pre_split), normal_form)


def _check_model(model: dict, decoder) -> None:
    if model.get("type", "BPE") != "BPE":
        raise Unexpressible(f"model type {model.get('type')!r} is not BPE")
    if (
        model.get("byte_fallback")
        or model.get("dropout")
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
    ):
        raise Unexpressible("BPE with byte_fallback, dropout or sub-word affixes (SentencePiece style)")
    if not isinstance(decoder, dict) or decoder.get("type") != "ByteLevel":
        raise Unexpressible(f"decoder {decoder and decoder.get('type')!r} is not ByteLevel")


def _normal_form(normalizer) -> str | None:
    """A Unicode normal form (what Qwen2 and GPT-NeoX use); any other normalizer is refused."""
    if normalizer is None:
        return None
    kind = normalizer.get("type")
    if kind == "Sequence":
        forms = [_normal_form(n) for n in normalizer.get("normalizers", [])]
        forms = [f for f in forms if f]
        if len(forms) > 1:
            raise Unexpressible("more than one Unicode normalizer in a Sequence")
        return forms[0] if forms else None
    if kind in NORMAL_FORMS:
        return kind
    raise Unexpressible(f"normalizer {kind!r}")


def _pre_tokenizer_regexes(pre) -> list[str]:
    """Stages as regexes whose matches become pieces (gaps between matches stay pieces too).
    The last one is tiktoken's pattern; the ByteLevel step must come last."""
    stages = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre] if pre else []
    if not stages or stages[-1].get("type") != "ByteLevel":
        raise Unexpressible("the pre-tokenizer does not end with ByteLevel (not byte-level BPE)")
    *before, last = stages
    if last.get("add_prefix_space"):
        raise Unexpressible("ByteLevel add_prefix_space=true")
    out = [_stage_regex(s) for s in before]
    if last.get("use_regex", True):
        out.append(PATTERNS["gpt2"])
    elif not out:
        out.append(WHOLE)
    for r in out:
        _check_regex(r)
    return out


def _stage_regex(stage: dict) -> str:
    kind = stage.get("type")
    if kind == "Digits":
        return DIGITS[bool(stage.get("individual_digits"))]
    if kind == "Split" and stage.get("behavior") == "Isolated" and not stage.get("invert"):
        pattern = stage.get("pattern", {})
        if "Regex" in pattern:
            return pattern["Regex"]
        if "String" in pattern:
            return regex.escape(pattern["String"])
    raise Unexpressible(f"pre-tokenizer step {kind!r} {_describe(stage)}")


def _describe(stage: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in stage.items() if k not in ("type", "pattern"))


def _check_regex(pattern: str) -> None:
    """The regex must compile for both engines and never match the empty string."""
    try:
        compiled = regex.compile(pattern)
        tiktoken.Encoding(
            "probe", pat_str=covering(pattern), mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={}
        )
    except Exception as e:  # noqa: BLE001 - regex.error / tiktoken's ValueError: both mean "cannot"
        raise Unexpressible(f"pre-tokenizer regex {pattern[:60]!r} does not compile here: {e}") from None
    probe = "Ab 12\n\n  x'y\t!? 你好 é"
    if any(m.start() == m.end() for m in compiled.finditer(probe)):
        raise Unexpressible(f"pre-tokenizer regex {pattern[:60]!r} can match an empty string")


def covering(pattern: str) -> str:
    """tiktoken skips text its pattern does not match; HF keeps such gaps as pieces. Add
    alternatives that take a gap up to the next match (never tried where `pattern` matches)."""
    return rf"(?:{pattern})|[\s\S]+?(?=(?:{pattern}))|[\s\S]+"


# ---- ranks -----------------------------------------------------------------------------
# Byte-level symbol -> its byte as a code point, for str.translate + encode("latin-1"); the
# code points below 256 that are not symbols map to one that latin-1 refuses.
_SYMBOL_TO_BYTE = {cp: 0xFFFF for cp in range(256)}
_SYMBOL_TO_BYTE.update({ord(c): b for b, c in bytes_to_unicode().items()})


def _merges(model: dict):
    for m in model.get("merges") or []:
        pair = m.split(" ") if isinstance(m, str) else m
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f'tokenizer.json: bad merge {str(m)[:60]!r} (expected "a b" or [a, b])')
        yield pair[0], pair[1]


def _ranks(model: dict, added: tuple[AddedToken, ...]):
    """Ranks in merge order; ranks are the ids when ids follow that order (GPT-2, Llama 3...).
    Returns (ranks, rank_to_id or None, extra): `extra` are the added tokens BPE does not make."""
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise ValueError("tokenizer.json: model.vocab is not a {token: id} object")
    singles = {}
    for b, c in bytes_to_unicode().items():
        if c not in vocab:
            raise Unexpressible(f"the vocabulary lacks byte {b:#04x} ({c!r}); not every text is encodable")
        singles[bytes([b])] = vocab[c]
    made, made_ids = {}, set()  # merge result bytes -> id, in first-merge order
    for a, b in _merges(model):
        i = vocab.get(a + b)
        if i is None or a not in vocab or b not in vocab:
            raise ValueError(f"tokenizer.json: merge {a!r} {b!r} uses a token not in the vocabulary")
        if i not in made_ids:  # Llama 3's file has several merges per token: the first counts
            made_ids.add(i)
            made[_to_bytes(a + b)] = i
    reachable = set(singles.values()) | made_ids
    extra = {a.content: a.id for a in added if a.id not in reachable}
    known = reachable | set(extra.values())
    orphans = [t for t, i in vocab.items() if i not in known]
    if orphans:  # tiktoken would merge into them, HF never does
        raise Unexpressible(
            f"{len(orphans)} vocabulary tokens (first {orphans[0]!r}) are neither bytes nor made by a merge"
        )
    ids = list(made.values())
    if all(x < y for x, y in zip(ids, ids[1:])) and not set(singles.values()) & set(ids):
        return {**singles, **made}, None, extra
    ordered = sorted(singles) + list(made)
    return {t: r for r, t in enumerate(ordered)}, [singles.get(t, made.get(t)) for t in ordered], extra


def _to_bytes(text: str) -> bytes:
    try:
        return text.translate(_SYMBOL_TO_BYTE).encode("latin-1")
    except UnicodeEncodeError:
        raise Unexpressible(f"token {text!r} is not written in the byte-level alphabet") from None


# ---- the tokenizer ---------------------------------------------------------------------
class AddedMatcher:
    """Finds added tokens in text, leftmost-longest (as HF's added vocabulary does)."""

    def __init__(self, tokens: list[AddedToken]):
        self.by_text = {t.content: t for t in tokens}
        longest_first = sorted(self.by_text, key=len, reverse=True)
        self.regex = regex.compile("|".join(map(regex.escape, longest_first))) if tokens else None

    def split(self, text: str, allow_special: bool):
        """(text, None) segments and ("", token) matches; a special token that is not allowed
        stays part of the text around it (as HF's encode_special_tokens=True does)."""
        if self.regex is None:
            yield text, None
            return
        start = 0
        for m in self.regex.finditer(text):
            tok = self.by_text[m.group()]
            if tok.special and not allow_special:
                continue
            yield text[start : m.start()], None
            yield "", tok
            start = m.end()
        yield text[start:], None


class HFByteLevelTokenizer(FromTokenizerFile, Tokenizer):
    """A tokenizer.json byte-level BPE on tiktoken. Same interface as `Tokenizer`; adds the
    file's normalizer, its added tokens (matched before BPE) and pre-split steps."""

    def __init__(self, file: TokenizerFile, plan: Plan, name: str):
        super().__init__(plan.ranks, plan.extra, covering(plan.pattern), name, plan.rank_to_id)
        self._use_file(file)
        self._form = plan.normal_form
        self._pre_split = [regex.compile(p) for p in plan.pre_split]
        # Without a normalizer every added token is matched in one pass over the raw text.
        raw = [a for a in file.added if not (a.normalized and self._form)]
        self._raw = AddedMatcher(raw)
        self._normalized = AddedMatcher([a for a in file.added if a.normalized and self._form])

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Ids for text, as HF's tokenizer gives them without adding bos/eos. Special-token
        text is plain text unless `allow_special`; ordinary added tokens always match."""
        ids: list[int] = []
        for raw, tok in self._raw.split(text, allow_special):
            if tok is not None:
                ids.append(tok.id)
                continue
            if self._form:
                raw = unicodedata.normalize(self._form, raw)
            for seg, tok2 in self._normalized.split(raw, allow_special):
                if tok2 is not None:
                    ids.append(tok2.id)
                elif seg:
                    ids.extend(self._encode_plain(seg))
        return ids

    def _encode_plain(self, text: str) -> list[int]:
        pieces = [text]
        for stage in self._pre_split:  # e.g. Digits before ByteLevel: split, keep the gaps
            pieces = [p for piece in pieces for p in isolate(stage, piece)]
        out: list[int] = []
        for piece in pieces:
            out.extend(super().encode(piece))
        return out


def isolate(pattern: regex.Pattern, text: str) -> list[str]:
    """Split text into the pattern's matches and the gaps between them (HF 'Isolated')."""
    out, start = [], 0
    for m in pattern.finditer(text):
        if m.start() > start:
            out.append(text[start : m.start()])
        out.append(m.group())
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out
