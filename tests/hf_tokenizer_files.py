"""Tokenizer files of every family kind for the Hugging Face tokenizer tests
(tests/test_hf_tokenizer.py, tests/test_hf_tokenizer_files.py): no vocabulary can be downloaded,
so each tokenizer.json is trained here with the `tokenizers` library on a slice of
/work/shared/corpus plus a battery of hard texts, with the families' exact pre-tokenizers, or
derived from another kind's file. `make_pairs` is the session fixture `tokenizer_pairs`
(tests/conftest.py)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import tokenizers
import transformers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers.convert_slow_tokenizer import TikTokenConverter

from tfm.text.bpe_files import bytes_to_unicode, write_ranks_file
from tfm.text.hf_tokenizer import tokenizer_from_folder

CORPUS = Path("/work/shared/corpus")
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BATTERY = [
    "",
    " ",
    "\n",
    "\t",
    "Hello, world!",
    "Hello world\n\n 😀 é",
    "👩‍👩‍👧‍👦 family 👨🏽‍💻 coder 🏳️‍🌈 flag 🇫🇷 and 👍🏿",
    "你好，世界。我爱自然语言处理。日本語のテキスト、한국어 텍스트",
    "مرحبا بالعالم، هذا نص عربي ١٢٣",
    "Ελληνικά και русский текст",
    "1 12 123 1234 12345 3.14159 1,000,000 2026-11-22 0x1F 9999999999999999",
    "   leading spaces\n\n\n\ttabs\t\tand   runs   \n \n  ",
    "a\r\nb\rc\n\r\n",
    "x" + " " * 30 + "y",
    "def f(x):\n    return {'a': [1, 2]}  # comment\n\n\tif x != 0: pass\n",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|><|endoftext|>",
    "<|endoftext",
    "<|im_start|>user\nhi<|im_end|>",
    "<s>text</s> <unk>",
    "<|begin_of_text|>x<|end_of_text|>",
    "<tool_call>",
    "\u0301",
    "e\u0301 vs é, Å vs A\u030a, ﬁ ligature, ① ², Ⅻ",
    "<|endoftext|>\u0338",
    "It's we'll they've I'M DON'T",
    "mixed: café — “quotes” … ½ ∑ \x00\x07 control \r\n line",
    "\ufeffBOM and \u200b zero width \U0010ffff max \ue000 private",
    "▁ metaspace char ▁▁ typed",
    "<0x0A> typed",
    "\u2028line sep\u2029para \x85 nel \xa0 nbsp \u3000 ideographic",
]


def corpus_text() -> str:
    parts = [
        (CORPUS / "tinyshakespeare.txt").read_text(encoding="utf-8")[:120_000],
        (CORPUS / "tinystories_valid.txt").read_text(encoding="utf-8")[:120_000],
    ]
    with gzip.open(CORPUS / "gutenberg_pd_37books.txt.gz", "rt", encoding="utf-8") as f:
        parts.append(f.read(120_000))
    return "\n".join(parts + BATTERY * 5)


def _bytelevel(pre, normalizer=None, specials=("<|endoftext|>",), vocab=900, ignore_merges=False):
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre, decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(specials),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tok, trainer


def _split_then_bytes(pattern: str):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _sentencepiece():
    """Trained on words (as SentencePiece does; whole lines would take a minute)."""
    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False
    )
    return tok, trainer


def _bos_template(tok, bos: str):
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )


def _untrained(kind: str):
    """(tokenizer, trainer, tokenizer_config.json) of one family kind, before training."""
    plain_bytes = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if kind in ("llama2", "mistral-metaspace"):
        return (*_sentencepiece(), {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})
    if kind == "llama3":
        return (
            *_bytelevel(_split_then_bytes(LLAMA3), None, ("<|begin_of_text|>", "<|end_of_text|>"), ignore_merges=True),
            {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        )
    made = {
        "gpt2": lambda: _bytelevel(plain_bytes),
        # not tiktoken-expressible: served by the library
        "gpt2-prefix-space": lambda: _bytelevel(pre_tokenizers.ByteLevel(add_prefix_space=True)),
        "qwen2": lambda: _bytelevel(
            _split_then_bytes(QWEN2), normalizers.NFC(), ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
        ),
        "neox": lambda: _bytelevel(plain_bytes, normalizers.NFC(), ("<|endoftext|>", "<|padding|>")),
        "smollm": lambda: _bytelevel(
            pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), plain_bytes])
        ),
        # a Split regex that leaves gaps: they must stay pieces
        "letters-only-split": lambda: _bytelevel(_split_then_bytes(r"\p{L}+")),
    }
    if kind not in made:
        raise AssertionError(kind)
    return (*made[kind](), {"eos_token": "<|endoftext|>"})


def _after_training(kind: str, tok) -> None:
    """What each family's file sets after its merges are learned: templates, normalizers, added tokens."""
    if kind == "llama3":
        _bos_template(tok, "<|begin_of_text|>")
    if kind == "llama2":  # Llama 2 / TinyLlama: normalizer Prepend ▁ + Replace, no pre-tokenizer
        tok.pre_tokenizer = None
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    if kind == "mistral-metaspace":  # newer files: Metaspace pre-tokenizer, no split
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    if kind in SENTENCEPIECE:
        _bos_template(tok, "<s>")
    if kind == "qwen2":
        tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    if kind == "neox":  # GPT-NeoX's runs of spaces: ordinary added tokens, matched before BPE
        tok.add_tokens([AddedToken(" " * n, special=False, normalized=True) for n in (2, 3, 4, 8, 24)])


def build(kind: str, text: str, folder: Path) -> Path:
    """Train and save tokenizer.json (+ tokenizer_config.json) of one family kind."""
    tok, trainer, config = _untrained(kind)
    tok.train_from_iterator([text], trainer)
    _after_training(kind, tok)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if kind in SENTENCEPIECE:  # as in Llama 2's file: <0xNN> are vocab, not added
        data["added_tokens"] = [a for a in data["added_tokens"] if not a["content"].startswith("<0x")]
        (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _tiktoken_converted(data: dict, folder: Path) -> dict:
    """`data`'s vocabulary as tiktoken ranks, converted back by transformers' TikTokenConverter."""
    model = data["model"]
    specials = {a["content"] for a in data["added_tokens"]}
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    kept = sorted((i, t) for t, i in model["vocab"].items() if t not in specials)
    ranks = {bytes(to_byte[c] for c in t): r for r, (_, t) in enumerate(kept)}  # dense, as tiktoken's
    write_ranks_file(folder / "ranks.tiktoken", ranks)
    tok = TikTokenConverter(
        vocab_file=str(folder / "ranks.tiktoken"),
        pattern=LLAMA3,
        extra_special_tokens=sorted(specials, key=lambda t: -len(t)),
    ).converted()
    tok.save(str(folder / "tokenizer.json"))
    converted = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert len(converted["model"]["merges"]) > len(model["merges"])  # really the multi-merge form
    return converted


def derive(kind: str, base: Path, folder: Path) -> Path:
    """Files made from another kind's: the older "a b" merges, ids out of merge order, a
    vocabulary entry no merge makes, and a Llama 3 style file converted from tiktoken ranks."""
    data = json.loads((base / "tokenizer.json").read_text(encoding="utf-8"))
    model = data["model"]
    if kind == "gpt2-string-merges":
        model["merges"] = [" ".join(m) for m in model["merges"]]
    elif kind == "shuffled-ids":  # ids are a permutation: tiktoken ranks then map to ids
        added = {a["id"] for a in data["added_tokens"]}
        free = sorted(i for i in model["vocab"].values() if i not in added)
        perm = dict(zip(free, random.Random(0).sample(free, len(free))))
        model["vocab"] = {t: perm.get(i, i) for t, i in model["vocab"].items()}
    elif kind == "orphan":  # tiktoken would merge into it, HF never: served by the library
        model["vocab"]["ĠQzx"] = max(model["vocab"].values()) + 1
        for a in data["added_tokens"]:
            a["id"] += 1 if a["id"] >= model["vocab"]["ĠQzx"] else 0
    elif kind == "metaspace-decoder":  # the decoder as one Metaspace step after ByteFallback
        data["decoder"] = {
            "type": "Sequence",
            "decoders": [
                {"type": "ByteFallback"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            ],
        }
    elif kind == "tiktoken-converted":  # how Llama 3's tokenizer.json was made: several merges per token
        data = _tiktoken_converted(data, folder)
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text((base / "tokenizer_config.json").read_text())
    return folder


DERIVED = {
    "gpt2-string-merges": "gpt2",
    "shuffled-ids": "gpt2",
    "orphan": "gpt2",
    "tiktoken-converted": "llama3",
    "metaspace-decoder": "mistral-metaspace",
}
KINDS = {
    "gpt2": "tiktoken",
    "qwen2": "tiktoken",
    "llama3": "tiktoken",
    "neox": "tiktoken",
    "smollm": "tiktoken",
    "letters-only-split": "tiktoken",
    "gpt2-string-merges": "tiktoken",
    "shuffled-ids": "tiktoken",
    "tiktoken-converted": "tiktoken",
    "orphan": "tokenizers",
    "gpt2-prefix-space": "tokenizers",
    "llama2": "tokenizers",
    "mistral-metaspace": "tokenizers",
    "metaspace-decoder": "tokenizers",
}
SENTENCEPIECE = ("llama2", "mistral-metaspace", "metaspace-decoder")


def make_pairs(tmp_path_factory):
    """pairs(kind) -> (kind, ours, HF's tokenizer, HF's with special-token text as plain text)."""
    text, folders, cache = corpus_text(), {}, {}

    def folder_of(kind: str) -> Path:
        if kind not in folders:
            out = tmp_path_factory.mktemp(kind)
            folders[kind] = derive(kind, folder_of(DERIVED[kind]), out) if kind in DERIVED else build(kind, text, out)
        return folders[kind]

    def get(kind: str):
        if kind not in cache:
            folder = folder_of(kind)
            hf = transformers.AutoTokenizer.from_pretrained(folder)
            hf_plain = transformers.AutoTokenizer.from_pretrained(folder, split_special_tokens=True)
            cache[kind] = kind, tokenizer_from_folder(folder), hf, hf_plain
        return cache[kind]

    get.folder = folder_of
    get.text = text
    return get


def copy_file(pairs, kind: str, tmp_path: Path, edit=None) -> Path:
    """A copy of a kind's tokenizer.json in tmp_path, changed first by `edit(data)` if given."""
    data = json.loads((pairs.folder(kind) / "tokenizer.json").read_text(encoding="utf-8"))
    if edit:
        edit(data)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return tmp_path
