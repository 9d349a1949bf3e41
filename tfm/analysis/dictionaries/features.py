"""SAE features of a prompt: which fire on each token, one feature's shipped examples, and
their direct contributions to a logit (the "Why this token?" page's features tab).

    fs = load_features(folder, lm)                 # SAE + card + shipped contexts/histograms
    tf = token_features(fs.sae, trace, n=5)        # (T, n) top features per token
    opening_feature(fs, trace)                     # the strongest not-dense feature on the last token
    fa = feature_attribution(lm, fs.sae, trace, position=-1)
    fa.values.sum() == fa.target                   # features + SAE bias + error + later layers + norm bias
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...core.files import reading
from ...core.validate import check_int, check_number
from ...loaders.loading import ASSETS
from ..attribution import _f64, _prepare, direction
from .labels import FeatureLabels, read_labels
from .sae import FEATURES_FILE, SAE, load_feature_data, load_sae
from ..steering.vectors import SteeringVector, feature_vector

SAE_ROOT = ASSETS / "sae"
BUNDLED = ("default", "smollm2")  # model specs that ship an SAE under assets/sae/<spec>


def bundled_folder(spec: str) -> Path | None:
    """assets/sae/<spec> when this model spec ships an SAE, else None."""
    folder = SAE_ROOT / spec
    return folder if spec in BUNDLED and (folder / "card.json").is_file() else None


@dataclass(frozen=True, eq=False)
class FeatureSet:
    """An SAE with its card and its shipped per-feature data (tfm.analysis.dictionaries.sae)."""

    sae: SAE
    card: dict
    data: dict[str, torch.Tensor]
    labels: FeatureLabels | None = None  # labels.json (tfm.analysis.dictionaries.labels), when it ships

    def label(self, feature: int) -> str:
        """The feature's short label, "" when this SAE ships none."""
        return self.labels.label(self.check_feature(feature)) if self.labels is not None else ""

    def named(self, feature: int) -> str:
        """ "feature 12: says ' Paris'" (just "feature 12" without labels): wherever an id is shown."""
        label = self.label(feature)
        return f"feature {feature}: {label}" if label else f"feature {feature}"

    @property
    def layer(self) -> int:
        return self.sae.cfg.layer

    @property
    def skip(self) -> int:
        """Leading positions the SAE was not trained on (a real model's attention sink)."""
        return int(self.card.get("skipped_first_positions", 0))

    def check_feature(self, feature: int) -> int:
        return check_int("feature", feature, 0, self.sae.cfg.n_features - 1, " (this SAE's features)")

    def contexts(self, feature: int) -> list[tuple[list[int], list[float]]]:
        """Its top-activating held-out contexts: (token ids, the feature's activation on each)."""
        f = self.check_feature(feature)
        out = []
        for ids, acts in zip(self.data["ctx_ids"][f].tolist(), self.data["ctx_acts"][f].float().tolist()):
            keep = [i for i, t in enumerate(ids) if t >= 0]
            if keep:
                out.append(([ids[i] for i in keep], [acts[i] for i in keep]))
        return out

    def histogram(self, feature: int) -> tuple[list[float], list[int]]:
        """(bin centres, counts) of its non-zero held-out activations."""
        f = self.check_feature(feature)
        counts, top = self.data["hist"][f].tolist(), float(self.data["hist_max"][f])
        width = top / len(counts)
        return [width * (i + 0.5) for i in range(len(counts))], counts


METRICS = ("l0", "dead_share", "fvu", "ce_recovered", "ce_clean", "ce_recon", "ce_zero")  # what a page shows


def _numbers(what: str, data, keys) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be an object of numbers")
    for k in keys:
        check_number(f"{what} {k}", data.get(k))


def check_card(card: dict) -> dict:
    """The fields of an SAE card a page reads, checked after decoding: "metrics" (each of METRICS a
    number), "eval_file" (text), "domain_metrics" (optional: name -> an object of l0, fvu,
    ce_recovered), "skipped_first_positions" (optional: a count)."""
    with reading("card.json"):
        _numbers("metrics", card.get("metrics"), METRICS)
        if not isinstance(card.get("eval_file"), str) or len(card["eval_file"]) > 500:
            raise ValueError("eval_file must be the held-out text file's name")
        domains = card.get("domain_metrics", {})
        if not isinstance(domains, dict) or len(domains) > 64:
            raise ValueError("domain_metrics must be an object: one entry per held-out domain")
        for name, m in domains.items():
            _numbers(f"domain_metrics[{name[:20]!r}]", m, ("l0", "fvu", "ce_recovered"))
        check_int("skipped_first_positions", card.get("skipped_first_positions", 0), 0, 4096)
    return card


def check_data(data: dict[str, torch.Tensor], n_features: int, n_vocab: int) -> dict[str, torch.Tensor]:
    """features.safetensors checked after decoding: shapes, token ids (integers, -1 or in the
    vocabulary), activations, histogram counts and tops finite and not negative, rates in [0, 1]."""
    with reading(FEATURES_FILE):
        shapes = {"ctx_ids": 3, "ctx_acts": 3, "hist": 2, "hist_max": 1, "freq": 1}
        extra = set(data) - set(shapes) - {"ctx_domain"}  # (F, n) each context's domain, with --mix
        if (
            extra
            or not set(shapes) <= set(data)
            or any(data[k].dim() != n or data[k].shape[0] != n_features for k, n in shapes.items())
            or data["ctx_acts"].shape != data["ctx_ids"].shape
        ):
            raise ValueError(f"{FEATURES_FILE} does not match the SAE's {n_features} features")
        dom = data.get("ctx_domain")
        if dom is not None and (
            dom.shape != data["ctx_ids"].shape[:2] or dom.is_floating_point() or bool((dom < -1).any())
        ):
            raise ValueError("ctx_domain must hold one domain index (or -1) per context")
        ids = data["ctx_ids"]
        if ids.is_floating_point() or ids.dtype == torch.bool or bool(((ids < -1) | (ids >= n_vocab)).any()):
            raise ValueError(f"ctx_ids must be integer token ids of the model (or -1 for none), below {n_vocab}")
        if data["hist"].shape[1] < 1:
            raise ValueError("hist must have at least one bin per feature")
        for k in ("ctx_acts", "hist", "hist_max", "freq"):
            if not bool((data[k].double() >= 0).all()) or not bool(torch.isfinite(data[k].double()).all()):
                raise ValueError(f"{k} must hold finite numbers, none negative")
        if bool((data["freq"].double() > 1).any()):
            raise ValueError("freq must be firing rates, between 0 and 1")
    return data


def load_features(folder: Path | str, lm) -> FeatureSet:
    sae, card = load_sae(folder, lm)
    f, vocab = sae.cfg.n_features, min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    data = check_data(load_feature_data(folder), f, vocab)
    labels = read_labels(folder, f, vocab)
    return FeatureSet(sae, check_card(card), data, labels)


def _stream(trace, layer: int) -> torch.Tensor:
    """(T, D) float32: the stream entering block `layer` (what the SAE reads)."""
    return trace[f"blocks.{layer}.resid_pre"][0].float()


@dataclass(frozen=True)
class TokenFeatures:
    """The top `n` features on each token: ids and activations, (T, n) each (0 = not firing)."""

    features: torch.Tensor
    acts: torch.Tensor


@torch.no_grad()
def token_features(sae: SAE, trace, n: int = 5, skip: int = 0) -> TokenFeatures:
    """The first `skip` positions (outside what the SAE was trained on) show no features."""
    n = check_int("features per token", n, 1, sae.cfg.k)
    vals, idx = sae.topk(_stream(trace, sae.cfg.layer))  # (T, k), sorted descending
    vals[:skip] = 0
    return TokenFeatures(idx[:, :n].clone(), vals[:, :n].clone())


# A feature that fires on more held-out tokens than this says little about any one of them
# (Neuronpedia and SAELens flag such dense features); the Features page opens on a sparser one.
DENSE_SHARE = 0.1


@torch.no_grad()
def opening_feature(fs: FeatureSet, trace, position: int = -1, max_share: float = DENSE_SHARE) -> int:
    """The feature a page opens on: the strongest at `position` among those firing on at most
    `max_share` of held-out tokens; the strongest of all when none of them fires there."""
    acts = fs.sae.encode(_stream(trace, fs.layer)[position][None])[0]  # (F,)
    sparse = acts.masked_fill(fs.data["freq"].float() > max_share, 0.0)
    return int((sparse if bool((sparse > 0).any()) else acts).argmax())


@dataclass(frozen=True, eq=False)
class FeatureAttribution:
    """Direct contributions to `target` through the SAE's layer: each active feature
    (activation x decoder row, read through the frozen final norm), the SAE's bias and error
    terms, everything the later blocks wrote, and the final norm's bias. They add up to target."""

    features: torch.Tensor  # (k,) feature ids active at the position (activation > 0)
    acts: torch.Tensor  # (k,) their activations
    values: torch.Tensor  # (k,) float64 their contributions
    b_dec: float
    error: float
    later: float  # blocks layer.. (heads, MLPs, their biases)
    norm_bias: float
    target: float
    layer: int

    def parts(self) -> tuple[list[str], torch.Tensor]:
        """Names and values of every part, features first: the bars, summing to target."""
        names = [f"feature {int(f)}" for f in self.features]
        names += ["SAE bias", "SAE error", f"blocks {self.layer}+ (later)", "final norm bias"]
        rest = torch.tensor([self.b_dec, self.error, self.later, self.norm_bias], dtype=torch.float64)
        return names, torch.cat([self.values, rest])


def top_parts(names: list[str], values: torch.Tensor, n: int) -> list[int]:
    """Indices of the n features with the largest |value|, then the 4 terms that are not
    features (SAE bias, SAE error, later blocks, final norm bias): what a chart always shows."""
    k = len(names) - 4
    return values[:k].abs().topk(min(n, k)).indices.tolist() + list(range(k, len(names)))


@torch.no_grad()
def feature_attribution(
    lm, sae: SAE, trace, ids, position: int = -1, token: int | None = None, versus: int | None = None
) -> FeatureAttribution:
    model, tr, p, logits, token = _prepare(lm, ids, position, token, versus, trace)
    d, const, _ = direction(model, tr, p, token, versus)  # (D,) float64
    x = _f64(_stream(tr, sae.cfg.layer)[p])
    vals, idx = sae.topk(x.float()[None])
    live = vals[0] > 0
    vals, idx = vals[0][live], idx[0][live]
    rows = _f64(sae.W_dec[idx])  # (k, D)
    x_hat = (_f64(vals)[:, None] * rows).sum(0) + _f64(sae.b_dec)
    final = _f64(tr.residual_streams()[-1][1][p])  # leaving the last block
    target = float(logits[token] - (logits[versus] if versus is not None else 0))
    return FeatureAttribution(
        idx,
        vals,
        _f64(vals) * (rows @ d),
        float(_f64(sae.b_dec) @ d),
        float((x - x_hat) @ d),
        float((final - x) @ d),
        const,
        target,
        sae.cfg.layer,
    )


def bundled(lm, spec: str) -> FeatureSet:
    """The SAE shipped for model `spec`, checked against `lm`; ValueError naming the models
    that have one otherwise."""
    folder = bundled_folder(spec)
    if folder is None:
        have = [s for s in BUNDLED if bundled_folder(s) is not None]
        raise ValueError(
            f"no sparse autoencoder ships for this model; pick one that has one ({', '.join(have) or 'none'}) "
            "or train one with python -m tfm.train.sae train"
        )
    return load_features(folder, lm)


def steering_vector(fs: FeatureSet, feature: int) -> SteeringVector:
    """Feature `feature`'s decoder row times its largest held-out activation, so that strength 1
    writes it as strongly as it ever fired there (times 1 for a feature that never fired)."""
    top = float(fs.data["hist_max"][fs.check_feature(feature)])
    return feature_vector(fs.sae, feature, top if top > 0 else 1.0)
