"""Interventions on transcoder features in the REAL model, beside what the graph predicts.

`edited_logits` runs the model's own blocks for this call only (nothing is set on the model):
at each edited block it reads the MLP's real input (ln2's output, of this edited run), encodes it
with the block's transcoder, and adds (new value - that activation) x W_dec[feature] to the MLP's
output at the position, so later blocks see the change through real attention, norms and MLPs.

`predicted_change` is the graph's answer to the same question, in one of three modes:
"direct" reads only the edited features' edges into the target, every other MLP held as the
graph holds it; "total" also follows the feature-to-feature edges, as the frozen replacement
model would if its features stayed linear (it equals switching the feature off in the frozen
linear model: tests/test_graph.py); "first_order" uses each node's slope (`slopes`), the
real model's derivative, so it adds what flows through the norm scales and attention patterns the
edges hold frozen. On the bundled model only "first_order" ranks the real effects of the 10 most
influential features above Spearman 0.6: the real final norm's scale moves with an ablation,
rescaling the whole logit, and the edges hold it frozen (docs/benchmarks.md, bench_graph.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from ...core.functional import unembed
from ...core.trace import Recorder
from ...core.validate import check_int, check_number
from ..attribution import n_words
from .build import Graph, Target


@dataclass(frozen=True)
class FeatureEdit:
    """Set transcoder feature `feature` of block `layer` at position `pos` to `value` (0: off)."""

    layer: int
    pos: int
    feature: int
    value: float = 0.0

    def __post_init__(self) -> None:
        check_int("layer", self.layer, 0)
        check_int("pos", self.pos, 0)
        check_int("feature", self.feature, 0)
        check_number("value", self.value, -1e6, 1e6)


@dataclass(frozen=True)
class Intervention:
    """The target before and after the edits in the real model, and the graph's prediction."""

    logit_before: float
    logit_after: float
    prob_before: float  # probability of target.token
    prob_after: float
    predicted_after: float | None  # logit_before + the graph's direct prediction (None: no graph given)
    predicted_total: float | None  # logit_before + its prediction through feature-to-feature edges too
    predicted_first_order: float | None  # logit_before + the real model's first order (the nodes' slopes)


def check_once(edits: Sequence[FeatureEdit]) -> None:
    """Each feature at each position is set at most once (a set is what the graph predicts for):
    ValueError naming the first repeated one."""
    seen = set()
    for e in edits:
        if not isinstance(e, FeatureEdit):
            raise ValueError(f"{str(e)[:80]} is not a FeatureEdit(layer, pos, feature, value)")
        key = (e.layer, e.pos, e.feature)
        if key in seen:
            raise ValueError(
                f"feature {e.feature} of block {e.layer} at position {e.pos} is edited more than once: "
                "give each feature one value"
            )
        seen.add(key)


def _check(edits: Sequence[FeatureEdit], cfg, transcoders, t: int) -> dict[int, list[FeatureEdit]]:
    check_once(edits)
    by_layer: dict[int, list[FeatureEdit]] = {}
    for e in edits:
        check_int("layer", e.layer, 0, cfg.n_layer - 1)
        check_int("pos", e.pos, 0, t - 1, " (a position of the prompt)")
        check_int("feature", e.feature, 0, transcoders.cfg.n_features - 1)
        by_layer.setdefault(e.layer, []).append(e)
    return by_layer


@torch.no_grad()
def edited_logits(lm, ids, transcoders, edits: Sequence[FeatureEdit]) -> torch.Tensor:
    """The real model's last-position logits (V,) with `edits` applied, for this call only."""
    model = lm.model if hasattr(lm, "model") else lm
    x_ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(next(model.parameters()).device)
    by_layer = _check(edits, model.config, transcoders, x_ids.shape[1])
    if not by_layer:
        return model(x_ids, last_only=True).logits[0, -1]
    x, angles = model.embed(x_ids, 0, None)
    for i, block in enumerate(model.blocks):
        if i not in by_layer:
            x = block(x, None, angles, None, i)
            continue
        rec = Recorder(keep=lambda name: name.endswith("ln2.output"), listed=False)
        x = block(x, rec.scoped(f"blocks.{i}"), angles, None, i)
        m_in = rec.finish()[f"blocks.{i}.ln2.output"][0]  # (T, D) this run's MLP input
        x = x + _delta(transcoders.layers[i], m_in, by_layer[i]).to(x.dtype)[None]
    x = model.ln_final(x) if model.ln_final is not None else x
    return unembed(x[:, -1:], model.unembed.weight)[0, -1]


def _delta(tc, m_in: torch.Tensor, edits: list[FeatureEdit]) -> torch.Tensor:
    """(T, D): what the edits change in block's MLP output: (new - actual) x W_dec[feature]."""
    acts = tc.encode(m_in)  # (T, F)
    out = torch.zeros(m_in.shape[0], tc.W_dec.shape[1], device=m_in.device)
    for e in edits:
        out[e.pos] += (e.value - acts[e.pos, e.feature]) * tc.W_dec[e.feature].to(m_in.device)
    return out


def target_value(logits: torch.Tensor, target: Target, vocab: int) -> tuple[float, float]:
    """(the target's logit or logit difference, the probability of target.token) from logits (V,)."""
    logits = logits.double().cpu()
    value = logits[target.token] - (logits[target.versus] if target.kind == "difference" else 0)
    return float(value), float(logits[:vocab].softmax(-1)[target.token])


Prediction = Literal["direct", "total", "first_order"]


def predicted_change(graph: Graph, edits: Sequence[FeatureEdit], mode: Prediction = "direct") -> float:
    """The target's change the graph predicts for `edits` (each must be a feature node of it):
    "direct" through the edges into the target only, "total" through every feature edge as well,
    "first_order" through the real model's slopes."""
    if mode not in get_args(Prediction):
        raise ValueError(f"prediction mode {str(mode)[:20]!r}: choose 'direct', 'total' or 'first_order'")
    check_once(edits)
    index = {tuple(f): i for i, f in enumerate(graph.features.tolist())}
    n = graph.n_features
    delta0 = torch.zeros(n, dtype=torch.float64)
    for e in edits:
        i = index.get((e.layer, e.pos, e.feature))
        if i is None:
            raise ValueError(
                f"feature {e.feature} of block {e.layer} at position {e.pos} is not a node of this graph: "
                "the graph predicts only for its own features"
            )
        delta0[i] = e.value - float(graph.activations[i])
    if mode == "first_order":
        return float(graph.slopes @ delta0)
    per_unit = 1 / graph.activations.double().clamp(min=1e-12)  # an edge is its source's activation x a weight
    free = delta0 == 0
    delta = delta0.clone()
    for _ in range(graph.n_layer if mode == "total" else 0):  # layer by layer down the DAG
        delta = delta0 + free * _rows_times(graph.edges[:n, :n], delta * per_unit)
    return float(graph.edges[n, :n].double() @ (delta * per_unit))


def _rows_times(m: torch.Tensor, v: torch.Tensor, block: int = 2**21) -> torch.Tensor:
    """m (R, C) @ v (C,) in float64, a block of rows at a time (never a float64 copy of all of m:
    a 64-token graph's feature block is ~0.5 GB in float64)."""
    step = max(1, block // max(m.shape[1], 1))
    return torch.cat([m[s : s + step].double() @ v for s in range(0, m.shape[0], step)])


def intervene(
    lm, ids, transcoders, target: Target, edits: Sequence[FeatureEdit], graph: Graph | None = None
) -> Intervention:
    """The target before and after `edits` in the real model (and the graph's prediction, given
    the graph of these ids and this target)."""
    vocab = n_words(lm)
    target = target.resolve(edited_logits(lm, ids, transcoders, []), vocab) if target.token is None else target
    before = target_value(edited_logits(lm, ids, transcoders, []), target, vocab)
    after = target_value(edited_logits(lm, ids, transcoders, edits), target, vocab)
    predicted = (None,) * len(get_args(Prediction))
    if graph is not None:
        if tuple(graph.ids) != tuple(int(i) for i in ids) or graph.target != target:
            raise ValueError("the graph belongs to another prompt or target: build it for these ids and this target")
        predicted = tuple(before[0] + predicted_change(graph, edits, m) for m in get_args(Prediction))
    return Intervention(before[0], after[0], before[1], after[1], *predicted)


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two 1-D series (ranks by sorting; ties get distinct ranks)."""
    ra = torch.argsort(torch.argsort(a.double())).double()
    rb = torch.argsort(torch.argsort(b.double())).double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else 0.0


@dataclass(frozen=True, eq=False)
class Faithfulness:
    """Switching off each of the graph's `n` most influential features, one at a time."""

    features: torch.Tensor  # (n, 3) layer, pos, feature
    predicted: torch.Tensor  # (n,) the graph's predicted change of the target
    measured: torch.Tensor  # (n,) the real model's change
    spearman: float


def faithfulness(
    lm, ids, transcoders, graph: Graph, scores: torch.Tensor, n: int = 10, mode: Prediction = "direct"
) -> Faithfulness:
    """Predicted (`mode`, as `predicted_change`) vs measured effects of ablating the `n` features
    of highest `scores` (one per node, e.g. their influence, `prune.node_influence`, or
    |edge into the target|), and their Spearman rank correlation."""
    check_int("n", n, 2, 1000)
    top = scores[: graph.n_features].topk(min(n, graph.n_features)).indices
    vocab = n_words(lm)
    base = target_value(edited_logits(lm, ids, transcoders, []), graph.target, vocab)[0]
    pred, meas = [], []
    for i in top.tolist():
        edit = [FeatureEdit(*graph.features[i].tolist(), value=0.0)]
        pred.append(predicted_change(graph, edit, mode))
        meas.append(target_value(edited_logits(lm, ids, transcoders, edit), graph.target, vocab)[0] - base)
    p, m = torch.tensor(pred, dtype=torch.float64), torch.tensor(meas, dtype=torch.float64)
    return Faithfulness(graph.features[top], p, m, spearman(p, m))
