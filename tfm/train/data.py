"""Training data for `tfm.train`: text files tokenized once (cached as .npy), a held-out tail
per file, random windows drawn from a weighted mix, and bits per byte on an eval text."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..text.tokenizer import Tokenizer

CHUNK_CHARS = 1 << 20  # encode big files in ~1M-character pieces: bounded memory


def load_tokenizer(folder) -> tuple[Tokenizer, str]:
    """The tokenizer in `folder` (tokenizer.tiktoken + special_tokens.json) and a content hash."""
    folder = Path(folder)
    ranks, specials_path = folder / "tokenizer.tiktoken", folder / "special_tokens.json"
    if not ranks.is_file():
        raise ValueError(
            f"--tokenizer {folder}: no tokenizer.tiktoken there; give a folder such as "
            "assets/tokenizer holding tokenizer.tiktoken and special_tokens.json"
        )
    specials = json.loads(specials_path.read_text()) if specials_path.is_file() else {}
    tok = Tokenizer.from_tiktoken_file(ranks, specials)
    h = hashlib.sha256(ranks.read_bytes())
    h.update(json.dumps([specials, tok.pattern], sort_keys=True).encode())
    return tok, h.hexdigest()[:16]


def read_bytes(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def read_text(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e})") from None


def chunk_bounds(text: str, size: int = CHUNK_CHARS) -> list[int]:
    """Cut points about `size` apart, each just after a newline that sits between two
    non-space characters: the GPT-2 pre-tokenizer splits there anyway, so encoding the
    pieces separately gives exactly the tokens of encoding the whole text."""
    cuts, pos = [0], size
    while pos < len(text):
        i = text.find("\n", pos)
        while 0 < i < len(text) - 1 and not (text[i - 1].strip() and text[i + 1].strip()):
            i = text.find("\n", i + 1)
        if not 0 < i < len(text) - 1:
            break
        cuts.append(i + 1)
        pos = i + 1 + size
    return cuts + [len(text)]


def encode_text(tok: Tokenizer, text: str, size: int = CHUNK_CHARS) -> np.ndarray:
    """Token ids of `text`; "<|endoftext|>" in it is the separator token (allow_special)."""
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    cuts = chunk_bounds(text, size)
    parts = [np.asarray(tok.encode(text[a:b], allow_special=True), dtype=dtype) for a, b in zip(cuts, cuts[1:])]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def cached_tokens(path: Path, tok: Tokenizer, tok_hash: str, cache_dir: Path) -> np.ndarray:
    """Tokens of a file, cached under the run folder; the key changes with the file or tokenizer."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{tok_hash}"
    cache = cache_dir / f"{path.name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}.npy"
    if cache.is_file():
        return np.load(cache)
    ids = encode_text(tok, read_text(path))
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        np.save(f, ids)
    os.replace(tmp, cache)  # never leave a half-written cache behind
    return ids


def parse_data_spec(spec: str) -> tuple[Path, float]:
    """ "FILE" or "FILE:WEIGHT" (a ':' inside FILE is fine when no weight follows)."""
    path, sep, weight = spec.rpartition(":")
    try:
        w = float(weight) if sep and path else 1.0
    except ValueError:
        path, w = "", 1.0
    path = Path(path or spec)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"--data {spec}: the weight must be a positive number")
    if not path.is_file():
        raise ValueError(f"--data {spec}: file not found: {path}")
    return path, w


@dataclass
class Source:
    name: str
    path: Path
    weight: float
    train: np.ndarray
    val: np.ndarray


def windows(ids: np.ndarray, ctx: int, limit: int | None = None) -> list[np.ndarray]:
    """Non-overlapping rows of up to ctx+1 tokens (stride ctx) predicting ids[1:] once each."""
    rows = [ids[i : i + ctx + 1] for i in range(0, max(len(ids) - 1, 0), ctx)]
    return rows[:limit] if limit else rows


def id_windows(ids: np.ndarray, length: int) -> torch.Tensor:
    """(n, length) consecutive windows of the ids, no overlap (the tail left out): the SAE and
    transcoder trainers' rows (length ctx + 1 where the last token is only a target)."""
    n = len(ids) // length
    return torch.from_numpy(np.ascontiguousarray(ids[: n * length])).view(n, length)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy (nats) of logits (..., V) against target ids (...), computed in float32."""
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten(), reduction=reduction)


@torch.no_grad()
def nll_nats(model, rows: list[np.ndarray], device, autocast=nullcontext, batch: int = 16) -> tuple[float, int]:
    """Summed next-token NLL (nats) and the number of predicted tokens over `rows`."""
    total, count = 0.0, 0
    full = [r for r in rows if len(r) == len(rows[0])]
    groups = [full[k : k + batch] for k in range(0, len(full), batch)] + [[r] for r in rows if len(r) != len(rows[0])]
    for group in groups:
        t = torch.from_numpy(np.stack(group).astype(np.int64)).to(device)
        with autocast():
            logits = model(t[:, :-1]).logits
        total += next_token_loss(logits, t[:, 1:], reduction="sum").item()
        count += t[:, 1:].numel()
    return total, count


MIN_SPAN = 8  # shortest repeated span (tokens) with --repeat-frac
IGNORE = -100  # target id cross_entropy skips (its default ignore_index)


class Mix:
    """Training files with their held-out tails; batches sample files by weight."""

    def __init__(
        self, sources: list[Source], ctx: int, repeat_frac: float = 0.0, copy_frac: float = 0.0, vocab: int = 0
    ) -> None:
        for name, v in (("--repeat-frac", repeat_frac), ("--copy-frac", copy_frac)):
            if not 0 <= v <= 1:
                raise ValueError(f"{name} {v}: must be in [0, 1]")
        if copy_frac and vocab < 2:
            raise ValueError("--copy-frac needs the vocabulary size to draw random tokens from")
        self.sources, self.ctx, self.repeat_frac, self.copy_frac, self.vocab = (
            sources,
            ctx,
            repeat_frac,
            copy_frac,
            vocab,
        )
        self.probs = torch.tensor([s.weight for s in sources], dtype=torch.float64)
        self.probs /= self.probs.sum()

    @classmethod
    def load(
        cls,
        specs,
        tok,
        tok_hash,
        cache_dir,
        val_frac: float,
        ctx: int,
        repeat_frac: float = 0.0,
        copy_frac: float = 0.0,
    ) -> "Mix":
        sources, names = [], set()
        for spec in specs:
            path, weight = parse_data_spec(spec)
            ids = cached_tokens(path, tok, tok_hash, Path(cache_dir))
            n_val = max(ctx + 1, int(len(ids) * val_frac))  # at least one held-out window
            if len(ids) - n_val < ctx + 1:
                raise ValueError(
                    f"--data {spec}: only {len(ids)} tokens; need at least {2 * (ctx + 1)} "
                    f"(a training and a held-out window of context_length+1 = {ctx + 1})"
                )
            name = path.name if path.name not in names else str(path)
            names.add(name)
            sources.append(Source(name, path, weight, ids[:-n_val], ids[-n_val:]))
        words = tok.eot_id if tok.eot_id is not None else tok.vocab_size  # ordinary tokens only
        return cls(sources, ctx, repeat_frac, copy_frac, words)

    def batch(self, gen: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) int64 (B, ctx): random windows, file chosen with probability ∝ weight.

        With repeat_frac > 0, that fraction of rows restarts its text after a random span of
        MIN_SPAN..ctx/2 tokens (A B C D | A B C D E F ...): the second copy is predictable only
        by looking back in context, which is what previous-token and induction heads learn. The
        target at the jump (D -> A) is IGNORE: a model must not learn to restart its text."""
        which = torch.multinomial(self.probs, batch_size, replacement=True, generator=gen).tolist()
        where = torch.rand(batch_size, generator=gen, dtype=torch.float64).tolist()
        spans = [0] * batch_size
        if self.repeat_frac > 0:  # extra draws only then: runs without it keep their batches
            chosen = torch.rand(batch_size, generator=gen) < self.repeat_frac
            lengths = torch.randint(MIN_SPAN, self.ctx // 2 + 1, (batch_size,), generator=gen)
            spans = torch.where(chosen, lengths, 0).tolist()
        rows = []
        for i, u, n in zip(which, where, spans):
            arr = self.sources[i].train
            start = int(u * (len(arr) - self.ctx))  # 0 .. len - ctx - 1
            row = arr[start : start + self.ctx + 1]
            rows.append(np.concatenate([row[:n], row[: self.ctx + 1 - n]]) if n else row)
        t = torch.from_numpy(np.stack(rows).astype(np.int64))
        x, y = t[:, :-1], t[:, 1:].clone()
        jumps = [(r, n - 1) for r, n in enumerate(spans) if n]
        if jumps:  # the jump back is not text: never learn to predict it (IGNORE), only what follows
            y[tuple(zip(*jumps))] = IGNORE
        if self.copy_frac > 0:
            self.random_copies(gen, x, y)
        return x, y

    def random_copies(self, gen: torch.Generator, x: torch.Tensor, y: torch.Tensor) -> None:
        """Replace copy_frac of the rows, in place, by random tokens repeating with a period of
        MIN_SPAN..ctx/2: only the repeats are learned (the first period and the jump are IGNORE), so the model
        learns to copy from context (induction) without learning to predict noise."""
        chosen = (torch.rand(len(x), generator=gen) < self.copy_frac).nonzero().flatten().tolist()
        for r in chosen:
            n = int(torch.randint(MIN_SPAN, self.ctx // 2 + 1, (1,), generator=gen))
            period = torch.randint(0, self.vocab, (n,), generator=gen)
            row = period.repeat(self.ctx // n + 2)[: self.ctx + 1]
            x[r], y[r] = row[:-1], row[1:]
            y[r, :n] = IGNORE  # the first period and the jump back to its start

    def val_losses(self, model, device, autocast, max_windows: int, batch: int) -> dict[str, float]:
        """Mean held-out loss per file over its first `max_windows` windows (deterministic)."""
        out = {}
        for s in self.sources:
            nats, n = nll_nats(model, windows(s.val, self.ctx, max_windows), device, autocast, batch)
            out[s.name] = nats / n
        return out

    def mixed(self, per_file: dict[str, float]) -> float:
        """The held-out loss of the mix: per-file losses weighted like the sampling."""
        return sum(p * per_file[s.name] for p, s in zip(self.probs.tolist(), self.sources))

    def describe(self, tokens_seen: int = 0) -> list[dict]:
        """Sizes, shares and epochs so far, for logs and the model's meta."""
        return [
            {
                "file": str(s.path),
                "weight": s.weight,
                "share": round(p, 4),
                "file_bytes": s.path.stat().st_size,
                "train_tokens": len(s.train),
                "val_tokens": len(s.val),
                "epochs": round(tokens_seen * p / len(s.train), 3),
            }
            for p, s in zip(self.probs.tolist(), self.sources)
        ]


class EvalText:
    """A fixed UTF-8 prefix of a file, scored in bits per byte (vocabulary independent)."""

    def __init__(self, path, tok: Tokenizer, max_bytes: int, ctx: int) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"--eval-file {path}: file not found")
        text = read_bytes(self.path)[:max_bytes].decode("utf-8", errors="ignore")  # drop a cut char
        self.n_bytes = len(text.encode("utf-8"))
        ids = tok.encode(text, allow_special=True)
        if tok.eot_id is not None:
            ids = [tok.eot_id] + ids  # a document start: then every byte of the text is predicted
        else:
            self.n_bytes -= len(tok.decode_bytes(ids[:1]))  # the first token is never predicted
        if len(ids) < 2 or self.n_bytes <= 0:
            raise ValueError(f"--eval-file {path}: too little text to evaluate")
        self.rows = windows(np.asarray(ids, dtype=np.int64), ctx)

    def bits_per_byte(self, model, device, autocast=nullcontext, batch: int = 16) -> float:
        nats, _ = nll_nats(model, self.rows, device, autocast, batch)
        return nats / math.log(2) / self.n_bytes
