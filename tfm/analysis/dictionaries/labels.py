"""A short label for every SAE feature from its own evidence, no language model asked, and a
search over them (the Features page's box).

    labels = compute_labels(lm, fs)              # FeatureLabels: one FeatureLabel per feature
    labels.label(f)                              # "says ' Paris'" / "on ' the' (stories)" / "dead"
    labels.search(" Paris")                      # feature ids whose says-token, top tokens or label match
    save_labels(labels, folder); read_labels(folder, n_features)   # labels.json, bounded, checked

A feature *says X* when its decoder direction, read through the final norm's gain and the
unembedding (`steering.read_out`, the Features page's read-out bars), puts one token clearly
ahead: the top score's margin over the second, in standard deviations of the scores over the
vocabulary, is at least SAYS_MARGIN; and the feature, added as strongly as it ever fired, pushes
that token's logit directly by at least SAYS_GAIN nats over the average token (its top score over
the mean, times its largest held-out activation, divided by the final stream's typical RMS: what
the final norm divides by). A mid-layer feature whose direct push is smaller is moved about by the
later blocks as much as by itself, and steering with it fails to raise X as often as not. Otherwise it is labelled by where it fires: the token it
fires hardest on in each of its top held-out contexts ("on ' the'" when one token is the peak in
at least half of them, else up to three), with the contexts' domain when the SAE's feature data
records one. A feature that never fired on held-out text is "dead".

Every "says X" label is checked (`steering_check`): steering with the feature at strength 1
(`features.steering_vector`: its decoder row times its largest held-out activation, as the Steer
page does) must raise p(X) at the next position after each of CHECK_PROMPTS. The share that pass
is stored with the labels and shown on the SAE's card.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ...core.files import folder_file, read_json, reading
from ...core.validate import check_int
from .sae import stream_at
from ..steering.vectors import NEUTRAL_TEXT, reading_ids, steer_span

LABELS_FILE = "labels.json"
MAX_LABELS_BYTES = 8 * 2**20
SAYS_MARGIN = 1.0  # top read-out score over the second, in std of the scores (measured: docs/benchmarks.md)
SAYS_GAIN = 2.0  # nats: the least direct push on X's logit at strength 1 (measured: docs/benchmarks.md)
CHECK_PROMPTS = ("The", "I think that", "It was a", "Here is the")
MAX_QUERY = 80
MAX_LABEL = 80


def _bare(text: str) -> str:
    """A token or query compared: quotes (as `piece` writes them), spaces and case dropped."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1]
    return text.strip().lower()


@dataclass(frozen=True)
class FeatureLabel:
    label: str
    says: str | None  # the token it says (decoded), None when no token dominates
    says_id: int | None
    margin: float  # (top - second) / std of its read-out scores
    gain: float  # nats: the direct push on the top token's logit at strength 1 over the average token
    tokens: tuple[str, ...]  # the tokens it fires hardest on in its top contexts, most often first
    domain: str | None  # where its top contexts come from ("stories", "mixed"), None if unrecorded
    check: bool | None  # the steering check of a "says" label; None otherwise

    def matches(self, query: str) -> int:
        """0 = no match; 3 its says-token, 2 one of its tokens, 1 its label (case and spaces ignored)."""
        q = _bare(query)
        if not q:
            return 0
        if self.says is not None and _bare(self.says) == q:
            return 3
        if any(_bare(t) == q for t in self.tokens):
            return 2
        return 1 if q in self.label.lower() else 0


@dataclass(frozen=True, eq=False)
class FeatureLabels:
    features: tuple[FeatureLabel, ...]
    says_margin: float
    says_gain: float
    prompts: tuple[str, ...]

    def label(self, feature: int) -> str:
        return self.features[check_int("feature", feature, 0, len(self.features) - 1)].label

    def search(self, query: str, limit: int = 50) -> list[int]:
        """Features matching `query` (a word or a token), best matches first, then by id."""
        if not isinstance(query, str) or len(query) > MAX_QUERY:
            raise ValueError(f"a feature search is a word or token of at most {MAX_QUERY} characters")
        scored = [(-s, f) for f, lab in enumerate(self.features) if (s := lab.matches(query))]
        return [f for _, f in sorted(scored)[:limit]]

    def check_share(self) -> tuple[int, int]:
        """(passed, checked) over the "says X" labels."""
        checked = [lab.check for lab in self.features if lab.check is not None]
        return sum(checked), len(checked)


def piece(tokenizer, token: int) -> str:
    """A token as a label shows it: quoted, newlines and tabs visible."""
    text = tokenizer.decode([int(token)]).replace("\n", "⏎").replace("\t", "⇥")
    return f"'{text}'"


@torch.no_grad()
def read_out_scores(lm, sae, chunk: int = 256):
    """(top id, top score margin in std, top score over the mean) per feature: W_dec[f] times the
    final norm's gain (centred for LayerNorm) times the unembedding, over the tokenizer's vocabulary."""
    model = lm.model
    n_vocab = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    w_u = model.unembed.weight.float()[:n_vocab]  # (V, D)
    ids, margins, lifts = [], [], []
    for a in range(0, sae.cfg.n_features, chunk):
        d = sae.W_dec[a : a + chunk].float().to(w_u.device)  # (c, D)
        if model.ln_final is not None:
            d = d * model.ln_final.weight.float()
            if model.ln_final.kind == "layernorm":
                d = d - d.mean(-1, keepdim=True)
        s = d @ w_u.t()  # (c, V)
        top = s.topk(2, dim=-1)
        ids.append(top.indices[:, 0].cpu())
        margins.append(((top.values[:, 0] - top.values[:, 1]) / s.std(-1)).cpu())
        lifts.append((top.values[:, 0] - s.mean(-1)).cpu())
    return torch.cat(ids), torch.cat(margins), torch.cat(lifts)


@torch.no_grad()
def final_rms(lm) -> float:
    """The median RMS of the stream leaving the last block on steering.NEUTRAL_TEXT (its own
    tokens, never the sink), centred for LayerNorm: what the final norm divides a stream by."""
    ids, read = reading_ids(lm, NEUTRAL_TEXT, "neutral", cut=True)
    x = stream_at(lm.model, torch.tensor([ids], device=lm.device), lm.config.n_layer)[0, read].float()
    if lm.model.ln_final is not None and lm.model.ln_final.kind == "layernorm":
        x = x - x.mean(-1, keepdim=True)
    return float(x.pow(2).mean(-1).sqrt().median())


def _peak_tokens(fs, f: int) -> tuple[list[int], list[int]]:
    """The token each top context peaks on, and the contexts' domain indices (-1 unknown)."""
    ids, acts = fs.data["ctx_ids"][f], fs.data["ctx_acts"][f].float()
    live = (ids >= 0).any(-1) & (acts.max(-1).values > 0)
    peaks = ids.gather(1, acts.argmax(-1, keepdim=True))[:, 0]
    dom = fs.data["ctx_domain"][f].long() if "ctx_domain" in fs.data else torch.full((ids.shape[0],), -1)
    return peaks[live].tolist(), dom[live].tolist()


def _domain(doms: list[int], names: list[str]) -> str | None:
    known = [d for d in doms if 0 <= d < len(names)]
    if not known:
        return None
    top, n = Counter(known).most_common(1)[0]
    return names[top] if n == len(known) else (f"mostly {names[top]}" if 2 * n > len(known) else "mixed")


def _where_label(tokens: list[str], counts: list[int], n: int, domain: str | None) -> str:
    where = f"on {tokens[0]}" if 2 * counts[0] >= n else "on " + " ".join(tokens[:3])
    return (where + (f" ({domain})" if domain else ""))[:MAX_LABEL]


def compute_labels(
    lm, fs, says_margin: float = SAYS_MARGIN, says_gain: float = SAYS_GAIN, domains: list[str] | None = None
) -> FeatureLabels:
    """Every feature's label (no steering check yet: `steering_check` adds it). `domains` names
    the feature data's ctx_domain indices (the card's "domains")."""
    tok, names = lm.tokenizer, list(domains or fs.card.get("domains") or [])
    top_ids, margins, lifts = read_out_scores(lm, fs.sae)
    gains = fs.data["hist_max"].float() * lifts / final_rms(lm)
    out = []
    for f in range(fs.sae.cfg.n_features):
        peaks, doms = _peak_tokens(fs, f)
        counted = Counter(peaks).most_common()
        tokens = tuple(piece(tok, t) for t, _ in counted)
        domain, margin, gain = _domain(doms, names), float(margins[f]), float(gains[f])
        says_id = int(top_ids[f]) if margin >= says_margin and gain >= says_gain else None
        says = piece(tok, says_id) if says_id is not None else None
        if says is not None:
            label = f"says {says}"[:MAX_LABEL]
        elif float(fs.data["freq"][f]) == 0 or not peaks:
            label = "dead (never fired on held-out text)"
        else:
            label = _where_label(list(tokens), [c for _, c in counted], len(peaks), domain)
        out.append(FeatureLabel(label, says, says_id, margin, gain, tokens[:8], domain, None))
    return FeatureLabels(tuple(out), float(says_margin), float(says_gain), CHECK_PROMPTS)


@torch.no_grad()
def steering_check(lm, labels: FeatureLabels, vector, rows: int = 64) -> FeatureLabels:
    """Each "says X" label checked: steering with `vector(f)` (a SteeringVector, strength 1)
    raises p(X) after the last token of every one of `labels.prompts`."""
    says = [f for f, lab in enumerate(labels.features) if lab.says_id is not None]
    passed = {f: True for f in says}
    for prompt in labels.prompts:
        ids, _ = reading_ids(lm, prompt, "check")
        start, stop, skip = steer_span(lm.tokenizer, ids)
        for a in range(0, len(says), rows):
            part = says[a : a + rows]
            batch = torch.tensor([ids] * (len(part) + 1), device=lm.device)  # row 0: not steered
            edits = [vector(f).edit(1.0, start, stop, row=r + 1, skip=skip) for r, f in enumerate(part)]
            p = lm.model.unembed(lm.model.hidden(batch, edits=edits)[:, -1]).float().softmax(-1).cpu()
            x = torch.tensor([labels.features[f].says_id for f in part])
            up = p[torch.arange(1, len(part) + 1), x] > p[0, x]
            for f, ok in zip(part, up.tolist()):
                passed[f] = passed[f] and ok
    feats = tuple(FeatureLabel(**{**lab.__dict__, "check": passed.get(f)}) for f, lab in enumerate(labels.features))
    return FeatureLabels(feats, labels.says_margin, labels.says_gain, labels.prompts)


def labels_json(labels: FeatureLabels) -> dict:
    passed, checked = labels.check_share()
    return {
        "says_margin": labels.says_margin,
        "says_gain": labels.says_gain,
        "prompts": list(labels.prompts),
        "check": {"passed": passed, "checked": checked, "share": passed / checked if checked else None},
        "features": [
            {**lab.__dict__, "margin": round(lab.margin, 3), "gain": round(lab.gain, 3), "tokens": list(lab.tokens)}
            for lab in labels.features
        ],
    }


def save_labels(labels: FeatureLabels, folder: Path | str) -> None:
    (Path(folder) / LABELS_FILE).write_text(json.dumps(labels_json(labels), ensure_ascii=False) + "\n")


def _label(d: dict, n_vocab: int) -> FeatureLabel:
    want = {"label", "says", "says_id", "margin", "gain", "tokens", "domain", "check"}
    if not isinstance(d, dict) or set(d) != want:
        raise ValueError(f"each feature's entry needs exactly the keys {sorted(want)}")
    strings = [d["label"], *d["tokens"]] if isinstance(d["tokens"], list) else None
    if strings is None or len(d["tokens"]) > 8 or any(not isinstance(s, str) or len(s) > MAX_LABEL for s in strings):
        raise ValueError(f"a label and its tokens are strings of at most {MAX_LABEL} characters (8 tokens at most)")
    for key in ("says", "domain"):
        if d[key] is not None and (not isinstance(d[key], str) or len(d[key]) > MAX_LABEL):
            raise ValueError(f"{key}: a short string or null")
    if d["says_id"] is not None:
        check_int("says_id", d["says_id"], 0, n_vocab - 1)
    if (
        (d["says"] is None) != (d["says_id"] is None)
        or not isinstance(d["check"], (bool, type(None)))
        or any(isinstance(d[k], bool) or not isinstance(d[k], (int, float)) for k in ("margin", "gain"))
    ):
        raise ValueError("says and says_id come together; check is true, false or null; margin and gain numbers")
    return FeatureLabel(
        d["label"],
        d["says"],
        d["says_id"],
        float(d["margin"]),
        float(d["gain"]),
        tuple(d["tokens"]),
        d["domain"],
        d["check"],
    )


def read_labels(folder: Path | str, n_features: int, n_vocab: int) -> FeatureLabels | None:
    """labels.json of an SAE folder (bounded, every entry checked), None when it has none."""
    path = Path(folder) / LABELS_FILE
    if not path.is_symlink() and not path.exists():
        return None
    folder_file(folder, LABELS_FILE, "the labels")  # a link out of the folder, a device: refused
    with reading(LABELS_FILE):
        return labels_from_json(read_json(path, MAX_LABELS_BYTES), n_features, n_vocab)


def labels_from_json(data, n_features: int, n_vocab: int) -> FeatureLabels:
    """`labels_json`'s object read back, every entry checked (call it inside `reading(name)`)."""
    if not isinstance(data, dict) or not isinstance(data.get("features"), list) or len(data["features"]) != n_features:
        raise ValueError(f"it must hold one entry per feature ({n_features})")
    prompts = data.get("prompts")
    if not isinstance(prompts, list) or not all(isinstance(p, str) and len(p) <= MAX_QUERY for p in prompts):
        raise ValueError("prompts: a list of short strings")
    rule = [data.get("says_margin"), data.get("says_gain")]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in rule):
        raise ValueError("says_margin and says_gain: numbers")
    return FeatureLabels(
        tuple(_label(d, n_vocab) for d in data["features"]), float(rule[0]), float(rule[1]), tuple(prompts)
    )
