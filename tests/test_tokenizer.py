"""tfm.text.tokenizer: round trips, user-typed special text, readable pieces, HF GPT-2 folders,
and clear errors for bad ranks files. Vocabularies are trained here on generated text."""

import json
import random

import numpy as np
import pytest

from tfm.train.bpe import train_bpe
from tfm.text.bpe_files import EOT, write_ranks_file
from tfm.text.tokenizer import Tokenizer

WORDS = (
    "the a little girl named Lily boy Tom dog cat sun played ran saw happy big red "
    "tree park ball mom said went home day friend wanted to and was with they "
    "café naïve façade"
).split()
EXTRAS = [
    "—",
    "…",
    "“quoted”",
    "’s",
    "你好，世界。",
    "日本語のテキスト",
    "👍",
    "🙂",
    "👩‍👩‍👧‍👦",
    "\t",
    "  ",
    "\n\n",
    "1999",
    "!?",
]

HARD_TEXTS = [
    "",
    "Hello, world!",
    "👩‍👩‍👧‍👦 family 👨🏽‍💻 coder 🏳️‍🌈 flag 🇫🇷 and 👍🏿",
    "你好，世界。我爱自然语言处理。日本語のテキスト、한국어 텍스트",
    "   leading spaces\n\n\n\ttabs\t\tand   runs   \n \n  ",
    "\n",
    " ",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|><|endoftext|>",
    "<|endoftext",
    "mixed: café — “quotes” … ½ ∑ \x00\x07 control \r\n line",
    "\ufeffBOM and \u200b zero width \U0010ffff max",
]


SYLLABLES = "ka lo mi re tu sa ne po vi da ro li me na to shi ber gan tel wor".split()


def make_text(n_words: int, seed: int) -> str:
    """Seeded pseudo-English: real words, made-up words, punctuation, emoji, CJK."""
    rng = random.Random(seed)
    made_up = ["".join(rng.sample(SYLLABLES, rng.randint(1, 3))) for _ in range(400)]
    out = []
    for i in range(n_words):
        r = rng.random()
        if r < 0.08:
            out.append(rng.choice(EXTRAS))
        elif r < 0.5:
            out.append(made_up[min(int(rng.paretovariate(1.0)) - 1, 399)])
        else:
            out.append(rng.choice(WORDS))
        out.append(rng.choice([" ", " ", " ", ". ", ", ", ".\n", ".\n\n"]))
        if i % 300 == 299:
            out.append(EOT)
    return "".join(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "train.txt"
    path.write_text(make_text(40_000, seed=1), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok(corpus):
    return train_bpe([corpus], 600)


@pytest.mark.parametrize("text", HARD_TEXTS)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode_bytes(ids) == text.encode("utf-8")
    assert b"".join(tok.piece_bytes(i) for i in ids) == text.encode("utf-8")


def test_empty_string(tok):
    assert tok.encode("") == []
    assert tok.decode([]) == ""


def test_merges_were_learned(tok):
    # A trained vocabulary must compress common words, not fall back to single bytes.
    assert len(tok.encode(" little")) == 1
    assert len(tok.encode("the little girl")) < len("the little girl") / 2


def test_special_text_typed_by_user_is_ordinary(tok):
    ids = tok.encode(EOT)
    assert len(ids) > 1
    assert tok.eot_id not in ids
    assert tok.decode(ids) == EOT
    assert tok.encode("a" + EOT + "b", allow_special=True).count(tok.eot_id) == 1
    assert tok.encode(EOT, allow_special=True) == [tok.eot_id]
    assert tok.decode([tok.eot_id]) == EOT


def test_vocab_properties(tok):
    assert tok.vocab_size == 600
    assert tok.eot_id == 599 == tok.n_ranks
    assert tok.special_tokens == {EOT: 599}
    with pytest.raises(ValueError, match="not in this vocabulary"):
        tok.decode([600])
    with pytest.raises(ValueError, match="not in this vocabulary"):
        tok.decode([-1])


def test_display_piece_whitespace_and_controls(tok):
    assert tok.display_piece(ord(" ")) == "␣"
    assert tok.display_piece(ord("\n")) == "↵"
    assert tok.display_piece(ord("\t")) == "⇥"
    assert tok.display_piece(0) == "\\x00"
    assert tok.display_piece(ord("\r")) == "\\x0D"
    assert tok.display_piece(ord("A")) == "A"
    assert tok.display_piece(tok.eot_id) == EOT
    two_newlines = tok.encode("\n\n")
    assert tok.display_pieces(two_newlines) == ["↵↵"]  # merged in training text
    assert tok.display_pieces(tok.encode(" the")) == ["␣the"]


def test_piece_bytes_are_each_tokens_own_bytes_cached_or_not(tok):
    """piece_bytes remembers each id's bytes (a batched step asks for every row's): the same
    bytes as decode_bytes, asked first, again, or as a numpy id; an unknown id still raises."""
    ids = list(range(tok.vocab_size))
    want = [tok.decode_bytes([i]) for i in ids]
    assert [tok.piece_bytes(i) for i in ids] == want
    assert [tok.piece_bytes(np.int64(i)) for i in reversed(ids)] == want[::-1]
    for bad in (-1, tok.vocab_size, 10**9):
        for _ in range(2):
            with pytest.raises(ValueError, match="not in this vocabulary"):
                tok.piece_bytes(bad)


def test_display_piece_partial_utf8_shows_hex(tok):
    assert tok.display_piece(0xE2) == "<E2>"
    assert tok.piece(0xE2) == "\ufffd"
    # "—" and "…" (E2 80 94, E2 80 A6) are frequent: BPE learns the shared prefix E2 80.
    prefix = [i for i in range(tok.n_ranks) if tok.piece_bytes(i) == b"\xe2\x80"]
    assert len(prefix) == 1
    assert tok.display_piece(prefix[0]) == "<E2 80>"
    # A rare CJK character stays as bytes: every piece is hex, and they rebuild it.
    ids = tok.encode("龘")
    assert len(ids) > 1
    shown = tok.display_pieces(ids)
    assert all(s.startswith("<") and s.endswith(">") for s in shown)
    hexes = " ".join(s[1:-1] for s in shown)
    assert bytes.fromhex(hexes) == "龘".encode("utf-8")


def test_save_and_from_spec(tok, tmp_path, corpus):
    spec = tok.save(tmp_path / "m")
    assert spec["file"] == "tokenizer.tiktoken"
    assert spec["special_tokens"] == {EOT: 599}
    json.dumps(spec)  # must fit in a config.json
    back = Tokenizer.from_spec(tmp_path / "m", json.loads(json.dumps(spec)))
    text = make_text(2000, seed=7)
    assert back.encode(text) == tok.encode(text)
    assert back.vocab_size == tok.vocab_size and back.eot_id == tok.eot_id
    lines = (tmp_path / "m" / "tokenizer.tiktoken").read_text().splitlines()
    assert [int(line.split()[1]) for line in lines] == list(range(599))


# ---- ranks file errors -----------------------------------------------------------
def _byte_ranks():
    return {bytes([b]): b for b in range(256)}


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tiktoken.*tfm.train.bpe"):
        Tokenizer.from_tiktoken_file(tmp_path / "nope.tiktoken", {EOT: 256})


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("QQ==", "expected 'base64token rank'"),
        ("QQ== 12 extra", "expected 'base64token rank'"),
        ("!!notb64 300", "bad base64"),
        ("QUI= x", "bad base64"),
        ("QUI= -3", r"a rank outside 0\.\.999,999"),
        ("QUI= 1000000", r"a rank outside 0\.\.999,999"),  # no vocabulary tfm can embed is that large
        ("QUI= " + "9" * 30, r"a rank outside 0\.\.999,999"),  # (tiktoken overflowed on it)
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    path = tmp_path / "bad.tiktoken"
    write_ranks_file(path, _byte_ranks())
    path.write_text(path.read_text() + bad_line + "\n")
    with pytest.raises(ValueError, match=rf"bad\.tiktoken:257: .*{message}"):
        Tokenizer.from_tiktoken_file(path, {EOT: 300})


def test_duplicate_rank(tmp_path):
    path = tmp_path / "dup.tiktoken"
    write_ranks_file(path, _byte_ranks())
    path.write_text(path.read_text() + "QUI= 65\n")  # "AB" reuses the rank of "A"
    with pytest.raises(ValueError, match=r"dup\.tiktoken:257: duplicate rank 65 .*line 66"):
        Tokenizer.from_tiktoken_file(path, {EOT: 300})


def test_missing_single_byte(tmp_path):
    ranks = _byte_ranks()
    del ranks[b"\xff"]
    path = tmp_path / "short.tiktoken"
    write_ranks_file(path, ranks)
    with pytest.raises(ValueError, match="single bytes"):
        Tokenizer.from_tiktoken_file(path, {})


def test_special_colliding_with_rank(tmp_path):
    path = tmp_path / "bytes.tiktoken"
    write_ranks_file(path, _byte_ranks())
    with pytest.raises(ValueError, match="collides"):
        Tokenizer.from_tiktoken_file(path, {EOT: 10})


def test_rewritten_file_is_not_stale(tmp_path):
    path = tmp_path / "v.tiktoken"
    write_ranks_file(path, _byte_ranks())
    first = Tokenizer.from_tiktoken_file(path, {EOT: 256})
    assert first.encode("AB") == [65, 66]
    write_ranks_file(path, {**_byte_ranks(), b"AB": 256})
    second = Tokenizer.from_tiktoken_file(path, {EOT: 257})
    assert second.encode("AB") == [256]
    assert second.vocab_size == 258


# ---- Hugging Face GPT-2 folders ----------------------------------------------------
COMPARE_TEXTS = HARD_TEXTS + [make_text(3000, seed=11), "It's what we'll do, they've said: don't!"]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, corpus):
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("hf_gpt2")
    bl = ByteLevelBPETokenizer(add_prefix_space=False)
    # Special token first: the trainer gives it id 0, so ids differ from tiktoken ranks.
    bl.train([str(corpus)], vocab_size=700, min_frequency=2, special_tokens=[EOT], show_progress=False)
    bl.save_model(str(folder))
    return folder


def test_hf_folder_matches_transformers(hf_folder):
    from transformers import GPT2TokenizerFast

    ref = GPT2TokenizerFast(vocab=str(hf_folder / "vocab.json"), merges=str(hf_folder / "merges.txt"))
    tok = Tokenizer.from_hf_gpt2_folder(hf_folder)
    assert tok.eot_id == 0 == ref.convert_tokens_to_ids(EOT)
    assert tok._rank_to_id is not None  # really exercises the id <-> rank translation
    for text in COMPARE_TEXTS:
        expected = ref.encode(text, add_special_tokens=False)
        # transformers treats typed "<|endoftext|>" as the control token.
        assert tok.encode(text, allow_special=True) == expected, text
        assert tok.decode(expected) == text
    assert tok.vocab_size == len(json.loads((hf_folder / "vocab.json").read_text()))


def test_hf_folder_ids_without_specials_are_ordinary(hf_folder):
    tok = Tokenizer.from_hf_gpt2_folder(hf_folder)
    ids = tok.encode("x <|endoftext|> y")
    assert tok.eot_id not in ids
    assert tok.decode(ids) == "x <|endoftext|> y"


def test_hf_folder_save_keeps_ids(hf_folder, tmp_path):
    tok = Tokenizer.from_hf_gpt2_folder(hf_folder)
    spec = tok.save(tmp_path)
    back = Tokenizer.from_spec(tmp_path, spec)
    text = COMPARE_TEXTS[-2]
    assert back.encode(text) == tok.encode(text)
    assert back.eot_id == tok.eot_id


def test_hf_folder_in_gpt2_layout_is_identity(corpus, tmp_path):
    # Real GPT-2 numbers its vocab like tiktoken ranks (bytes, merges, <|endoftext|>):
    # write such a folder from a `tokenizers` model and expect no id translation.
    from tfm.text.bpe_files import bytes_to_unicode

    tok, hf = train_bpe([corpus], 400, return_hf=True)
    enc = bytes_to_unicode()
    vocab = {"".join(enc[b] for b in tok.piece_bytes(i)): i for i in range(tok.n_ranks)}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab | {EOT: tok.eot_id}))
    merges = [" ".join(m) for m in json.loads(hf.to_str())["model"]["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    from_hf = Tokenizer.from_hf_gpt2_folder(tmp_path)
    assert from_hf._rank_to_id is None
    assert from_hf.eot_id == tok.eot_id == 399
    text = COMPARE_TEXTS[-2]
    assert from_hf.encode(text) == tok.encode(text)


def test_hf_folder_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.json"):
        Tokenizer.from_hf_gpt2_folder(tmp_path)


# ---- the bundled vocabulary --------------------------------------------------------
def test_bundled_vocabulary():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "assets" / "tokenizer"
    assert (folder / "tokenizer.tiktoken").stat().st_size < 100_000
    specials = json.loads((folder / "special_tokens.json").read_text())
    tok = Tokenizer.from_tiktoken_file(folder / "tokenizer.tiktoken", specials)
    assert tok.vocab_size == 4096 and tok.eot_id == 4095 == tok.n_ranks
    text = 'Once upon a time, there was a little girl named Lily.\n\nShe said, "Hi!"'
    ids = tok.encode(text)
    assert tok.display_pieces(ids[:13]) == [
        "Once",
        "␣upon",
        "␣a",
        "␣time",
        ",",
        "␣there",
        "␣was",
        "␣a",
        "␣little",
        "␣girl",
        "␣named",
        "␣Lily",
        ".",
    ]
    assert tok.decode(ids) == text
    for hard in HARD_TEXTS:
        assert tok.decode(tok.encode(hard)) == hard
    report = json.loads((folder / "vocab_report.json").read_text())
    assert report["chosen"] == 4096 and set(report["measurements"]) >= {"2048", "4096", "8192"}
