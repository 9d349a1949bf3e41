"""The general text mix (tfm.train.mix): held-out parts never overlap the training parts, every
domain gives its share, and a wrong name is refused with what to choose."""

from pathlib import Path

import pytest

import tfm
from tfm.train import mix

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(
    not (CORPUS / "tinyshakespeare.txt").is_file(), reason="../shared/corpus is beside the repo in CI"
)


def test_python_files_split_without_overlap():
    train, held = mix.python_files("train"), mix.python_files("heldout")
    assert held and len(train) > 5 * len(held)
    assert not set(train) & set(held)
    assert mix.describe("heldout")["python"]["files"] == [p.name for p in held]


@needs_corpus
@pytest.mark.parametrize("domain", ["books", "shakespeare", "python"])
def test_held_out_text_is_not_in_the_training_text(domain):
    held = mix.domain_text(CORPUS, domain, "heldout", 4000)
    train = mix.domain_text(CORPUS, domain, "train", 10**9 if domain != "books" else 30_000_000)
    assert len(held) == 4000
    for i in range(0, 4000, 500):
        assert held[i : i + 200] not in train


@needs_corpus
def test_mix_ids_gives_each_domain_its_share():
    lm = tfm.load("default")
    parts = mix.domain_ids(lm.tokenizer, CORPUS, "train", 500)
    assert list(parts) == list(mix.DOMAINS) and all(len(v) == 500 for v in parts.values())
    ids = mix.mix_ids(lm.tokenizer, CORPUS, "train", 1000)
    assert len(ids) == 1000 and ids.max() < lm.config.vocab_size


def test_unknown_domain_and_split_are_refused():
    with pytest.raises(ValueError, match="choose from"):
        mix.domain_texts(CORPUS, "train", 10, domains=("poems",))
    with pytest.raises(ValueError, match="'train' or 'heldout'"):
        mix.python_files("test")
