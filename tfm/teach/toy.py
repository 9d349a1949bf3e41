"""Toy sequence-to-sequence tasks for the encoder-decoder, and a small training loop.

Every example is made on the fly from a seeded `torch.Generator`: strings of digits of
varying length, padded to a fixed width. The target is the source reversed, sorted, copied,
or rotated, so the alignment the cross-attention must learn is known in advance (the
anti-diagonal for reversal, the diagonal for copying).

Token ids: 0 = padding, 1 = BOS (start of the target), 2 = EOS, 3 + d = digit d.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from ..core.files import parse_json, reading
from .encdec import EncDecConfig, EncoderDecoder, greedy_decode, load_encdec, model_from_parts, save_encdec
from ..core.trace import Trace
from ..loaders.limits import fmt_bytes

PAD, BOS, EOS, FIRST_DIGIT = 0, 1, 2, 3
VOCAB = FIRST_DIGIT + 10
SHIFT = 2  # "shift": rotate left by this many symbols

TASKS = {
    "reverse": "reverse the digits: 12345 -> 54321",
    "sort": "sort the digits: 31412 -> 11234",
    "copy": "copy the digits: 12345 -> 12345",
    "shift": f"rotate left by {SHIFT}: 12345 -> 34512",
}


def target_of(task: str, digits: list[int]) -> list[int]:
    """The answer for one source (digits 0-9)."""
    if task == "reverse":
        return digits[::-1]
    if task == "sort":
        return sorted(digits)
    if task == "copy":
        return list(digits)
    if task == "shift":
        k = SHIFT % len(digits)
        return digits[k:] + digits[:k]
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


@dataclass(frozen=True)
class ToySpec:
    """Which task and which source lengths (inclusive)."""

    task: str = "reverse"
    min_len: int = 5
    max_len: int = 10

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if not (1 <= self.min_len <= self.max_len <= 64):
            raise ValueError(f"lengths {self.min_len}..{self.max_len}: need 1 <= min_len <= max_len <= 64")

    def model_config(self, **overrides) -> EncDecConfig:
        """The small model used for the toy tasks; targets hold BOS/EOS, so +1 position."""
        base = dict(
            src_vocab_size=VOCAB,
            tgt_vocab_size=VOCAB,
            src_context_length=self.max_len,
            tgt_context_length=self.max_len + 1,
            d_model=64,
            n_enc_layer=2,
            n_dec_layer=2,
            n_head=4,
            d_ff=128,
            norm_placement="pre",
        )
        return EncDecConfig(**{**base, **overrides})


@dataclass(frozen=True)
class Batch:
    src: torch.Tensor  # (B, S) digit ids, PAD after each source
    src_pad: torch.Tensor  # (B, S) True at padding
    tgt_in: torch.Tensor  # (B, S+1) BOS + target, then PAD
    tgt_out: torch.Tensor  # (B, S+1) target + EOS, then PAD (ignored by the loss)


def encode_digits(text: str) -> list[int]:
    """'3141' -> [3, 1, 4, 1]; anything but digits 0-9 is an error."""
    if not text or not text.isascii() or not text.isdigit():
        raise ValueError(f"type digits 0-9 only (got {text!r})")
    return [int(c) for c in text]


def make_batch(spec: ToySpec, digit_rows: list[list[int]]) -> Batch:
    """Pad given sources (lists of digits) and their targets into tensors."""
    b, width = len(digit_rows), spec.max_len
    src = torch.full((b, width), PAD, dtype=torch.long)
    tgt_in = torch.full((b, width + 1), PAD, dtype=torch.long)
    tgt_out = torch.full((b, width + 1), PAD, dtype=torch.long)
    for r, digits in enumerate(digit_rows):
        if not (1 <= len(digits) <= width):
            raise ValueError(f"a source of {len(digits)} digits does not fit: use 1 to {width} digits")
        ans = [FIRST_DIGIT + d for d in target_of(spec.task, digits)]
        n = len(digits)
        src[r, :n] = torch.tensor([FIRST_DIGIT + d for d in digits])
        tgt_in[r, : n + 1] = torch.tensor([BOS] + ans)
        tgt_out[r, : n + 1] = torch.tensor(ans + [EOS])
    return Batch(src, src == PAD, tgt_in, tgt_out)


def random_batch(spec: ToySpec, size: int, g: torch.Generator) -> Batch:
    """`size` random sources with lengths uniform in [min_len, max_len]."""
    lengths = torch.randint(spec.min_len, spec.max_len + 1, (size,), generator=g)
    digits = torch.randint(0, 10, (size, spec.max_len), generator=g)
    return make_batch(spec, [digits[r, :n].tolist() for r, n in enumerate(lengths.tolist())])


def loss_on(model: EncoderDecoder, batch: Batch) -> torch.Tensor:
    logits = model(batch.src, batch.tgt_in, batch.src_pad).logits  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)


def decode_text(ids: list[int]) -> str:
    """Digits of a generated row, stopping at EOS (BOS and PAD dropped)."""
    out = []
    for i in ids:
        if i == EOS:
            break
        if i >= FIRST_DIGIT:
            out.append(str(i - FIRST_DIGIT))
    return "".join(out)


@torch.no_grad()
def predict(model: EncoderDecoder, batch: Batch) -> list[str]:
    """Greedy answers as digit strings."""
    out = greedy_decode(model, batch.src, batch.src_pad, bos_id=BOS, eos_id=EOS)
    return [decode_text(row) for row in out[:, 1:].tolist()]


@torch.no_grad()
def exact_match(model: EncoderDecoder, spec: ToySpec, n: int = 500, seed: int = 1234) -> float:
    """Share of `n` fresh random sources whose whole greedy answer is right."""
    was_training = model.training
    model.eval()
    batch = random_batch(spec, n, torch.Generator().manual_seed(seed))
    want = [decode_text(row) for row in batch.tgt_out.tolist()]
    with torch_threads(1):
        got = predict(model, batch)
    model.train(was_training)
    return sum(a == b for a, b in zip(got, want)) / n


PROBE = [5, 8, 3, 0, 9, 6, 1, 2, 7, 4]  # distinct digits: each target position has one right source


def probe_batch(spec: ToySpec) -> Batch:
    """The fixed example whose cross-attention is snapshotted during training (shorter than
    max_len when possible, so padded source columns show up too)."""
    return make_batch(spec, [probe_digits(spec)])


def probe_digits(spec: ToySpec) -> list[int]:
    n = max(spec.min_len, min(spec.max_len - 2, len(PROBE)))
    return (PROBE * 7)[:n]


@dataclass(frozen=True)
class Snapshot:
    step: int
    cross: torch.Tensor  # (L_dec, H, T, S) cross-attention of the probe, teacher-forced
    answer: str  # the greedy answer at that step


@dataclass
class TrainResult:
    model: EncoderDecoder
    spec: ToySpec
    losses: list[float] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    seconds: float = 0.0


@torch.no_grad()
def cross_patterns(model: EncoderDecoder, batch: Batch) -> torch.Tensor:
    """(L_dec, H, T, S) cross-attention of batch row 0, teacher-forced on its target."""
    tr = model(batch.src[:1], batch.tgt_in[:1], batch.src_pad[:1], trace=True).trace
    return torch.stack([tr[f"dec.blocks.{i}.cross.pattern"][0] for i in range(model.config.n_dec_layer)])


def snapshot(model: EncoderDecoder, spec: ToySpec, step: int) -> Snapshot:
    was_training = model.training
    model.eval()
    probe = probe_batch(spec)
    snap = Snapshot(step, cross_patterns(model, probe), predict(model, probe)[0])
    model.train(was_training)
    return snap


def lr_at(step: int, steps: int, lr: float, warmup: int = 50) -> float:
    """Linear warm-up, then linear decay to 10% at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * (1.0 - 0.9 * (step - warmup) / max(1, steps - warmup))


_threads_lock = threading.Lock()
_threads_users = 0
_threads_saved = 0


@contextmanager
def torch_threads(n: int | None):
    """Run with `n` intra-op threads, then restore. Tiny models run fastest on one thread:
    with two threads on two busy cores, each small op waits for the other thread (measured
    many times slower: docs/benchmarks.md). torch's setting is per process, so concurrent users (threads of one
    server) share one saved value and the last to leave restores it."""
    global _threads_users, _threads_saved
    if not n:
        yield
        return
    with _threads_lock:
        if _threads_users == 0:
            _threads_saved = torch.get_num_threads()
        _threads_users += 1
        torch.set_num_threads(n)
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users -= 1
            if _threads_users == 0:
                torch.set_num_threads(_threads_saved)


def train(
    spec: ToySpec,
    steps: int,
    *,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    snapshot_every: int = 25,
    config: EncDecConfig | None = None,
    threads: int | None = 1,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train a fresh model on random batches; `on_step(step, loss)` after each step.

    Reproducible for a given seed (own generators; the global RNG is not used)."""
    if not (1 <= steps <= 100_000):
        raise ValueError(f"steps={steps}: choose 1 to 100000")
    with torch_threads(threads):
        return _train(spec, steps, batch_size, lr, seed, snapshot_every, config, on_step)


def _train(spec, steps, batch_size, lr, seed, snapshot_every, config, on_step) -> TrainResult:
    model = EncoderDecoder(config or spec.model_config())
    model.reset_parameters(torch.Generator().manual_seed(seed))
    data = torch.Generator().manual_seed(seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    result, start = TrainResult(model, spec), time.perf_counter()
    result.snapshots.append(snapshot(model, spec, 0))
    model.train()
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step - 1, steps, lr)
        loss = loss_on(model, random_batch(spec, batch_size, data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        result.losses.append(loss.item())
        if step % snapshot_every == 0 or step == steps:
            result.snapshots.append(snapshot(model, spec, step))
        if on_step is not None:
            on_step(step, result.losses[-1])
    model.eval()
    result.seconds = time.perf_counter() - start
    return result


# ---- save / load as a zip of a model folder (config.json + model.safetensors) -----------


def spec_meta(spec: ToySpec) -> dict:
    return {"toy_task": spec.task, "min_len": spec.min_len, "max_len": spec.max_len}


def save_folder(folder, model: EncoderDecoder, spec: ToySpec):
    """A model folder (config.json + model.safetensors) that `load_folder` reads back."""
    return save_encdec(folder, model, spec_meta(spec))


def load_folder(folder, max_weight_bytes: int | None = None) -> tuple[EncoderDecoder, ToySpec]:
    """A folder `save_folder` wrote; weights over `max_weight_bytes` (when given) refused unread."""
    name = Path(folder).name
    with reading(name, name_values=False):  # whatever the folder's files hold: one ValueError
        model, meta = load_encdec(folder, max_weight_bytes)
        return model, spec_from_meta(meta, name)


def to_zip(model: EncoderDecoder, spec: ToySpec) -> bytes:
    """The model folder `save_encdec` writes, as zip bytes (for a download button)."""
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    data = {"format": "tfm-encdec", "version": 1, "model": model.config.to_dict(), "meta": spec_meta(spec)}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", json.dumps(data, indent=2) + "\n")
        z.writestr("model.safetensors", save_safetensors_bytes(state, metadata={"format": "tfm-encdec"}))
    return buf.getvalue()


def spec_from_meta(meta: dict, source: str) -> ToySpec:
    try:
        return ToySpec(meta["toy_task"], int(meta["min_len"]), int(meta["max_len"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f'{source}: config.json\'s "meta" does not describe a toy task ({e})') from None


def from_zip(
    data: bytes, source: str = "the uploaded zip", max_bytes: int | None = None
) -> tuple[EncoderDecoder, ToySpec]:
    """Read a zip made by `to_zip` (nothing is extracted to disk; only two members are read, each
    checked against `max_bytes` before it is decompressed: a small zip can expand enormously)."""
    with reading(source, name_values=False):  # an encrypted or corrupt member, a nested config.json, ...
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                names = set(z.namelist())
                missing = sorted({"config.json", "model.safetensors"} - names)
                if missing:
                    raise ValueError(f"{source} lacks {missing}; it should hold config.json and model.safetensors")
                if max_bytes is not None and any(
                    z.getinfo(n).file_size > max_bytes for n in ("config.json", "model.safetensors")
                ):
                    raise ValueError(
                        f"{source} holds a model larger than this server takes "
                        f"({fmt_bytes(max_bytes)} at most): save a smaller model"
                    )
                config = parse_json(z.read("config.json"), f"{source}'s config.json")
                state = load_safetensors_bytes(z.read("model.safetensors"))
        except (zipfile.BadZipFile, SafetensorError) as e:
            raise ValueError(f"{source} is not a saved toy model ({type(e).__name__}: {e})") from None
        model, meta = model_from_parts(config, state, source)
        spec = spec_from_meta(meta, source)
    if model.config.src_context_length < spec.max_len:
        raise ValueError(f"{source}: the model's context is shorter than the task's max_len")
    return model, spec


def token_label(i: int) -> str:
    return {PAD: "pad", BOS: "BOS", EOS: "EOS"}.get(i, str(i - FIRST_DIGIT))


@torch.no_grad()
def answer_trace(model: EncoderDecoder, batch: Batch) -> tuple[str, list[int], Trace]:
    """Greedy answer for batch row 0, the tokens it wrote (through EOS), and the trace of the
    decoder re-run on exactly what it was fed (BOS + its own tokens): row i of a decoder
    pattern is the step that wrote written[i]."""
    src, pad = batch.src[:1], batch.src_pad[:1]
    with torch_threads(1):
        gen = greedy_decode(model, src, pad, bos_id=BOS, eos_id=EOS)[0].tolist()
        written = gen[1:]
        if EOS in written:
            written = written[: written.index(EOS) + 1]
        fed = torch.tensor([[BOS] + written[:-1]])
        trace = model(src, fed, pad, trace=True).trace
    return decode_text(written), written, trace
