"""tfm.text.hf_tokenizer: ids equal Hugging Face's fast tokenizer on a battery of hard texts, for
tokenizer.json files of every family kind (GPT-2, Qwen2, Llama 3, GPT-NeoX, SmolLM byte-level
BPE on tiktoken; Llama 2 / Mistral SentencePiece-style BPE on the `tokenizers` library).

No vocabulary can be downloaded: each file is trained here (tests/hf_tokenizer_files.py, the
`tokenizer_pairs` fixture). Reading, saving and refusing files: tests/test_hf_tokenizer_files.py."""

from __future__ import annotations

import random
import unicodedata

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from tests.hf_tokenizer_files import BATTERY, KINDS, SENTENCEPIECE  # noqa: E402
from tfm.text.bpe_files import bytes_to_unicode  # noqa: E402
from tfm.text.tokenizer import Tokenizer  # noqa: E402


@pytest.fixture(params=list(KINDS))
def pair(request, tokenizer_pairs):
    return tokenizer_pairs(request.param)


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


def test_ids_equal_on_corpus_lines(pair, tokenizer_pairs):
    _, ours, hf, hf_plain = pair
    lines = tokenizer_pairs.text.splitlines(keepends=True)[::7][:400]
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
    assert ours.special_tokens == {
        t.content: i for i, t in added.items() if t.special and not t.content.startswith("<0x")
    }
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
def test_byte_fallback_pieces_are_readable(tokenizer_pairs, kind):
    _, ours, hf, _ = tokenizer_pairs(kind)
    newline = hf.convert_tokens_to_ids("<0x0A>")
    assert ours.piece_bytes(newline) == b"\n" and ours.display_piece(newline) == "↵"
    lead = hf.convert_tokens_to_ids("<0xE2>")
    assert ours.piece_bytes(lead) == b"\xe2" and ours.display_piece(lead) == "<E2>"
    # sorted, letters only: the vocabulary's own order is a hash map's, and a piece holding "\n" shows "↵"
    word = min(t for t in hf.get_vocab() if t.startswith("▁") and len(t) > 3 and t[1:].isalpha())
    assert ours.display_piece(hf.convert_tokens_to_ids(word)) == "␣" + word[1:]
    for piece in (t for t in hf.get_vocab() if t.startswith("▁") and "\n" in t):
        assert ours.display_piece(hf.convert_tokens_to_ids(piece)) == "␣" + piece[1:].replace("\n", "↵")


@pytest.mark.parametrize("kind", [k for k, backend in KINDS.items() if backend == "tiktoken"])
def test_rank_merging_equals_hf_merges(tokenizer_pairs, kind):
    """Below the pre-tokenizer: tiktoken's rank BPE on a piece's bytes gives HF's BPE model ids,
    for every vocabulary token (tiktoken looks whole pieces up first) and for thousands of
    corpus substrings (pieces no pre-tokenizer would make, so merges meet in new orders)."""
    _, ours, hf, _ = tokenizer_pairs(kind)
    model, enc = hf.backend_tokenizer.model, bytes_to_unicode()
    specials = set(ours.special_tokens)
    pieces = [t for t in hf.backend_tokenizer.get_vocab(with_added_tokens=False) if t not in specials]
    rng, data = random.Random(1), tokenizer_pairs.text.encode("utf-8")
    for _ in range(3000):
        start = rng.randrange(len(data) - 20)
        pieces.append("".join(enc[b] for b in data[start : start + rng.randint(2, 20)]))
    to_byte = {c: b for b, c in enc.items()}
    for piece in pieces:
        ranks = ours._enc._encode_single_piece(bytes(to_byte[c] for c in piece))
        ids = ranks if ours._rank_to_id is None else ours._rank_to_id[ranks].tolist()
        assert ids == [t.id for t in model.tokenize(piece)], piece


def test_bad_ids_raise(pair):
    _, ours, _, _ = pair
    for bad in (-1, ours.vocab_size, 10**9):
        with pytest.raises(ValueError, match="not in this vocabulary"):
            ours.decode([bad])


@pytest.mark.parametrize("kind", ["qwen2", "llama2"])
def test_generation_streams_with_an_hf_tokenizer(tokenizer_pairs, kind):
    """tfm.generate on a random model with each back end: the streamed text is the tokens'
    bytes, multi-byte characters split across byte-fallback tokens included."""
    from tfm.core.config import ModelConfig
    from tfm.generation.generate import generate
    from tfm.loaders.loading import random_model

    _, ours, _, _ = tokenizer_pairs(kind)
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
        if (
            hf_plain.eos_token_id is not None
            and want[-1] == hf_plain.eos_token_id
            and len(want) > 1
            and not text.endswith(hf_plain.eos_token or "\0")
        ):
            want = want[:-1]  # a post-processor appending EOS: not part of a prompt to continue
        assert ours.prompt_ids(text) == want, (kind, text)
    assert (ours.prompt_ids("hi")[0] == ours.bos_id) == ours.add_bos


def test_some_kinds_start_prompts_with_a_start_token(tokenizer_pairs):
    with_start = {k for k in KINDS if tokenizer_pairs(k)[1].add_bos}
    assert {"llama2", "llama3"} <= with_start and "gpt2" not in with_start
