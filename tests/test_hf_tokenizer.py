"""tfm.hf_tokenizer: ids equal Hugging Face's fast tokenizer on a battery of hard texts, for
tokenizer.json files of every family kind (GPT-2, Qwen2, Llama 3, GPT-NeoX, SmolLM byte-level
BPE on tiktoken; Llama 2 / Mistral SentencePiece-style BPE on the `tokenizers` library).

No vocabulary can be downloaded: each file is trained here with the `tokenizers` library on
a slice of /work/shared/corpus plus the battery, with the families' exact pre-tokenizers."""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

from tfm.hf_tokenizer import tokenizer_from_folder  # noqa: E402
from tfm.tokenizer import Tokenizer  # noqa: E402

CORPUS = Path("/work/shared/corpus")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BATTERY = [
    "", " ", "\n", "\t", "Hello, world!", "Hello world\n\n 😀 é",
    "👩‍👩‍👧‍👦 family 👨🏽‍💻 coder 🏳️‍🌈 flag 🇫🇷 and 👍🏿",
    "你好，世界。我爱自然语言处理。日本語のテキスト、한국어 텍스트",
    "مرحبا بالعالم، هذا نص عربي ١٢٣", "Ελληνικά και русский текст",
    "1 12 123 1234 12345 3.14159 1,000,000 2026-11-22 0x1F 9999999999999999",
    "   leading spaces\n\n\n\ttabs\t\tand   runs   \n \n  ", "a\r\nb\rc\n\r\n", "x" + " " * 30 + "y",
    "def f(x):\n    return {'a': [1, 2]}  # comment\n\n\tif x != 0: pass\n",
    "<|endoftext|>", "before<|endoftext|>after <|endoftext|><|endoftext|>", "<|endoftext",
    "<|im_start|>user\nhi<|im_end|>", "<s>text</s> <unk>", "<|begin_of_text|>x<|end_of_text|>",
    "<tool_call>", "\u0301", "e\u0301 vs é, Å vs A\u030a, ﬁ ligature, ① ², Ⅻ", "<|endoftext|>\u0338",
    "It's we'll they've I'M DON'T", "mixed: café — “quotes” … ½ ∑ \x00\x07 control \r\n line",
    "\ufeffBOM and \u200b zero width \U0010ffff max \ue000 private", "▁ metaspace char ▁▁ typed",
    "<0x0A> typed", "\u2028line sep\u2029para \x85 nel \xa0 nbsp \u3000 ideographic",
]


def corpus_text() -> str:
    parts = [(CORPUS / "tinyshakespeare.txt").read_text(encoding="utf-8")[:120_000],
             (CORPUS / "tinystories_valid.txt").read_text(encoding="utf-8")[:120_000]]
    with gzip.open(CORPUS / "gutenberg_pd_37books.txt.gz", "rt", encoding="utf-8") as f:
        parts.append(f.read(120_000))
    return "\n".join(parts + BATTERY * 5)


@pytest.fixture(scope="module")
def training_text():
    return corpus_text()


def _bytelevel(pre, normalizer=None, specials=("<|endoftext|>",), vocab=900, ignore_merges=False):
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre, decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


def _split_then_bytes(pattern: str):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _sentencepiece(metaspace: bool):
    """Llama 2 / TinyLlama (normalizer Prepend ▁ + Replace) or newer Mistral files (Metaspace)."""
    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  show_progress=False)
    return tok, trainer


def _bos_template(tok, bos: str):
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                       special_tokens=[(bos, tok.token_to_id(bos))])


def build(kind: str, text: str, folder: Path) -> Path:
    """Train and save tokenizer.json (+ tokenizer_config.json) of one family kind."""
    config = {"eos_token": "<|endoftext|>"}
    if kind == "gpt2":
        tok, tr = _bytelevel(pre_tokenizers.ByteLevel(add_prefix_space=False))
    elif kind == "gpt2-prefix-space":  # not tiktoken-expressible: served by the library
        tok, tr = _bytelevel(pre_tokenizers.ByteLevel(add_prefix_space=True))
    elif kind == "qwen2":
        tok, tr = _bytelevel(_split_then_bytes(QWEN2), normalizers.NFC(),
                             ("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    elif kind == "llama3":
        tok, tr = _bytelevel(_split_then_bytes(LLAMA3), None, ("<|begin_of_text|>", "<|end_of_text|>"),
                             ignore_merges=True)
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    elif kind == "neox":
        tok, tr = _bytelevel(pre_tokenizers.ByteLevel(add_prefix_space=False), normalizers.NFC(),
                             ("<|endoftext|>", "<|padding|>"))
    elif kind == "smollm":
        tok, tr = _bytelevel(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                      pre_tokenizers.ByteLevel(add_prefix_space=False)]))
    elif kind == "letters-only-split":  # a Split regex that leaves gaps: they must stay pieces
        tok, tr = _bytelevel(_split_then_bytes(r"\p{L}+"))
    elif kind in ("llama2", "mistral-metaspace"):
        tok, tr = _sentencepiece(metaspace=kind != "llama2")
        config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    else:
        raise AssertionError(kind)
    tok.train_from_iterator([text], tr)
    if kind == "llama3":
        _bos_template(tok, "<|begin_of_text|>")
    if kind in ("llama2", "mistral-metaspace"):
        _bos_template(tok, "<s>")
    if kind == "qwen2":
        tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    if kind == "neox":  # GPT-NeoX's runs of spaces: ordinary added tokens, matched before BPE
        tok.add_tokens([AddedToken(" " * n, special=False, normalized=True) for n in (2, 3, 4, 8, 24)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if kind in ("llama2", "mistral-metaspace"):  # as in Llama 2's file: <0xNN> are vocab, not added
        data["added_tokens"] = [a for a in data["added_tokens"] if not a["content"].startswith("<0x")]
        (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


KINDS = {"gpt2": "tiktoken", "qwen2": "tiktoken", "llama3": "tiktoken", "neox": "tiktoken",
         "smollm": "tiktoken", "letters-only-split": "tiktoken", "gpt2-prefix-space": "tokenizers",
         "llama2": "tokenizers", "mistral-metaspace": "tokenizers"}


@pytest.fixture(scope="module", params=list(KINDS))
def pair(request, training_text, tmp_path_factory):
    """(kind, ours, HF's fast tokenizer, HF's with special-token text split as plain text)."""
    folder = build(request.param, training_text, tmp_path_factory.mktemp(request.param))
    file = str(folder / "tokenizer.json")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=file)
    hf_plain = transformers.PreTrainedTokenizerFast(tokenizer_file=file, split_special_tokens=True)
    return request.param, tokenizer_from_folder(folder), hf, hf_plain


def test_backend(pair):
    kind, ours, _, _ = pair
    assert ours.backend == KINDS[kind], ours.backend_note
    assert isinstance(ours, Tokenizer) == (KINDS[kind] == "tiktoken")


@pytest.mark.parametrize("text", BATTERY)
def test_ids_equal_hugging_face(pair, text):
    _, ours, hf, hf_plain = pair
    assert ours.encode(text) == hf_plain(text, add_special_tokens=False)["input_ids"]
    assert ours.encode(text, allow_special=True) == hf(text, add_special_tokens=False)["input_ids"]


def test_ids_equal_on_corpus_lines(pair, training_text):
    _, ours, hf, hf_plain = pair
    lines = training_text.splitlines(keepends=True)[::7][:400]
    assert [ours.encode(s) for s in lines] == hf_plain(lines, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", BATTERY)
def test_decode(pair, text):
    """decode equals HF's; the text itself comes back unless the tokenizer normalizes it."""
    kind, ours, hf, _ = pair
    ids = ours.encode(text, allow_special=True)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False)
    expected = unicodedata.normalize("NFC", text) if kind in ("qwen2", "neox") else text
    if KINDS[kind] == "tiktoken" or "▁" not in text:  # SentencePiece reads a typed ▁ as a space
        assert ours.decode(ids) == expected
    plain = ours.encode(text)
    assert ours.decode(plain) == ours.decode(ids)


@pytest.mark.parametrize("text", BATTERY)
def test_pieces_stream_the_text(pair, text):
    """Generation streams piece_bytes after the first token: that must rebuild decode_bytes."""
    _, ours, _, _ = pair
    ids = ours.encode("Once " + text)
    assert ours.decode_bytes(ids[:1]) + b"".join(ours.piece_bytes(i) for i in ids[1:]) == ours.decode_bytes(ids)
    for i in ids:
        shown = ours.display_piece(i)
        assert shown and not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in shown), shown


def test_special_tokens_and_roles(pair):
    kind, ours, hf, _ = pair
    added = hf.backend_tokenizer.get_added_tokens_decoder()
    assert ours.special_tokens == {t.content: i for i, t in added.items() if t.special
                                   and not t.content.startswith("<0x")}
    assert ours.eot_id == hf.convert_tokens_to_ids(hf.eos_token) if hf.eos_token else ours.eot_id is None
    with_bos = hf("hi")["input_ids"]  # add_special_tokens=True: what HF puts around a text
    assert ours.add_bos == (with_bos[0] != hf("hi", add_special_tokens=False)["input_ids"][0])
    if ours.add_bos:
        assert with_bos[0] == ours.bos_id
    for text, i in ours.special_tokens.items():
        assert ours.display_piece(i) == text and ours.decode([i]) == text
        assert ours.encode(text, allow_special=True) == [i]
    assert ours.vocab_size == max(hf.get_vocab().values()) + 1


def test_byte_fallback_pieces_are_readable(pair):
    kind, ours, hf, _ = pair
    if KINDS[kind] != "tokenizers" or kind.startswith("gpt2"):
        pytest.skip("byte-fallback tokens exist only in SentencePiece-style files")
    newline = hf.convert_tokens_to_ids("<0x0A>")
    assert ours.piece_bytes(newline) == b"\n" and ours.display_piece(newline) == "↵"
    lead = hf.convert_tokens_to_ids("<0xE2>")
    assert ours.piece_bytes(lead) == b"\xe2" and ours.display_piece(lead) == "<E2>"
    word = next(t for t in hf.get_vocab() if t.startswith("▁") and len(t) > 3)
    assert ours.display_piece(hf.convert_tokens_to_ids(word)) == "␣" + word[1:]
