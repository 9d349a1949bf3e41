"""tfm.train.bpe: training with `tokenizers`, conversion to tiktoken ranks, the CLI.
All text is generated here; nothing is read from outside the test's tmp folder."""

import gzip
import json
import random

import pytest

from tfm.train.bpe import hf_merges_to_ranks, iter_chunks, main, train_bpe
from tfm.text.bpe_files import EOT, bytes_to_unicode
from tfm.text.tokenizer import Tokenizer

NOUNS = "girl boy dog cat bird tree house river ball cake friend teacher garden".split()
VERBS = "saw found liked wanted played jumped ran helped painted shared".split()
ADJS = "little big happy sad red shiny tiny brave quiet funny old green".split()
NAMES = "Lily Tom Sue Max Ben Mia Zoë Anna".split()
SYLLABLES = "ka lo mi re tu sa ne po vi da ro li me na to shi ber gan tel wor".split()
NOUNS += ["".join(random.Random(i).sample(SYLLABLES, 3)) for i in range(300)]


def story(rng: random.Random) -> str:
    sents = []
    for _ in range(rng.randint(3, 8)):
        s = (
            f"{rng.choice(NAMES)} {rng.choice(VERBS)} a {rng.choice(ADJS)} "
            f"{rng.choice(NOUNS)}{rng.choice(['.', '!', ' — twice.', '…', '?'])}"
        )
        if rng.random() < 0.2:
            extra = rng.choice(["🙂", "你好", "don't", "1984"])
            s += f' "It\'s {rng.choice(ADJS)}!" {extra}'
        sents.append(s)
    return " ".join(sents) + rng.choice(["\n", "\n\n", "  \n"])


def make_stories(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return f"\n{EOT}\n".join(story(rng) for _ in range(n))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    plain, packed = d / "a.txt", d / "b.txt.gz"
    plain.write_text(make_stories(1500, seed=1), encoding="utf-8")
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(make_stories(1500, seed=2))
    return [plain, packed]


@pytest.fixture(scope="module")
def trained(files):
    return train_bpe(files, 500, return_hf=True)


def _hf_pieces(hf, text):
    dec = {c: b for b, c in bytes_to_unicode().items()}
    return [bytes(dec[c] for c in t) for t in hf.encode(text).tokens]


def test_tiktoken_matches_tokenizers_on_heldout(trained):
    tok, hf = trained
    heldout = make_stories(300, seed=99).replace(EOT, "") + " Zoë’s 🙂🙂 龘 \t\t x\n\n\n"
    ids = tok.encode(heldout)
    assert [tok.piece_bytes(i) for i in ids] == _hf_pieces(hf, heldout)
    assert len(ids) == len(hf.encode(heldout).ids)
    assert tok.decode(ids) == heldout


def test_ranks_follow_merge_order(trained):
    tok, hf = trained
    ranks = hf_merges_to_ranks(hf)
    merges = json.loads(hf.to_str())["model"]["merges"]
    dec = {c: b for b, c in bytes_to_unicode().items()}
    first = bytes(dec[c] for c in merges[0][0] + merges[0][1])
    assert ranks[first] == 256
    assert sorted(ranks.values()) == list(range(len(ranks)))
    assert all(ranks[bytes([b])] == b for b in range(256))


def test_vocab_size_and_eot(trained):
    tok, _ = trained
    assert tok.vocab_size == 500
    assert tok.n_ranks == 499
    assert tok.eot_id == 499
    assert tok.encode(EOT, allow_special=True) == [499]


def test_no_merges_across_or_inside_separator(trained):
    tok, _ = trained
    pieces = [tok.piece_bytes(i) for i in range(tok.n_ranks)]
    # 3000 separators would teach "endoftext", "<|" etc. if they were trained on.
    assert not any(b"endof" in p or b"<|" in p or b"|>" in p for p in pieces)
    pieces = tok.display_pieces(tok.encode("Lily saw a little"))
    assert pieces == ["Lily", "␣saw", "␣a", "␣little"]


def test_round_trip_unseen_text(trained):
    tok, _ = trained
    for text in ["", "Привет мир", "👩‍👩‍👧‍👦", "a\r\nb", "   ", EOT, "x" * 1000]:
        assert tok.decode(tok.encode(text)) == text


def test_chunks_keep_pretokens(files):
    from tokenizers.pre_tokenizers import ByteLevel

    pre = ByteLevel(add_prefix_space=False, use_regex=True)
    split = lambda s: [p for p, _ in pre.pre_tokenize_str(s)]  # noqa: E731
    text = files[0].read_text(encoding="utf-8")
    chunks = list(iter_chunks([files[0]], chunk_chars=500))
    assert len(chunks) > 100
    assert "".join(chunks) == text.replace(EOT, "")
    assert [p for c in chunks for p in split(c)] == [p for part in text.split(EOT) for p in split(part)]


def test_max_bytes_per_file(files):
    chunks = list(iter_chunks(files, max_bytes_per_file=2000))
    assert 0 < sum(len(c.encode()) for c in chunks) <= 2 * 2000
    assert any("Lily" in c or "Tom" in c for c in chunks)


def test_spread_takes_chunks_across_the_file(tmp_path):
    path = tmp_path / "numbered.txt"
    path.write_text("".join(f"Line {i} of the file.\n" for i in range(20_000)))
    total = path.stat().st_size
    text = "".join(iter_chunks([path], max_bytes_per_file=total // 4, chunk_chars=2000, spread=True))
    assert 0.2 * total < len(text) < 0.3 * total
    numbers = [int(line.split()[1]) for line in text.splitlines() if line]
    assert max(numbers) > 19_000  # reaches the end of the file
    assert sum(n < 5000 for n in numbers) < 0.35 * len(numbers)  # not just the start
    start = "".join(iter_chunks([path], max_bytes_per_file=total // 4, chunk_chars=2000))
    assert "Line 19999 " not in start and "Line 0 " in start


def test_too_small_text_warns(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("ab ab ab ab")
    with pytest.warns(UserWarning, match="supports only"):
        tok = train_bpe([path], 1000)
    assert tok.vocab_size < 1000
    assert tok.decode(tok.encode("ab ba")) == "ab ba"


def test_cli_writes_vocab(files, tmp_path):
    out = tmp_path / "vocab"
    assert (
        main(
            [
                "--vocab-size",
                "400",
                "--out",
                str(out),
                "--compare",
                "300",
                "--count-train",
                "--note",
                "test",
                *map(str, files),
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["special_tokens.json", "tokenizer.tiktoken", "vocab_report.json"]
    specials = json.loads((out / "special_tokens.json").read_text())
    assert specials == {EOT: 399}
    tok = Tokenizer.from_tiktoken_file(out / "tokenizer.tiktoken", specials)
    assert tok.vocab_size == 400
    report = json.loads((out / "vocab_report.json").read_text())
    assert set(report["measurements"]) == {"300", "400"}
    m300, m400 = report["measurements"]["300"], report["measurements"]["400"]
    assert m400["chars_per_token"] > m300["chars_per_token"] > 1
    assert 0 < m400["words_one_token"] <= 1
    assert len(report["longest_tokens"]) == 40
    assert report["note"] == "test" and report["chosen"] == 400
    assert m400["train_tokens"] > 0
