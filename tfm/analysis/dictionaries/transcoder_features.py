"""Transcoder features with meaning: each feature's top-activating held-out contexts and its label
(the SAE's rules, `labels`), stored beside a transcoder set and read back checked.

    tf = read_features(folder, ts, lm)     # None when the set ships none (or they are for another version)
    tf.label(layer, f)                     # "says ' Paris'" / "on ' the' (stories)" / "dead (...)"
    tf.contexts(layer, f)                  # [Context(ids, peak, activation, domain)], strongest first
    tf.search(" Paris")                    # [(layer, feature)] whose label, top tokens or says-token match

`python -m tfm.train.transcoder_labels` writes the files. A set folder then holds:

    contexts.safetensors       tokens (N,) int32: the held-out text (windows of `ctx` tokens, domains
                               one after another); window_domain (N / ctx,) int8
    features_LL.safetensors    per layer: ctx_pos (F, n) int32 (where each top context peaks in
                               `tokens`, -1 none), ctx_act (F, n) fp16 (the activation there),
                               hist_max (F,) f32 (the largest held-out activation), freq (F,) f32
                               (share of held-out tokens it fires on)
    labels_LL.json.gz          per layer: `labels.labels_json` (gzip), plus the set identity

Every file is size-bounded and checked as it is read (`tfm.core.files`); nothing is unpickled. A
layer's labels name the identity of the set they were made for (`TranscoderSet.identity`): after a
retrained set they no longer match and the set is shown without them until the command runs again.
A layer's data rebuilt as the SAE's feature data (`layer_data`) feeds `labels.compute_labels`.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ...core import edits as E
from ...core.files import bounded_member, parse_json, read_bytes, reading
from ...core.validate import check_int
from ...loaders.weights import read_safetensors
from . import labels as FL
from .features import FeatureSet
from .transcoder import TranscoderSet

CONTEXTS_FILE = "contexts.safetensors"
N_CONTEXTS, BEFORE, AFTER = 8, 12, 3  # contexts per feature; tokens shown before and after the peak
MAX_TOKENS = 2**20  # held-out tokens a set's contexts may hold
MAX_FILE_BYTES = 8 * 2**20  # contexts, one layer's features, one layer's labels (gzip)
MAX_LABELS_JSON = 16 * 2**20  # one layer's labels once unzipped
HOLDS = (
    "a transcoder set's labels: contexts.safetensors, and features_LL.safetensors and labels_LL.json.gz "
    "per layer (python -m tfm.train.transcoder_labels writes them)"
)


def features_file(layer: int) -> str:
    return f"features_{layer:02d}.safetensors"


def labels_file(layer: int) -> str:
    return f"labels_{layer:02d}.json.gz"


@dataclass(frozen=True)
class Context:
    ids: list[int]  # the tokens around the peak (never across a window's edge)
    peak: int  # index in ids of the token the feature fires hardest on
    activation: float
    domain: str | None


def _member(folder: Path, name: str, limit: int = MAX_FILE_BYTES) -> Path:
    return bounded_member(Path(folder) / name, limit, "the labels file", HOLDS)


def _tensors(path: Path, want: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, torch.Tensor]:
    data = read_safetensors(path)
    got = {k: (tuple(t.shape), t.dtype) for k, t in data.items()}
    with reading(path.name):
        if got != want:
            raise ValueError(f"it holds {got}; expected {want}")
        for k, t in data.items():
            if t.is_floating_point() and not bool((torch.isfinite(t) & (t >= 0)).all()):
                raise ValueError(f"{k} must hold finite numbers, none negative")
    return data


def read_contexts(folder: Path, n_vocab: int, n_domains: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (N,) long, window_domain (W,) long) of contexts.safetensors, checked."""
    path = _member(folder, CONTEXTS_FILE)
    data = read_safetensors(path)
    with reading(CONTEXTS_FILE):
        tok, dom = data.get("tokens"), data.get("window_domain")
        if (
            set(data) != {"tokens", "window_domain"}
            or tok.dim() != 1
            or dom.dim() != 1
            or tok.dtype != torch.int32
            or dom.dtype != torch.int8
            or not 0 < tok.numel() <= MAX_TOKENS
        ):
            raise ValueError("it must hold tokens (N,) int32 and window_domain (windows,) int8")
        if bool(((tok < 0) | (tok >= n_vocab)).any()) or bool(((dom < 0) | (dom >= n_domains)).any()):
            raise ValueError(f"token ids must lie below {n_vocab} and domains below {n_domains}")
    return tok.long(), dom.long()


def read_layer(folder: Path, layer: int, n_features: int, n_tokens: int) -> dict[str, torch.Tensor]:
    f = n_features
    want = {
        "ctx_pos": ((f, N_CONTEXTS), torch.int32),
        "ctx_act": ((f, N_CONTEXTS), torch.float16),
        "hist_max": ((f,), torch.float32),
        "freq": ((f,), torch.float32),
    }
    name = features_file(layer)
    data = _tensors(_member(folder, name), want)
    with reading(name):
        pos = data["ctx_pos"]
        if bool(((pos < -1) | (pos >= n_tokens)).any()) or bool((data["freq"] > 1).any()):
            raise ValueError(f"ctx_pos must be -1 or a position below {n_tokens}; freq a share (0..1)")
    return data


def _gunzip(raw: bytes, name: str) -> bytes:
    """gzip bytes, refused once they unpack past MAX_LABELS_JSON (a small file can unpack huge)."""
    with reading(name):
        try:
            z = zlib.decompressobj(wbits=31)
            out = z.decompress(raw, MAX_LABELS_JSON + 1)
        except zlib.error as e:
            raise ValueError(f"it is not gzip data ({e})") from None
        if len(out) > MAX_LABELS_JSON or z.unconsumed_tail:
            raise ValueError(f"it unpacks past {MAX_LABELS_JSON:,} bytes")
    return out


def read_layer_labels(folder: Path, layer: int, n_features: int, n_vocab: int) -> tuple[str, FL.FeatureLabels]:
    """(the set identity they were made for, the labels) of labels_LL.json.gz, every entry checked."""
    name = labels_file(layer)
    data = parse_json(_gunzip(read_bytes(_member(folder, name), MAX_FILE_BYTES), name), name)
    with reading(name):
        if not isinstance(data, dict) or not isinstance(data.get("identity"), str) or len(data["identity"]) > 64:
            raise ValueError("it must be an object naming the set's identity")
        return data["identity"], FL.labels_from_json(data, n_features, n_vocab)


def write_layer_labels(folder: Path, layer: int, identity: str, labels: FL.FeatureLabels) -> None:
    text = json.dumps({"identity": identity, **FL.labels_json(labels)}, ensure_ascii=False, separators=(",", ":"))
    (Path(folder) / labels_file(layer)).write_bytes(gzip.compress(text.encode(), mtime=0))


def layer_data(
    raw: dict[str, torch.Tensor], tokens: torch.Tensor, window_domain: torch.Tensor, ctx: int
) -> dict[str, torch.Tensor]:
    """One layer's stored data as the SAE's feature data (`tfm.analysis.dictionaries.sae`): ctx_ids (F, n, W)
    around each peak (-1 past a window's edge), ctx_acts (F, n, W) (the peak's activation, 0
    elsewhere: only the peak is stored), ctx_domain (F, n), hist_max, freq."""
    pos = raw["ctx_pos"].long()  # (F, n)
    at = pos[..., None] + torch.arange(-BEFORE, AFTER + 1)  # (F, n, W)
    ok = (pos[..., None] >= 0) & (at >= 0) & (at < tokens.numel()) & (at // ctx == pos[..., None] // ctx)
    ids = torch.where(ok, tokens[at.clamp(0, tokens.numel() - 1)], -1)
    acts = torch.zeros(ids.shape)
    acts[..., BEFORE] = torch.where(pos >= 0, raw["ctx_act"].float(), 0.0)
    dom = torch.where(pos >= 0, window_domain[(pos.clamp_min(0) // ctx).clamp_max(window_domain.numel() - 1)], -1)
    return {
        "ctx_ids": ids,
        "ctx_acts": acts,
        "ctx_domain": dom,
        "hist_max": raw["hist_max"].float(),
        "freq": raw["freq"].float(),
    }


def feature_set(tc, data: dict[str, torch.Tensor], domains) -> FeatureSet:
    """A transcoder layer as `labels.compute_labels` reads an SAE: its decoder, data and domains."""
    return FeatureSet(tc, {"domains": list(domains)}, data)


@dataclass(frozen=True)
class OutputVector:
    """A transcoder feature's decoder row times its largest held-out activation, added where the
    feature writes: the stream leaving its block (resid_post). `edit` as `SteeringVector.edit`."""

    vector: torch.Tensor
    layer: int

    def edit(self, strength: float, start: int = 0, stop: int | None = None, row: int | None = None, skip=()):
        return E.Steer(self.layer, self.vector, float(strength), start, stop, "resid_post", row, tuple(skip))


def output_vector(tc, hist_max: torch.Tensor, feature: int) -> OutputVector:
    top = float(hist_max[feature])
    return OutputVector(tc.W_dec[feature].detach().float() * (top if top > 0 else 1.0), tc.layer)


@dataclass(frozen=True, eq=False)
class TranscoderFeatures:
    """A set's shipped contexts and labels, every layer (index = layer)."""

    identity: str
    tokens: torch.Tensor  # (N,) the held-out text
    window_domain: torch.Tensor  # (N / ctx,)
    ctx: int
    domains: tuple[str, ...]
    layers: tuple[dict[str, torch.Tensor], ...]
    labels: tuple[FL.FeatureLabels, ...]
    nbytes: int = 0  # what it holds, labels' strings included (a page's cache counts it)

    def _check(self, layer: int, feature: int) -> tuple[int, int]:
        layer = check_int("layer", layer, 0, len(self.labels) - 1)
        return layer, check_int("feature", feature, 0, len(self.labels[layer].features) - 1)

    def entry(self, layer: int, feature: int) -> FL.FeatureLabel:
        layer, feature = self._check(layer, feature)
        return self.labels[layer].features[feature]

    def label(self, layer: int, feature: int) -> str:
        return self.entry(layer, feature).label

    def freq(self, layer: int, feature: int) -> float:
        layer, feature = self._check(layer, feature)
        return float(self.layers[layer]["freq"][feature])

    def contexts(self, layer: int, feature: int) -> list[Context]:
        """Its top held-out contexts, strongest first: BEFORE tokens before the peak, AFTER after."""
        layer, feature = self._check(layer, feature)
        pos, act = self.layers[layer]["ctx_pos"][feature].tolist(), self.layers[layer]["ctx_act"][feature].tolist()
        out = []
        for p, a in zip(pos, act):
            if p < 0:
                continue
            row = p // self.ctx
            lo, hi = max(p - BEFORE, row * self.ctx), min(p + AFTER + 1, (row + 1) * self.ctx, self.tokens.numel())
            dom = int(self.window_domain[row]) if row < self.window_domain.numel() else -1
            out.append(
                Context(
                    self.tokens[lo:hi].tolist(),
                    p - lo,
                    float(a),
                    self.domains[dom] if 0 <= dom < len(self.domains) else None,
                )
            )
        return out

    def search(self, query: str, limit: int = 50, among: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
        """(layer, feature) pairs matching `query` (`FeatureLabel.matches`), best first, then by
        layer and id; only those of `among` when given."""
        if not isinstance(query, str) or len(query) > FL.MAX_QUERY:
            raise ValueError(f"a feature search is a word or token of at most {FL.MAX_QUERY} characters")
        pairs = (
            among
            if among is not None
            else [(layer, f) for layer, lab in enumerate(self.labels) for f in range(len(lab.features))]
        )
        scored = [(-s, layer, f) for layer, f in pairs if (s := self.entry(layer, f).matches(query))]
        return [(layer, f) for _, layer, f in sorted(scored)[:limit]]


def labels_entry(card: dict) -> dict | None:
    """The card's "labels" entry (what `python -m tfm.train.transcoder_labels` measured), checked
    for what reading needs: ctx, domains, identity; None when the card has none."""
    entry = card.get("labels")
    if entry is None:
        return None
    with reading("card.json"):
        if not isinstance(entry, dict) or not isinstance(entry.get("identity"), str):
            raise ValueError("labels must be an object naming the set's identity")
        check_int("labels ctx", entry.get("ctx"), 2, 1 << 16)
        doms = entry.get("domains")
        if (
            not isinstance(doms, list)
            or not 0 < len(doms) <= 16
            or not all(isinstance(d, str) and len(d) <= 40 for d in doms)
        ):
            raise ValueError("labels domains: a short list of names")
    return entry


def read_features(folder: Path | str, ts: TranscoderSet, lm) -> TranscoderFeatures | None:
    """The set's contexts and labels, every file checked; None when it ships none, when a layer's
    are missing (the command has not finished) or when they were made for another version of the
    set (its identity changed: retrained)."""
    folder, entry = Path(folder), labels_entry(ts.card)
    n_layer, n_f = ts.cfg.n_layer, ts.cfg.n_features
    if entry is None or entry["identity"] != ts.identity:
        return None
    if not all((folder / n).exists() for i in range(n_layer) for n in (features_file(i), labels_file(i))):
        return None
    vocab = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    tokens, window_domain = read_contexts(folder, vocab, len(entry["domains"]))
    layers, labels = [], []
    for i in range(n_layer):
        layers.append(read_layer(folder, i, n_f, tokens.numel()))
        identity, lab = read_layer_labels(folder, i, n_f, vocab)
        if identity != ts.identity:
            return None
        labels.append(lab)
    size = sum(t.numel() * t.element_size() for t in [tokens, window_domain, *(t for d in layers for t in d.values())])
    size += sum(_label_bytes(lab) for labs in labels for lab in labs.features)
    return TranscoderFeatures(
        ts.identity,
        tokens,
        window_domain,
        int(entry["ctx"]),
        tuple(entry["domains"]),
        tuple(layers),
        tuple(labels),
        size,
    )


def _label_bytes(lab: FL.FeatureLabel) -> int:
    """A label's Python objects: the object, its strings and tuple (numbers and None shared or small)."""
    strings = [lab.label, lab.says or "", lab.domain or "", *lab.tokens]
    return sys.getsizeof(lab) + sys.getsizeof(lab.tokens) + sum(sys.getsizeof(s) for s in strings) + 4 * 32
