"""Direct logit attribution: how much each part of the model wrote toward one logit.

The residual stream before the final norm is a sum: token embedding + positional embedding +
every head's output + every MLP's output + biases. The final norm is linear in that sum once
its scale (the std for LayerNorm, the rms for RMSNorm) is frozen at its value for the chosen
position, and LayerNorm's centring is linear too: so the logit of a token is exactly the sum
of each component's projection (with its mean removed, for LayerNorm) onto
gain * W_U[token] / scale, plus the final norm's bias term, which is counted in `bias`.
tfm has no unembedding bias. Post-norm models are refused: every block's norm rescales
the whole running sum, so the final stream is not a sum of what each part wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.model import GPT
from ..core.escape import short
from ..core.trace_read import kv_per_query_head
from ..core.validate import check_int


@dataclass(frozen=True, eq=False)
class Attribution:
    """Direct contributions to `target` (the logit of `token`, or logit(token) - logit(versus))
    at `position`. `values` (float64) follow `components` and add up to `target`."""

    components: tuple[str, ...]  # embed, pos_embed, blocks.{l}.attn.head.{h}, blocks.{l}.mlp, bias
    values: torch.Tensor  # (N,) float64
    position: int
    token: int
    versus: int | None
    target: float  # the model's own logit (difference) at `position`
    scale: float  # the final norm's std or rms at `position`, frozen
    heads: torch.Tensor  # (L, H) the head entries of `values`
    mlps: torch.Tensor  # (L,) the MLP entries of `values` (without their output bias)
    sources: torch.Tensor  # (L, H, T) each head's value split over the positions it read
    neurons: torch.Tensor  # (L, F) each MLP neuron's share: activation x output direction
    activations: torch.Tensor  # (L, F) mlp.post at `position`

    def by_source(self, layer: int, head: int) -> torch.Tensor:
        """(T,) how much of head (layer, head)'s contribution came from each source position:
        pattern x (value vector W_O projected on the direction); sums to the head's value."""
        return self.sources[layer, head]

    def value(self, name: str) -> float:
        return float(self.values[self.components.index(name)])

    def strongest_head(self) -> tuple[int, int]:
        """(layer, head) of the head with the largest contribution, either sign."""
        layer, head = divmod(int(self.heads.abs().argmax()), self.heads.shape[1])
        return int(layer), int(head)


def _model(lm) -> GPT:
    return lm.model if hasattr(lm, "model") else lm


def n_words(lm) -> int:
    """Ids that are tokens: the tokenizer's, or fewer output rows if the model has them. A padded
    vocabulary (vocab_size above the tokenizer's, as nanoGPT's 50304) has rows that are no token:
    they are never explained, compared or listed (as sampling and the lens mask them)."""
    model = _model(lm)
    tok = getattr(lm, "tokenizer", None)
    return model.config.vocab_size if tok is None else min(tok.vocab_size, model.config.vocab_size)


def _ids(model: GPT, ids) -> torch.Tensor:
    t = torch.as_tensor(ids, dtype=torch.long)
    t = t[None] if t.dim() == 1 else t
    if t.dim() != 2 or t.shape[0] != 1:
        raise ValueError(f"attribution reads one sequence: give ids of shape (T,) or (1, T), got {tuple(t.shape)}")
    return t.to(next(model.parameters()).device)


def check_position(position: int, t: int) -> int:
    if not -t <= position < t:
        raise ValueError(f"position {position} is out of range for {t} tokens (use 0..{t - 1}, or -1 for the last)")
    return position % t


def check_token(token: int, vocab: int, what: str = "token") -> int:
    return check_int(what, token, 0, vocab - 1, " (an id in the vocabulary)")


def _f64(t: torch.Tensor) -> torch.Tensor:
    """Attribution arithmetic runs in float64 on the CPU, on small slices only."""
    return t.detach().to("cpu", torch.float64)


def direction(model: GPT, trace, position: int, token: int, versus: int | None) -> tuple[torch.Tensor, float, float]:
    """The vector d with logit(token) [- logit(versus)] = resid @ d + const at `position`, for
    the final norm's scale frozen: (d (D,) float64, const, scale). LayerNorm's centring is
    folded in by removing d's mean, which equals removing each component's mean."""
    w_u = model.unembed.weight
    u = _f64(w_u[token]) - (_f64(w_u[versus]) if versus is not None else 0)  # (D,): two rows, not (V, D)
    norm = model.ln_final
    d = _f64(norm.weight) * u
    if norm.kind == "layernorm":
        d, scale = d - d.mean(), float(trace["ln_final.std"][0, position])
    else:
        scale = float(trace["ln_final.rms"][0, position])
    const = float(_f64(norm.bias) @ u) if norm.bias is not None else 0.0
    return d / scale, const, scale


@torch.no_grad()
def direct(lm, ids, position: int = -1, token: int | None = None, versus: int | None = None, trace=None) -> Attribution:
    """Direct logit attribution of every component writing to the residual stream, with the final
    norm's scale frozen at its value for `position`. `token` defaults to the model's top
    prediction there; with `versus` the target is the logit difference token - versus.
    `trace`: the trace of a forward of these ids to reuse (e.g. the app's cached one); read-only.
    The result holds (L, H, T) + 2 (L, F) float64 numbers (GPT-2 at 1024 tokens: ~1.8 MB)."""
    model, tr, p, logits, token = _prepare(lm, ids, position, token, versus, trace)
    cfg = model.config
    d, const, scale = direction(model, tr, p, token, versus)
    names, vals = ["embed"], [_f64(tr["embed"][0, p]) @ d]
    if "pos_embed" in tr:
        names.append("pos_embed")
        vals.append(_f64(tr["pos_embed"][p]) @ d)
    bias, heads, mlps, sources, neurons, acts = const, [], [], [], [], []
    for i, block in enumerate(model.blocks):
        res, source, neuron, post, bias = _block_shares(block, tr, i, p, d, cfg.n_head, bias)
        neurons.append(neuron)
        acts.append(post)
        mlps.append(neurons[-1].sum())
        heads.append(res)
        sources.append(source)
        names += [f"blocks.{i}.attn.head.{h}" for h in range(cfg.n_head)] + [f"blocks.{i}.mlp"]
        vals += list(res) + [mlps[-1]]
    names.append("bias")
    vals.append(torch.tensor(bias, dtype=torch.float64))
    target = float(logits[token] - (logits[versus] if versus is not None else 0))
    return Attribution(
        tuple(names),
        torch.stack(vals),
        p,
        token,
        versus,
        target,
        scale,
        torch.stack(heads),
        torch.stack(mlps),
        torch.stack(sources),
        torch.stack(neurons),
        torch.stack(acts),
    )


def _prepare(lm, ids, position: int, token: int | None, versus: int | None, trace):
    """`direct`'s checked inputs: (model, trace, position, float64 logits there, target token)."""
    model = _model(lm)
    cfg = model.config
    if cfg.norm_placement == "post":
        raise ValueError(
            "direct attribution needs a pre-norm model: with post-norm every block's norm "
            "rescales the running sum, so the output is not a sum of what each part wrote"
        )
    x = _ids(model, ids)
    p = check_position(position, x.shape[1])
    tr = trace if trace is not None else model(x, trace=True).trace
    if not hasattr(tr, "logits_at") or tuple(tr["embed"].shape[:2]) != tuple(x.shape):
        raise ValueError("`trace` must be the trace of a forward of the same ids (model(ids, trace=True).trace)")
    logits = _f64(tr.logits_at(p))
    words = n_words(lm)
    token = int(logits[:words].argmax()) if token is None else check_token(token, words)
    if versus is not None and check_token(versus, words, "versus token") == token:
        raise ValueError("token and versus are the same token: their logit difference is always 0")
    return model, tr, p, logits, token


def _block_shares(block, tr, i: int, p: int, d: torch.Tensor, n_head: int, bias: float):
    """Block i's direct shares along d at position p: per head (H,), per head and source
    position (H, T), per neuron (F,), the neurons' activations (F,), and `bias` plus the
    output biases' share (added in the same order as ever, so sums stay bit-identical)."""
    wod = _head_directions(block.attn, d)  # (H, hd)
    res = (_f64(tr[f"blocks.{i}.attn.z"][0, :, p]) * wod).sum(-1)  # (H,) = z_h W_O_h^T . d
    mlp_w = _f64(block.mlp.proj.weight)  # (D, F)
    post = _f64(tr[f"blocks.{i}.mlp.post"][0, p])  # (F,)
    v = _f64(kv_per_query_head(tr, "v", i, n_head))  # (H, T, hd): kv head of each
    pattern = _f64(tr[f"blocks.{i}.attn.pattern"][0, :, p])  # (H, T)
    source = pattern * torch.einsum("hsd,hd->hs", v, wod)  # (H, T): sums to res
    for b in (block.attn.proj.bias, block.mlp.proj.bias):
        bias = bias + (float(_f64(b) @ d) if b is not None else 0.0)
    return res, source, post * (d @ mlp_w), post, bias


def _head_directions(attn, d: torch.Tensor) -> torch.Tensor:
    """(H, hd): W_O_h^T d for every head, so that head h's share is z_h . row h."""
    w_o = _f64(attn.proj.weight)
    w_o = w_o.reshape(w_o.shape[0], attn.n_head, attn.d_head)  # (D, H, hd)
    return torch.einsum("ehd,e->hd", w_o, d)


@dataclass(frozen=True)
class Neuron:
    layer: int
    index: int
    activation: float  # mlp.post at the position
    value: float  # its direct contribution (activation x output direction . d)
    promotes: tuple[int, ...]  # token ids its output direction raises most (through the final gain)
    suppresses: tuple[int, ...]


@torch.no_grad()
def top_neurons(lm, attr: Attribution, k: int = 10, n_tokens: int = 8) -> list[Neuron]:
    """The k neurons with the largest |direct contribution| to `attr`'s target, each with the
    vocabulary tokens its output direction (times the final norm's gain, centred for
    LayerNorm) promotes and suppresses most."""
    model = _model(lm)
    flat, n_ff = attr.neurons.flatten(), attr.neurons.shape[1]
    norm, w_u = model.ln_final, model.unembed.weight.detach()
    out = []
    for j in flat.abs().topk(min(k, flat.numel())).indices.tolist():
        layer, n = divmod(j, n_ff)
        out_dir = model.blocks[layer].mlp.proj.weight.detach()[:, n] * norm.weight.detach()  # (D,)
        if norm.kind == "layernorm":
            out_dir = out_dir - out_dir.mean()
        scores = (w_u @ out_dir)[: n_words(lm)]  # (V,): tokens only
        kk = min(n_tokens, scores.numel())
        out.append(
            Neuron(
                layer,
                n,
                float(attr.activations[layer, n]),
                float(flat[j]),
                tuple(scores.topk(kk).indices.tolist()),
                tuple((-scores).topk(kk).indices.tolist()),
            )
        )
    return out


def token_id(tokenizer, text: str, vocab_size: int) -> int:
    """The id of `text` if it is exactly one token of the model's vocabulary (ids below
    `vocab_size`: pass `n_words(lm)`), else ValueError saying how it splits; `text` is quoted
    shortened (`tfm.core.escape.short`), as a link may carry any length."""
    ids = tokenizer.encode(text)
    if len(ids) == 1 and not 0 <= ids[0] < vocab_size:
        raise ValueError(
            f"{short(text)!r} is a token of the tokenizer but not of this model, which has "
            f"{vocab_size:,} tokens: pick another"
        )
    if len(ids) != 1:
        pieces = " | ".join(tokenizer.display_piece(i) for i in ids[:12] if 0 <= i < tokenizer.vocab_size)
        more = f" | … {len(ids) - 12:,} more" if len(ids) > 12 else ""
        raise ValueError(
            f"{short(text)!r} is not one token of the vocabulary: it splits into {len(ids):,} "
            f"({pieces or 'nothing'}{more}); pick a single token (a leading space is often part of it)"
        )
    return ids[0]


@torch.no_grad()
def flow(lm, trace, start: int, stop: int) -> torch.Tensor:
    """(L, W, W) how much the heads of each layer moved from source position s to destination t,
    for the W positions start..stop-1: sum over heads of pattern[h, t, s] * |v[h, s] W_O_h|
    (the size of what head h writes into t's stream from s). Edges of a contribution graph in
    the spirit of the LLM Transparency Tool; sources before `start` are left out."""
    model = _model(lm)
    out = []
    for i, block in enumerate(model.blocks):
        attn = block.attn
        w_o = attn.proj.weight.detach().float().cpu()
        w_o = w_o.reshape(w_o.shape[0], attn.n_head, attn.d_head)  # (D, H, hd)
        v = kv_per_query_head(trace, "v", i, attn.n_head)[:, start:stop].float()  # (H, W, hd)
        size = torch.einsum("hsd,ehd->hse", v, w_o).norm(dim=-1)  # (H, W)
        pattern = trace[f"blocks.{i}.attn.pattern"][0, :, start:stop, start:stop].float()  # (H, W, W)
        out.append((pattern * size[:, None, :]).sum(0))  # (W, W)
    return torch.stack(out)


def head_and_mlp_names(n_layer: int, n_head: int) -> list[str]:
    """Component names of every head (layer by layer) then every MLP: the order of a sweep's
    `head_effects.ravel()` followed by `mlp_effects`."""
    return [f"blocks.{i}.attn.head.{h}" for i in range(n_layer) for h in range(n_head)] + [
        f"blocks.{i}.mlp" for i in range(n_layer)
    ]


def top_token(lm, trace, pos: int) -> int:
    """The model's top prediction after position `pos` of a trace, among real tokens (`n_words`)."""
    return int(trace.logits_at(pos)[: n_words(lm)].argmax())
