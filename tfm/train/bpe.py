"""Train the project's byte-level BPE vocabulary and write it as tiktoken ranks.

    python -m tfm.train.bpe --vocab-size 4096 --out assets/tokenizer FILE [FILE ...]

The `tokenizers` library does the training (seconds, not the ~20 minutes of tiktoken's
educational trainer). Its merges become tiktoken ranks: bytes 0..255 get ranks 0..255, then
each merge in order gets the next rank for the merged token's bytes, so tiktoken encodes
exactly as `tokenizers` does. `<|endoftext|>` is appended as the last id.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import warnings
from collections import Counter
from pathlib import Path

from ..text.bpe_files import EOT, bytes_to_unicode
from ..text.tokenizer import PATTERNS, Tokenizer

CHUNK_CHARS = 1 << 16
SAMPLE_SENTENCES = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    'The old man looked at the sky and said, "It will rain tomorrow."',
    "Thou art more lovely and more temperate: rough winds do shake the darling buds of May.",
]
_WORD = re.compile(r" ?[^\W\d_]+")  # a letters-only pre-token, as GPT-2's \p{L}+ branch


# ---- reading -----------------------------------------------------------------------
def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_chunks(paths, max_bytes_per_file: int | None = None, chunk_chars: int = CHUNK_CHARS, spread: bool = False):
    """Stream text pieces of about chunk_chars, split on <|endoftext|> (a separator).

    max_bytes_per_file takes the start of each file, or with `spread` about that much as
    evenly spaced chunks across the whole file (every book of a concatenation, not the first).
    """
    for path in map(Path, paths):
        limit, ratio = max_bytes_per_file, 1.0
        if spread and limit:
            limit, ratio = None, min(1.0, limit / max(_count_bytes(path), 1))
        kept = seen = 0
        for chunk in _file_chunks(path, limit, chunk_chars):
            seen += len(chunk)
            if kept < ratio * seen:
                kept += len(chunk)
                yield from _split_eot(chunk)


def _file_chunks(path: Path, max_bytes: int | None, chunk_chars: int):
    """Chunks of whole lines. A cut goes just before the last newline ahead of a line that
    starts with a non-space, where GPT-2's regex splits anyway: no pre-token changes."""
    buf, size, total = [], 0, 0
    with _open_text(path) as f:
        for line in f:
            total += len(line.encode("utf-8"))
            if max_bytes and total > max_bytes:
                break
            if size >= chunk_chars and _cuttable(line) and buf[-1].endswith("\n"):
                buf[-1] = buf[-1][:-1]
                yield "".join(buf)
                buf, size = ["\n"], 1
            buf.append(line)
            size += len(line)
    yield "".join(buf)


def _count_bytes(path: Path) -> int:
    with _open_text(path) as f:
        return sum(len(line.encode("utf-8")) for line in f)


def _cuttable(line: str) -> bool:
    return bool(line[:1].strip()) and not line.startswith(EOT)


def _split_eot(text: str):
    for part in text.split(EOT):
        if part:
            yield part


def _holdout(chunks, every: int, sink: list | None):
    """Divert every `every`-th chunk into sink (not trained on) when sink is a list."""
    for i, chunk in enumerate(chunks):
        if sink is not None and every and i % every == every - 1:
            sink.append(chunk)
        else:
            yield chunk


# ---- training ----------------------------------------------------------------------
def train_hf(texts, n_tokens: int):
    """A `tokenizers` byte-level BPE with n_tokens tokens (256 bytes + merges)."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=n_tokens, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return hf


def hf_merges_to_ranks(hf) -> dict[bytes, int]:
    """Bytes 0..255 -> ranks 0..255, then each merge's token in merge order."""
    merges = json.loads(hf.to_str())["model"]["merges"]
    dec = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for merge in merges:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        ranks.setdefault(bytes(dec[c] for c in a + b), len(ranks))
    return ranks


def train_bpe(
    paths,
    vocab_size: int,
    max_bytes_per_file: int | None = None,
    heldout: list | None = None,
    holdout_every: int = 20,
    spread: bool = False,
    name: str = "tfm",
    return_hf: bool = False,
):
    """Train on text files; vocab_size counts every id, <|endoftext|> (the last) included.

    If `heldout` is a list, every `holdout_every`-th chunk goes there instead of training.
    """
    if vocab_size < 258:
        raise ValueError("vocab_size must be at least 258 (256 bytes, a merge, <|endoftext|>)")
    chunks = iter_chunks(paths, max_bytes_per_file, spread=spread)
    chunks = _holdout(chunks, holdout_every, heldout)
    hf = train_hf(chunks, vocab_size - 1)
    ranks = hf_merges_to_ranks(hf)
    tok = Tokenizer(ranks, {EOT: len(ranks)}, "gpt2", name)
    if tok.vocab_size != vocab_size:
        warnings.warn(
            f"the training text supports only {tok.vocab_size} tokens, not the {vocab_size} asked for", stacklevel=2
        )
    return (tok, hf) if return_hf else tok


# ---- measuring ---------------------------------------------------------------------
def measure(tok: Tokenizer, eval_text: str, train_counts: Counter | None = None) -> dict:
    """Chars/token, how often words are one token, vocab make-up, sample splits."""
    ids = tok.encode(eval_text)
    words = Counter(m.group() for m in _WORD.finditer(eval_text))
    one = sum(n for w, n in words.items() if len(tok.encode(w)) == 1)
    n_words = sum(words.values())
    merged = [tok.piece_bytes(i) for i in range(256, tok.n_ranks)]
    wordlike = sum(bool(re.fullmatch(rb" [A-Za-z]+", b)) for b in merged)
    out = {
        "vocab_size": tok.vocab_size,
        "eval_chars": len(eval_text),
        "chars_per_token": round(len(eval_text) / max(len(ids), 1), 3),
        "words_one_token": round(one / max(n_words, 1), 4),
        "whole_word_tokens": round(one / max(len(ids), 1), 4),
        "vocab_wordlike": round(wordlike / max(len(merged), 1), 4),
        "embedding_params_d192": tok.vocab_size * 192,
        "samples": [" | ".join(tok.display_pieces(tok.encode(s))) for s in SAMPLE_SENTENCES],
    }
    if train_counts is not None:
        out["train_tokens"] = sum(train_counts.values())
        # Merged tokens the model would rarely see: their embeddings stay poorly trained.
        out["merged_tokens_seen_lt_100_in_train"] = sum(train_counts.get(i, 0) < 100 for i in range(256, tok.n_ranks))
    return out


def longest_tokens(tok: Tokenizer, n: int = 40) -> list[str]:
    ids = sorted(range(tok.n_ranks), key=lambda i: (-len(tok.piece_bytes(i)), i))
    return tok.display_pieces(ids[:n])


def count_tokens(tok: Tokenizer, paths, max_bytes_per_file=None, spread=False) -> Counter:
    counts: Counter = Counter()
    for chunk in iter_chunks(paths, max_bytes_per_file, spread=spread):
        counts.update(tok.encode(chunk))
    return counts


# ---- CLI ---------------------------------------------------------------------------
def write_vocab(tok: Tokenizer, out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(out)
    (out / "special_tokens.json").write_text(json.dumps(tok.special_tokens, indent=1) + "\n")
    (out / "vocab_report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


def _measure_size(args, size: int) -> tuple[Tokenizer, dict]:
    heldout = None if args.eval else []
    tok = train_bpe(args.files, size, args.max_bytes_per_file, heldout, spread=args.spread)
    eval_text = "".join(_read_all(p) for p in args.eval) if args.eval else "".join(heldout)
    counts = None
    if args.count_train:
        counts = count_tokens(tok, args.files, args.max_bytes_per_file, args.spread)
    return tok, measure(tok, eval_text, counts)


def _read_all(path) -> str:
    with _open_text(Path(path)) as f:
        return f.read()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm.train.bpe", description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help=".txt or .txt.gz training files")
    p.add_argument("--vocab-size", type=int, default=4096, help="all ids, <|endoftext|> included")
    p.add_argument("--out", type=Path, required=True, help="folder for tokenizer.tiktoken etc.")
    p.add_argument(
        "--max-bytes-per-file",
        type=int,
        default=None,
        help="use at most this much of each file (its start, or see --spread)",
    )
    p.add_argument("--spread", action="store_true", help="take --max-bytes-per-file as chunks spread across each file")
    p.add_argument(
        "--eval", nargs="*", default=None, help="held-out text files to measure on (default: every 20th chunk held out)"
    )
    p.add_argument(
        "--compare", type=str, default="", help="comma-separated other sizes to train and measure too, e.g. 2048,8192"
    )
    p.add_argument(
        "--count-train", action="store_true", help="also count token use on the training text (rare-token counts)"
    )
    p.add_argument("--note", type=str, default="", help="the reason for the choice, stored")
    return p


METRICS = {
    "chars_per_token": "characters of the eval text per token",
    "words_one_token": "share of the eval text's words (letter runs, with their leading space) that are a single token",
    "whole_word_tokens": "share of the eval text's tokens that are a whole word",
    "vocab_wordlike": "share of merged tokens that are a space followed by ASCII letters",
    "merged_tokens_seen_lt_100_in_train": "merged tokens used under 100 times when the training text is encoded",
}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    sizes = sorted({args.vocab_size, *(int(s) for s in args.compare.split(",") if s)})
    chosen, table = None, {}
    for size in sizes:
        tok, table[str(size)] = _measure_size(args, size)
        numbers = {k: v for k, v in table[str(size)].items() if k != "samples"}
        print(f"vocab {size}: {json.dumps(numbers)}", file=sys.stderr)
        if size == args.vocab_size:
            chosen = tok
    report = {
        "chosen": args.vocab_size,
        "note": args.note,
        "pattern": PATTERNS["gpt2"],
        "training_files": [Path(f).name for f in args.files],
        "max_bytes_per_file": args.max_bytes_per_file,
        "spread": args.spread,
        "eval_files": [Path(f).name for f in args.eval] if args.eval else "every 20th chunk",
        "metrics": METRICS,
        "measurements": table,
        "longest_tokens": longest_tokens(chosen),
    }
    write_vocab(chosen, args.out, report)
    print(f"wrote {args.out}/tokenizer.tiktoken ({chosen.vocab_size} ids)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
