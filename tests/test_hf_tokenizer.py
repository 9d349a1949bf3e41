"""tfm.text.hf_tokenizer: ids equal Hugging Face's fast tokenizer on a battery of hard texts, for
tokenizer.json files of every family kind (GPT-2, Qwen2, Llama 3, GPT-NeoX, SmolLM byte-level
BPE on tiktoken; Llama 2 / Mistral SentencePiece-style BPE on the `tokenizers` library).

No vocabulary can be downloaded: each file is trained here with the `tokenizers` library on
a slice of /work/shared/corpus plus the battery, with the families' exact pre-tokenizers."""

from __future__ import annotations

import gzip
import json
import random
import unicodedata
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

from tfm.text.hf_tokenizer import tokenizer_from_folder, tokenizer_from_spec  # noqa: E402
from tfm.text.bpe_files import bytes_to_unicode, write_ranks_file  # noqa: E402
from tfm.text.tokenizer import Tokenizer  # noqa: E402
from transformers.convert_slow_tokenizer import TikTokenConverter  # noqa: E402

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


def _bytelevel(pre, normalizer=None, specials=("<|endoftext|>",), vocab=900, ignore_merges=False):
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre, decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


def _split_then_bytes(pattern: str):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _sentencepiece():
    """Trained on words (as SentencePiece does; whole lines would take a minute)."""
    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
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
        tok, tr = _sentencepiece()
        config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    else:
        raise AssertionError(kind)
    tok.train_from_iterator([text], tr)
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
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if kind in SENTENCEPIECE:  # as in Llama 2's file: <0xNN> are vocab, not added
        data["added_tokens"] = [a for a in data["added_tokens"] if not a["content"].startswith("<0x")]
        (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


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
        data["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                       "split": False}]}
    elif kind == "tiktoken-converted":  # how Llama 3's tokenizer.json was made: several merges per token
        specials = {a["content"] for a in data["added_tokens"]}
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        kept = sorted((i, t) for t, i in model["vocab"].items() if t not in specials)
        ranks = {bytes(to_byte[c] for c in t): r for r, (_, t) in enumerate(kept)}  # dense, as tiktoken's
        write_ranks_file(folder / "ranks.tiktoken", ranks)
        tok = TikTokenConverter(vocab_file=str(folder / "ranks.tiktoken"), pattern=LLAMA3,
                                extra_special_tokens=sorted(specials, key=lambda t: -len(t))).converted()
        tok.save(str(folder / "tokenizer.json"))
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        assert len(data["model"]["merges"]) > len(model["merges"])  # really the multi-merge form
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text((base / "tokenizer_config.json").read_text())
    return folder


DERIVED = {"gpt2-string-merges": "gpt2", "shuffled-ids": "gpt2", "orphan": "gpt2",
           "tiktoken-converted": "llama3", "metaspace-decoder": "mistral-metaspace"}
KINDS = {"gpt2": "tiktoken", "qwen2": "tiktoken", "llama3": "tiktoken", "neox": "tiktoken",
         "smollm": "tiktoken", "letters-only-split": "tiktoken", "gpt2-string-merges": "tiktoken",
         "shuffled-ids": "tiktoken", "tiktoken-converted": "tiktoken", "orphan": "tokenizers",
         "gpt2-prefix-space": "tokenizers", "llama2": "tokenizers", "mistral-metaspace": "tokenizers",
         "metaspace-decoder": "tokenizers"}
SENTENCEPIECE = ("llama2", "mistral-metaspace", "metaspace-decoder")


@pytest.fixture(scope="session")
def pairs(tmp_path_factory):
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


@pytest.fixture(params=list(KINDS))
def pair(request, pairs):
    return pairs(request.param)


def test_backend(pair):
    kind, ours, _, _ = pair
    assert ours.backend == KINDS[kind], ours.backend_note
    assert isinstance(ours, Tokenizer) == (KINDS[kind] == "tiktoken")
    if kind in ("gpt2", "tiktoken-converted", "shuffled-ids"):  # ranks are the ids unless shuffled
        assert (ours._rank_to_id is not None) == (kind == "shuffled-ids")
    if kind == "orphan":
        assert "neither bytes nor made by a merge" in ours.backend_note


@pytest.mark.parametrize("text", BATTERY)
def test_ids_equal_hugging_face(pair, text):
    _, ours, hf, hf_plain = pair
    assert ours.encode(text) == hf_plain(text, add_special_tokens=False)["input_ids"]
    assert ours.encode(text, allow_special=True) == hf(text, add_special_tokens=False)["input_ids"]


def test_ids_equal_on_corpus_lines(pair, pairs):
    _, ours, hf, hf_plain = pair
    lines = pairs.text.splitlines(keepends=True)[::7][:400]
    assert [ours.encode(s) for s in lines] == hf_plain(lines, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", BATTERY)
def test_decode(pair, text):
    """decode equals HF's; the text itself comes back unless the tokenizer normalizes it."""
    kind, ours, hf, _ = pair
    ids = ours.encode(text, allow_special=True)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False)
    got, plain = ours.decode(ids), ours.decode(ours.encode(text))
    if kind in ("qwen2", "neox"):  # NFC normalizers (special tokens are matched before it)
        got, plain, text = (unicodedata.normalize("NFC", s) for s in (got, plain, text))
    if kind == "gpt2-prefix-space":  # HF gives each text segment a leading space
        return
    if KINDS[kind] == "tiktoken":
        assert got == text
    elif "▁" in text:  # SentencePiece reads a typed ▁ as a space
        return
    if kind in ("mistral-metaspace", "metaspace-decoder") and text.startswith(" "):  # no ▁ before " x"
        text = text[1:]
    assert plain == text  # SentencePiece-style: each segment between specials gets its own ▁


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


@pytest.mark.parametrize("kind", SENTENCEPIECE)
def test_byte_fallback_pieces_are_readable(pairs, kind):
    _, ours, hf, _ = pairs(kind)
    newline = hf.convert_tokens_to_ids("<0x0A>")
    assert ours.piece_bytes(newline) == b"\n" and ours.display_piece(newline) == "↵"
    lead = hf.convert_tokens_to_ids("<0xE2>")
    assert ours.piece_bytes(lead) == b"\xe2" and ours.display_piece(lead) == "<E2>"
    word = next(t for t in hf.get_vocab() if t.startswith("▁") and len(t) > 3)
    assert ours.display_piece(hf.convert_tokens_to_ids(word)) == "␣" + word[1:]


@pytest.mark.parametrize("kind", [k for k, backend in KINDS.items() if backend == "tiktoken"])
def test_rank_merging_equals_hf_merges(pairs, kind):
    """Below the pre-tokenizer: tiktoken's rank BPE on a piece's bytes gives HF's BPE model ids,
    for every vocabulary token (tiktoken looks whole pieces up first) and for thousands of
    corpus substrings (pieces no pre-tokenizer would make, so merges meet in new orders)."""
    _, ours, hf, _ = pairs(kind)
    model, enc = hf.backend_tokenizer.model, bytes_to_unicode()
    specials = set(ours.special_tokens)
    pieces = [t for t in hf.backend_tokenizer.get_vocab(with_added_tokens=False) if t not in specials]
    rng, data = random.Random(1), pairs.text.encode("utf-8")
    for _ in range(3000):
        start = rng.randrange(len(data) - 20)
        pieces.append("".join(enc[b] for b in data[start:start + rng.randint(2, 20)]))
    to_byte = {c: b for b, c in enc.items()}
    for piece in pieces:
        ranks = ours._enc._encode_single_piece(bytes(to_byte[c] for c in piece))
        ids = ranks if ours._rank_to_id is None else ours._rank_to_id[ranks].tolist()
        assert ids == [t.id for t in model.tokenize(piece)], piece


# ---- files, errors, safety --------------------------------------------------------------
def _copy(pairs, kind: str, tmp_path: Path, edit=None) -> Path:
    data = json.loads((pairs.folder(kind) / "tokenizer.json").read_text(encoding="utf-8"))
    if edit:
        edit(data)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return tmp_path


def test_save_and_reload_through_a_tfm_spec(pairs, tmp_path):
    """save() copies the files; tokenizer_from_spec (what tfm model folders use) reads them back."""
    text = "Hello <|im_start|> 你好 12345\n\n  x"
    for kind in ("qwen2", "llama2"):
        _, ours, _, _ = pairs(kind)
        spec = ours.save(tmp_path / kind)
        again = tokenizer_from_spec(tmp_path / kind, json.loads(json.dumps(spec)))
        assert type(again) is type(ours) and again.name == ours.name
        assert again.encode(text) == ours.encode(text)
        assert again.encode(text, allow_special=True) == ours.encode(text, allow_special=True)
        assert again.eot_id == ours.eot_id and again.bos_id == ours.bos_id


def test_save_refuses_a_changed_source(pairs, tmp_path):
    src = _copy(pairs, "gpt2", tmp_path / "src")
    tok = tokenizer_from_folder(src)
    (src / "tokenizer.json").write_text((src / "tokenizer.json").read_text() + " ")
    with pytest.raises(ValueError, match="changed since"):
        tok.save(tmp_path / "out")


def test_gpt2_folder_without_tokenizer_json(gpt2_vocab_folder):
    tok = tokenizer_from_folder(gpt2_vocab_folder)
    ref = Tokenizer.from_hf_gpt2_folder(gpt2_vocab_folder)
    assert tok.encode("The cat sat. 123") == ref.encode("The cat sat. 123")


def test_missing_bad_and_huge_files(tmp_path, pairs, monkeypatch):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        tokenizer_from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(b"{not json")
    with pytest.raises(ValueError, match="^tokenizer.json is not valid JSON"):
        tokenizer_from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0"}')
    with pytest.raises(ValueError, match='no "model" section'):
        tokenizer_from_folder(tmp_path)
    _copy(pairs, "gpt2", tmp_path)
    monkeypatch.setattr("tfm.text.hf_tokenizer_file.MAX_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="^tokenizer.json holds .* bytes; tfm reads such a file up to 1,000 bytes"):
        tokenizer_from_folder(tmp_path)


def test_unsupported_decoder_is_refused_clearly(pairs, tmp_path):
    def wordpiece_decoder(data):
        data["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}
    with pytest.raises(ValueError, match="decoder .* is not supported"):
        tokenizer_from_folder(_copy(pairs, "llama2", tmp_path, wordpiece_decoder))

    def broken(data):  # a field the library requires is missing
        del data["pre_tokenizer"]["trim_offsets"]
    with pytest.raises(ValueError, match="the tokenizers library cannot read"):
        tokenizer_from_folder(_copy(pairs, "gpt2-prefix-space", tmp_path / "b", broken))


ODD_PRE_TOKENIZERS = {  # step before ByteLevel -> the back end that must serve it
    "WhitespaceSplit": ({"type": "WhitespaceSplit"}, "tokenizers"),
    "MergedWithPrevious": ({"type": "Split", "pattern": {"Regex": r"\p{P}"}, "behavior": "MergedWithPrevious",
                            "invert": False}, "tokenizers"),
    "empty matches": ({"type": "Split", "pattern": {"Regex": r"\s*"}, "behavior": "Isolated", "invert": False},
                      "tokenizers"),
    "String split": ({"type": "Split", "pattern": {"String": "e"}, "behavior": "Isolated", "invert": False},
                     "tiktoken"),
    "Digits runs": ({"type": "Digits", "individual_digits": False}, "tiktoken"),
}


@pytest.mark.parametrize("name", ODD_PRE_TOKENIZERS)
def test_odd_pre_tokenizers_stay_exact(pairs, tmp_path, name):
    """Steps before ByteLevel: expressible ones split in Python before tiktoken; others are
    served by `tokenizers`, with the reason in backend_note. Ids equal HF's either way."""
    step, backend = ODD_PRE_TOKENIZERS[name]

    def edit(data):
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            step, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    folder = _copy(pairs, "gpt2", tmp_path, edit)
    tok = tokenizer_from_folder(folder)
    assert tok.backend == backend, tok.backend_note
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    for text in BATTERY:
        assert tok.encode(text, allow_special=True) == hf(text, add_special_tokens=False)["input_ids"]


def test_folder_code_is_never_run(pairs, tmp_path):
    """tokenizer_config.json may name Python code (auto_map); tfm reads JSON only."""
    folder = _copy(pairs, "gpt2", tmp_path)
    marker = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}, "tokenizer_class": "EvilTokenizer",
        "eos_token": "<|endoftext|>"}))
    tok = tokenizer_from_folder(folder)
    assert tok.encode("hi") and tok.eot_id == pairs("gpt2")[1].eot_id and not marker.exists()


def test_bad_ids_raise(pair):
    _, ours, _, _ = pair
    for bad in (-1, ours.vocab_size, 10**9):
        with pytest.raises(ValueError, match="not in this vocabulary"):
            ours.decode([bad])


@pytest.mark.parametrize("kind", ["qwen2", "llama2"])
def test_generation_streams_with_an_hf_tokenizer(pairs, kind):
    """tfm.generate on a random model with each back end: the streamed text is the tokens'
    bytes, multi-byte characters split across byte-fallback tokens included."""
    from tfm.core.config import ModelConfig
    from tfm.generation.generate import generate
    from tfm.loaders.loading import random_model

    _, ours, _, _ = pairs(kind)
    cfg = ModelConfig.preset("tiny", vocab_size=ours.vocab_size, context_length=128)
    lm = random_model(cfg, ours, seed=3)
    gen = generate(lm, "Once upon a time 😀", max_new_tokens=40, temperature=2.0, seed=1, stop_at_eot=False)
    steps = list(gen)
    ids = [s.token_id for s in steps]
    streamed = b"".join(ours.piece_bytes(i) for i in ids)
    assert "".join(s.new_text for s in steps) == steps[-1].text_so_far == streamed.decode("utf-8", "replace")
    prompt = list(gen.prompt.ids)
    assert ours.decode_bytes(prompt + ids) == ours.decode_bytes(prompt) + streamed
    assert [s.display for s in steps] == ours.display_pieces(ids)


def test_prompt_ids_are_what_hugging_face_feeds_the_model(pair):
    """A user's prompt gets the start token the model expects (Llama's <s>), as HF's tokenizer
    adds it, and nothing at the end; special-token text typed by the user stays text."""
    kind, ours, _, hf_plain = pair
    for text in ("Once upon a time", "a <|endoftext|> b", " spaced  out\n"):
        want = hf_plain(text)["input_ids"]  # add_special_tokens=True
        if hf_plain.eos_token_id is not None and want[-1] == hf_plain.eos_token_id and len(want) > 1 \
                and not text.endswith(hf_plain.eos_token or "\0"):
            want = want[:-1]  # a post-processor appending EOS: not part of a prompt to continue
        assert ours.prompt_ids(text) == want, (kind, text)
    assert (ours.prompt_ids("hi")[0] == ours.bos_id) == ours.add_bos


def test_some_kinds_start_prompts_with_a_start_token(pairs):
    with_start = {k for k in KINDS if pairs(k)[1].add_bos}
    assert {"llama2", "llama3"} <= with_start and "gpt2" not in with_start
