"""The tokenizer a GGUF file describes in its metadata: `tokenizer_from_gguf(metadata, name)`.

A GGUF carries no tokenizer.json: llama.cpp stores the vocabulary (`tokenizer.ggml.tokens`),
token types (1 normal, 3 control, 4 user-defined, 6 byte), merges or scores, the special ids,
and `tokenizer.ggml.pre`, the name of the pre-tokenizer the vocabulary was trained with. Here
that metadata becomes the tokenizer.json Hugging Face would write for it, which the existing
back ends serve:

- `tokenizer.ggml.model` = "gpt2" (byte-level BPE: SmolLM, Llama 3, Qwen2, GPT-2) on tiktoken
  (`hf_bytelevel`), split by the regexes named by `tokenizer.ggml.pre`; an unknown name is
  refused with the list of known ones, never guessed (a wrong split gives wrong ids silently).
- "llama" (SentencePiece-style BPE with ▁ and <0xNN> byte fallback: Llama 2, TinyLlama, Gemma) on
  the `tokenizers` library (`hf_libtokenizer`); merges from the file, else rebuilt from the scores
  (Gemma files: from the tokens' order, runs of spaces spelled ▁▁..., as transformers reads them).

Control tokens (type 3) are special tokens (typed as plain text unless `allow_special`),
user-defined ones (type 4) always match whole. `bos_id`, `eot_id` (the file's eos), `add_bos`
(`tokenizer.ggml.add_bos_token`; llama.cpp's default: on for "llama", off for "gpt2") and
`chat_template` (the file's `tokenizer.chat_template` string, or None) are attributes of the
tokenizer returned; `save(folder)` writes the tokenizer.json + tokenizer_config.json it built.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .bpe_files import bytes_to_unicode
from .hf_bytelevel import HFByteLevelTokenizer
from .hf_libtokenizer import LibTokenizer
from .hf_tokenizer import serve
from .hf_tokenizer_file import CONFIG_FILE, HF_FORMAT, TOKENIZER_FILE, AddedToken, TokenizerFile

CONTROL, USER_DEFINED = 3, 4
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
RAW_BYTE_LEVEL = {**BYTE_LEVEL, "use_regex": False}


def _split(pattern: str) -> dict:
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            RAW_BYTE_LEVEL,
        ],
    }


# llama.cpp's `tokenizer.ggml.pre` names -> the pre-tokenizer (as tokenizer.json writes it) of
# the same regexes (llama.cpp's llama-vocab.cpp; Hugging Face's GGUF tokenizer mapping).
PRE_TOKENIZERS = {
    "gpt2": BYTE_LEVEL,
    # SmolLM / StarCoder: every digit alone, then GPT-2's split (SmolLM's own tokenizer.json)
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "starcoder": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "llama-bpe": _split(LLAMA3_SPLIT),
    "llama3": _split(LLAMA3_SPLIT),
    "smaug-bpe": _split(LLAMA3_SPLIT),
    "qwen2": _split(QWEN2_SPLIT),
    "deepseek-r1-qwen": _split(QWEN2_SPLIT),
}
MODELS = ("gpt2", "llama")


def tokenizer_from_gguf(metadata: dict, name: str, source: str = "the GGUF file"):
    """The tokenizer described by a GGUF file's metadata (see the module doc). ValueError says
    what is missing or unsupported."""
    model = metadata.get("tokenizer.ggml.model")
    if model not in MODELS:
        raise ValueError(
            f"{source}: tokenizer.ggml.model {str(model)[:40]!r} is not supported; tfm reads "
            f"{', '.join(map(repr, MODELS))}"
        )
    tokens = _string_list(metadata, "tokenizer.ggml.tokens", source)
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if not isinstance(types, list) or len(types) != len(tokens):
        raise ValueError(f"{source}: tokenizer.ggml.token_type does not have one entry per token")
    file = (_bytelevel_file if model == "gpt2" else _sentencepiece_file)(metadata, tokens, types, source)
    tok = (
        _serve(file, name)
        if model == "gpt2"
        else GGUFLibTokenizer(
            file, name, "SentencePiece-style BPE from the GGUF metadata, served by the tokenizers library"
        )
    )
    template = metadata.get("tokenizer.chat_template")
    tok.chat_template = template if isinstance(template, str) else None
    return tok


def _serve(file: TokenizerFile, name: str):
    """Byte-level BPE on tiktoken when it reproduces the vocabulary exactly, else (e.g. SmolLM's
    vocabulary lacks the bytes UTF-8 never uses, 0xC0, 0xF5-0xFF) on the tokenizers library."""
    return serve(file, name, GGUFByteLevelTokenizer, GGUFLibTokenizer, "from the GGUF metadata, ")


def _string_list(metadata: dict, key: str, source: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise ValueError(f"{source}: {key} is missing or is not a list of strings")
    return value


def _special_id(metadata: dict, key: str, n: int, source: str) -> int | None:
    value = metadata.get(f"tokenizer.ggml.{key}")
    if value is None:
        return None
    if not isinstance(value, int) or not 0 <= value < n:
        raise ValueError(f"{source}: tokenizer.ggml.{key} = {value!r} is not a token id (vocabulary of {n})")
    return value


def _added(tokens: list[str], types: list, keep=lambda t: True) -> list[AddedToken]:
    return [
        AddedToken(i, t, special=ty == CONTROL, normalized=False)
        for i, (t, ty) in enumerate(zip(tokens, types))
        if ty in (CONTROL, USER_DEFINED) and t and keep(t)
    ]


def _file(metadata, tokens, data: dict, added: list[AddedToken], add_bos_default: bool, source: str) -> TokenizerFile:
    bos, eos = (_special_id(metadata, k, len(tokens), source) for k in ("bos_token_id", "eos_token_id"))
    add_bos = metadata.get("tokenizer.ggml.add_bos_token", add_bos_default)
    config = {
        "bos_token": tokens[bos] if bos is not None else None,
        "eos_token": tokens[eos] if eos is not None else None,
        "add_bos_token": bool(add_bos),
    }
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": a.id,
                "content": a.content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": a.special,
            }
            for a in added
        ],
        "post_processor": None,
        **data,
    }
    # what identifies this vocabulary (cheaper than hashing the whole JSON: dumping a 49k vocabulary is slow)
    digest = hashlib.sha256(
        "\0".join(
            [
                *tokens,
                *map(str, data["model"].get("merges") or ()),
                json.dumps(config),
                json.dumps(data["pre_tokenizer"]),
            ]
        ).encode()
    ).hexdigest()
    return TokenizerFile(Path(source).parent, data, config, tuple(added), digest)


def _bytelevel_file(metadata, tokens, types, source) -> TokenizerFile:
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"{source}: tokenizer.ggml.pre {str(pre)[:40]!r} names a pre-tokenizer tfm does not know "
            f"(it never guesses one); known: {', '.join(sorted(PRE_TOKENIZERS))}"
        )
    alphabet = set(bytes_to_unicode().values())
    spell = bytes_to_unicode()
    # A token outside the byte alphabet (llama.cpp stores some control tokens as plain text) is
    # respelled from its UTF-8 bytes, as Hugging Face's GGUF reader does.
    vocab = {
        (t if set(t) <= alphabet else "".join(spell[b] for b in t.encode("utf-8"))): i for i, t in enumerate(tokens)
    }
    if len(vocab) != len(tokens):
        raise ValueError(f"{source}: tokenizer.ggml.tokens lists the same token twice")
    merges = metadata.get("tokenizer.ggml.merges")
    if not isinstance(merges, list) or not all(isinstance(m, str) and m.count(" ") == 1 for m in merges):
        raise ValueError(
            f'{source}: tokenizer.ggml.merges is missing or not a list of "a b" pairs '
            "(a byte-level vocabulary needs its merges)"
        )
    data = {
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "decoder": BYTE_LEVEL,
        "model": _bpe(vocab, merges, fuse_unk=False, byte_fallback=False),
    }
    # control tokens written outside the byte alphabet are llama.cpp mislabels (as HF skips them)
    added = _added(tokens, types, keep=lambda t: set(t) <= alphabet)
    return _file(metadata, tokens, data, added, False, source)


def _sentencepiece_file(metadata, tokens, types, source) -> TokenizerFile:
    original, order = tokens, None
    if str(metadata.get("general.architecture", "")).startswith("gemma"):
        # Gemma files (as transformers' GGUF reader builds them): a token of spaces is spelled with ▁,
        # as the normalised text is; the merges follow the tokens' order in the file, not their scores
        tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
        order = True
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _sentencepiece_merges(metadata, tokens, vocab, order, source)
    prefix = metadata.get("tokenizer.ggml.add_space_prefix", True)
    decoders = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ] + ([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else [])
    data = {
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Metaspace",
            "replacement": "▁",
            "prepend_scheme": "first" if prefix else "never",
            "split": False,
        },
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": _bpe(vocab, [list(m) for m in merges], fuse_unk=True, byte_fallback=True, ignore_merges=False),
    }
    added = _added(original, types, keep=lambda t: t in vocab)  # a respelled run of spaces is BPE's to merge
    return _file(metadata, tokens, data, added, True, source)


def _sentencepiece_merges(metadata, tokens: list[str], vocab: dict[str, int], order: bool | None, source):
    """The file's merges; else ranked from the tokens' order (Gemma) or from their scores (llama)."""
    merges = metadata.get("tokenizer.ggml.merges")
    if merges is None and order is not None:
        return ordered_merges(tokens, vocab)
    if merges is None:
        scores = metadata.get("tokenizer.ggml.scores")
        if not isinstance(scores, list) or len(scores) != len(tokens):
            raise ValueError(f"{source}: a llama tokenizer needs tokenizer.ggml.merges or one score per token")
        return scores_to_merges(vocab, dict(zip(tokens, scores)))
    return [m.split(" ") for m in merges if isinstance(m, str) and m.count(" ") == 1]


def _bpe(vocab: dict[str, int], merges: list, **flags) -> dict:
    """tokenizer.json's BPE model: no dropout, unknown token, prefix or suffix; `flags` as the kind needs."""
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        **flags,
        "vocab": vocab,
        "merges": merges,
    }


def scores_to_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """SentencePiece files keep scores, not merges: every split of a token into two vocabulary
    tokens is a merge, best score first (what Hugging Face's converters do)."""
    merges = []
    for token, score in scores.items():
        local = [
            (token[:i], token[i:], score) for i in range(1, len(token)) if token[:i] in vocab and token[i:] in vocab
        ]
        merges.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def ordered_merges(tokens: list[str], vocab: dict[str, int]) -> list[list[str]]:
    """`scores_to_merges` when each token's score is minus its index (Gemma files, as transformers
    reads them): tokens in file order, each one's splits from the longest first part down, with no
    sort (ties cannot occur: a token and the length of its first part fix a merge). Seconds faster
    on a 262k vocabulary; equal to scores_to_merges (tests/test_gguf_families.py)."""
    merges = []
    for t in (
        sorted(vocab, key=vocab.__getitem__) if len(vocab) < len(tokens) else tokens
    ):  # a repeated token: its last place
        merges.extend([t[:k], t[k:]] for k in range(len(t) - 1, 0, -1) if t[:k] in vocab and t[k:] in vocab)
    return merges


class _FromGGUF:
    """`save` writes the tokenizer.json this tokenizer was built from (there is no file to copy)."""

    chat_template: str | None = None

    def save(self, folder) -> dict:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / TOKENIZER_FILE).write_text(json.dumps(self._file.data, ensure_ascii=False), encoding="utf-8")
        config = dict(self._file.config)
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (folder / CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
        return {"format": HF_FORMAT, "file": TOKENIZER_FILE, "name": self.name}


class GGUFByteLevelTokenizer(_FromGGUF, HFByteLevelTokenizer):
    pass


class GGUFLibTokenizer(_FromGGUF, LibTokenizer):
    pass
