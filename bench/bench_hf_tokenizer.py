"""Loading and encoding a Qwen2-sized tokenizer.json: tfm (tiktoken) vs the `tokenizers` library.

    .venv/bin/python bench/bench_hf_tokenizer.py [--vocab 151643] [--repeats 3]

No vocabulary can be downloaded, so the file is synthetic: the 256 byte symbols, then merges
of random pairs of existing tokens until `--vocab` ids, with Qwen2's pre-tokenizer (NFC,
its Split regex, ByteLevel) and special tokens. Prints figures and ratios measured in this
one run (best of `--repeats`); asserts nothing about time. Ids are checked equal first.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tokenizers  # noqa: E402

from tfm.text.hf_tokenizer import tokenizer_from_folder  # noqa: E402
from tfm.text.bpe_files import bytes_to_unicode  # noqa: E402

QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CORPUS = Path("/work/shared/corpus/tinystories_valid.txt")


def random_merges(vocab_size: int) -> tuple[dict[str, int], list[list[str]]]:
    """A byte-level vocabulary of `vocab_size` grown by random merges (seeded), and those merges."""
    rng = random.Random(0)
    tokens = [bytes_to_unicode()[b] for b in range(256)]
    vocab, merges = {t: i for i, t in enumerate(tokens)}, []
    while len(tokens) < vocab_size:
        a, b = tokens[int(rng.random() ** 3 * len(tokens))], rng.choice(tokens[:2000])
        if a + b not in vocab and len(a + b) < 24:
            vocab[a + b] = len(tokens)
            tokens.append(a + b)
            merges.append([a, b])
    return vocab, merges


def added_specials(first_id: int) -> list[dict]:
    """Qwen2's three special tokens, numbered from `first_id`."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return [
        {
            "id": first_id + i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, s in enumerate(specials)
    ]


def synthetic_file(folder: Path, vocab_size: int) -> None:
    vocab, merges = random_merges(vocab_size)
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_specials(vocab_size),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def best(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=151_643)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        synthetic_file(folder, args.vocab)
        size = (folder / "tokenizer.json").stat().st_size
        t_ours, ours = best(lambda: tokenizer_from_folder(folder), args.repeats)
        t_lib, lib = best(lambda: tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")), args.repeats)
    text = CORPUS.read_text(encoding="utf-8")[:200_000]
    ids = ours.encode(text)
    assert ids == lib.encode(text, add_special_tokens=False).ids, "ids differ from the tokenizers library"
    e_ours, _ = best(lambda: ours.encode(text), args.repeats)
    e_lib, _ = best(lambda: lib.encode(text, add_special_tokens=False), args.repeats)
    print(f"synthetic Qwen2-style tokenizer.json: {args.vocab} ids, {size / 2**20:.1f} MiB, backend {ours.backend}")
    print(f"load:   tfm {t_ours * 1e3:7.0f} ms | tokenizers {t_lib * 1e3:7.0f} ms | ratio {t_ours / t_lib:.2f}x")
    print(
        f"encode {len(text)} chars -> {len(ids)} ids: tfm {e_ours * 1e3:.1f} ms | tokenizers "
        f"{e_lib * 1e3:.1f} ms | speed-up {e_lib / e_ours:.2f}x"
    )


if __name__ == "__main__":
    main()
