"""A guided tour of one forward pass: the real numbers of the running model, step by step.

`tour(lm, trace, ids, pos)` follows the token at position `pos` from text to the next token
through the model's own computation, reading every number from the trace (or the weights)
of that forward. The steps follow the architecture: RoPE rotates q and k instead of adding
positions, RMSNorm has no mean or bias, SwiGLU gates, post-norm normalises after each
residual sum. Each step carries a few small tensors (the first `SHOW` entries of long
vectors, with the full shape), a formula, a sentence or two, the page that goes deeper,
and at some steps a question whose answer is computed from the same numbers (`tfm.teach.checks`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .checks import Check, attend_check, next_token_check, params_check
from ..generation.sampling import SamplingSettings, breakdown, sample
from ..core.trace import Trace
from ..core.trace_read import head_qkv
from ..core.window import layer_window

SHOW = 8  # entries of a long vector a slide can hold


@dataclass(frozen=True, eq=False)
class Shown:
    """A small slice of a real tensor, as printed: values (n,) or (r, n), with the full shape."""

    values: torch.Tensor
    shape: tuple[int, ...]
    cols: tuple[str, ...]
    rows: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.values.dim() not in (1, 2) or self.values.shape[-1] != len(self.cols):
            raise ValueError(f"shown values {tuple(self.values.shape)} need one label per column, got {len(self.cols)}")
        if self.values.dim() == 2 and self.values.shape[0] != len(self.rows):
            raise ValueError(f"shown values {tuple(self.values.shape)} need one label per row, got {len(self.rows)}")


@dataclass(frozen=True, eq=False)
class TourStep:
    key: str
    title: str
    formula_latex: str
    text: str
    tensors: dict[str, Shown]
    deeper_page: str          # pages/<file>.py that shows this in full
    check: Check | None = None
    chart: Shown | None = None  # a longer vector worth a bar chart (a whole attention row, ...)


@dataclass(frozen=True)
class Focus:
    """What the tour follows: one position, one block and one head of it."""

    pos: int
    layer: int = 0
    head: int = 0


def vec(x: torch.Tensor, cols: list[str] | None = None) -> Shown:
    """The first SHOW entries of a 1-D tensor, labelled by index (or by `cols`)."""
    n = x.shape[0]
    labels = cols[:SHOW] if cols is not None else [str(i) for i in range(min(n, SHOW))]
    return Shown(x[:SHOW].float().clone(), (n,), tuple(labels), note=f"first {SHOW} of {n}" if n > SHOW else "")


def key_window(pos: int) -> slice:
    """The keys a slide shows for a query at `pos`: the last SHOW it may attend to."""
    return slice(max(0, pos + 1 - SHOW), pos + 1)


def _row(x: torch.Tensor, pos: int, labels: list[str], note_all: str) -> Shown:
    w = key_window(pos)
    note = f"keys {w.start}..{pos} of {note_all}" if w.start > 0 else ""
    return Shown(x[w].float().clone(), (x.shape[0],), tuple(labels[w]), note=note)


def _embed_steps(lm, tr: Trace, ids, labels, f: Focus) -> list[TourStep]:
    cfg, p, tok = lm.config, f.pos, int(ids[f.pos])
    first = key_window(p)
    steps = [
        TourStep("tokens", "Text becomes token ids",
                 r"\text{text} \;\to\; (t_0, t_1, \dots, t_{T-1}),\quad t_i \in \{0,\dots,V-1\}",
                 f"The tokenizer cuts the prompt into {len(ids)} pieces from a vocabulary of V = {cfg.vocab_size:,}. "
                 f"The tour follows position {p}, {labels[p]!r} (id {tok}).",
                 {"token ids": Shown(torch.tensor([float(i) for i in ids[first]]), (len(ids),),
                                     tuple(labels[first]), note=f"positions {first.start}..{p} of {len(ids)}")},
                 "pages/tokens.py"),
        TourStep("embed", "Token embedding: one row of W_E",
                 r"e = W_E[t_i], \quad W_E \in \mathbb{R}^{V \times d_{model}}",
                 f"The id picks row {tok} of the embedding matrix: a vector of d_model = {cfg.d_model} learned numbers.",
                 {f"e = W_E[{tok}]": vec(tr["embed"][0, p])}, "pages/shapes.py"),
    ]
    return steps + [_position_step(cfg, tr, p)]


def _position_step(cfg, tr: Trace, p: int) -> TourStep:
    """The positions step, one variant per kind of positional encoding (same key for all)."""
    x0 = tr["blocks.0.resid_pre"][0, p]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        kind = "a learned row of W_pos" if cfg.pos_encoding == "learned" else "sines and cosines of the position"
        return TourStep("positions", "Position: added to the embedding",
                        r"x_0 = e + p_i" + (r",\quad p_{i,2k} = \sin\!\big(i/10000^{2k/d}\big)"
                                            if cfg.pos_encoding == "sinusoidal" else r",\quad p_i = W_{pos}[i]"),
                        f"Position {p} adds {kind}, so the same word at another place looks different. "
                        "The sum is the residual stream entering block 0.",
                        {f"p_{p}": vec(tr["pos_embed"][p]), "x_0 = e + p": vec(x0)}, "pages/positions.py")
    if cfg.pos_encoding == "rope":
        return TourStep("positions", "Position: RoPE rotates queries and keys",
                        r"\begin{pmatrix}q'_k\\q'_{k+d/2}\end{pmatrix} = \begin{pmatrix}\cos i\theta_k & -\sin i\theta_k"
                        r"\\ \sin i\theta_k & \cos i\theta_k\end{pmatrix}\begin{pmatrix}q_k\\q_{k+d/2}\end{pmatrix},"
                        r"\quad \theta_k = b^{-2k/d_{head}}",
                        f"Nothing is added here: x_0 = e. Inside every attention layer, each pair of q and k "
                        f"dimensions is rotated by position × θ_k, so q·k depends on the distance between tokens. "
                        f"These are position {p}'s angles in radians.",
                        {f"angles at position {p}": vec(tr["rope.angles"][p]), "x_0 = e": vec(x0)},
                        "pages/positions.py")
    return TourStep("positions", "Position: none is added",
                    r"x_0 = e",
                    "This model has no positional encoding: only the causal mask tells it what came before. "
                    "The residual stream entering block 0 is the embedding itself.",
                    {"x_0 = e": vec(x0)}, "pages/positions.py")


def _heads_sentence(cfg, h: int) -> str:
    """How many heads the layer has and, with grouped-query attention, whose k and v head h reads."""
    if cfg.group_size == 1:
        return f", {cfg.n_head} heads of d_head = {cfg.d_head} each."
    kind = "multi-query" if cfg.n_kv_head == 1 else "grouped-query"
    return (f". The layer's {cfg.n_head} query heads (d_head = {cfg.d_head}) share {cfg.n_kv_head} key/value "
            f"head{'s' if cfg.n_kv_head > 1 else ''} ({kind} attention): query head {h} reads the k and v "
            f"of {cfg.kv_sharing(h)}.")


def _qkv_formula(cfg, h: int, x: str) -> str:
    """q, k, v of query head h; with shared key/value heads, k and v carry their own index g."""
    if cfg.group_size == 1:
        return rf"q = {x}\,W_Q,\quad k = {x}\,W_K,\quad v = {x}\,W_V"
    g = cfg.kv_head(h)
    return (rf"q^{{({h})}} = {x}\,W_Q^{{({h})}},\quad k^{{(g)}} = {x}\,W_K^{{(g)}},\quad "
            rf"v^{{(g)}} = {x}\,W_V^{{(g)}},\quad g = \lfloor {h} / {cfg.group_size} \rfloor = {g}")


def _kv_vec(cfg, x: torch.Tensor, h: int) -> Shown:
    """A key or value row; with shared key/value heads its note says whose it is."""
    shown = vec(x)
    if cfg.group_size == 1:
        return shown
    return Shown(shown.values, shown.shape, shown.cols, note="; ".join(filter(None, (shown.note, cfg.kv_sharing(h)))))


def _attention_steps(lm, tr: Trace, labels, f: Focus) -> list[TourStep]:
    cfg, p, b, h = lm.config, f.pos, f"blocks.{f.layer}", f.head
    hd, pre = cfg.d_head, cfg.norm_placement == "pre"
    q, k, v = head_qkv(tr, cfg, f.layer, h)                               # (T, hd) each: k, v of h's kv head
    x_in = tr[f"{b}.ln1.output" if pre else f"{b}.resid_pre"][0, p]
    where = f"block {f.layer}, head {h}"
    rope = cfg.pos_encoding == "rope"
    dots = k[: p + 1] @ q[p]                                               # (p+1,)
    all_scores = tr[f"{b}.attn.scores"][0, h]                              # (T, T)
    scores, pattern = all_scores[p], tr[f"{b}.attn.pattern"][0, h, p]
    in_name = "LN1(x)" if pre else "x"
    shared = f" (those of {cfg.kv_sharing(h)})" if cfg.group_size > 1 else ""
    return [
        TourStep("qkv", f"Query, key and value ({where})",
                 _qkv_formula(cfg, h, in_name),  # the RoPE note is text: a projector cuts a long formula
                 f"Three matrices turn the {'normalised ' if pre else ''}residual vector into a query (what this token "
                 f"looks for), a key (what it offers) and a value (what it passes on)" + _heads_sentence(cfg, h)
                 + (" Then RoPE rotates q and k by this position's angles." if rope else ""),
                 {in_name: vec(x_in), "q": vec(q[p]), "k": _kv_vec(cfg, k[p], h), "v": _kv_vec(cfg, v[p], h)},
                 "pages/attention.py", params_check(lm.model, f.layer)),
        TourStep("scores", "Scores: query · key, divided by √d_k",
                 rf"s_j = \frac{{q_{{{p}}} \cdot k_j}}{{\sqrt{{d_k}}}},\quad \sqrt{{d_k}} = \sqrt{{{hd}}} = {math.sqrt(hd):.3f}",
                 f"Each earlier key{shared} is compared with this query by a dot product. Dividing by √d_k keeps the "
                 "scores from growing with the head size, so the softmax does not saturate.",
                 {"q · k_j": _row(dots, p, labels, f"{p + 1}"), "s_j": _row(scores, p, labels, f"{p + 1}")},
                 "pages/attention.py"),
        _mask_step(cfg, f.layer, _mask_matrix(all_scores, p, labels)),
    ] + _mixing_steps(lm, tr, labels, f, pattern)


def _mask_step(cfg, layer: int, shown: Shown) -> TourStep:
    """The causal mask; on a local layer also the sliding window (why a key that came before is masked); an
    encoder has none (the step keeps its key: every model's tour has the same steps)."""
    if not cfg.causal:
        return TourStep("mask", "No mask: every token sees every token", r"s_j \text{ kept for every } j",
                        "An encoder reads the whole text at once: nothing is set to −∞, so each token attends to the "
                        "tokens after it as well as before (only padding would be masked). BERT is trained to fill in "
                        "hidden words, which needs both sides.", {"scores, rows = queries": shown}, "pages/attention.py")
    text = ("Keys after each query (above the diagonal) are set to −∞, so they get zero weight: a token only sees the "
            "past. That is what lets the model be trained on every position of a text at once.")
    w, n_local = layer_window(cfg, layer), len(cfg.local_layers)
    glob = ", ".join(str(i) for i in range(cfg.n_layer) if i not in cfg.local_layers) or "none"
    if w is None:
        return TourStep("mask", "Causal mask: no looking ahead", r"s_j = -\infty \quad\text{for } j > i",
                        text + (f" Block {layer} is a global layer: it reads every earlier key. The other {n_local} "
                                f"layers are local, each reading only the last {cfg.sliding_window} keys."
                                if n_local else ""), {"scores, rows = queries": shown}, "pages/attention.py")
    return TourStep("mask", "Causal and sliding-window mask (a local layer)",
                    rf"s_j = -\infty \quad\text{{for }} j > i \text{{ or }} j \le i - {w}",
                    text + f" Block {layer} is a local layer: a key more than {w - 1} positions back is masked too, "
                    f"however relevant, because the layer reads only a window of the last {w} keys (cheaper, and "
                    f"its KV cache keeps only the window). {n_local} of the {cfg.n_layer} layers are local; the "
                    f"global ones ({glob}) read every earlier key.", {"scores, rows = queries": shown},
                    "pages/attention.py")


def _mixing_steps(lm, tr: Trace, labels, f: Focus, pattern: torch.Tensor) -> list[TourStep]:
    """softmax weights, their sum of values, and the heads merged through W_O."""
    cfg, p, b, h, hd = lm.config, f.pos, f"blocks.{f.layer}", f.head, lm.config.d_head
    where = f"block {f.layer}, head {h}"
    z = tr[f"{b}.attn.z"][0, :, p]                                         # (H, hd): one row per query head
    values = "" if cfg.group_size == 1 else (f" The values are those of {cfg.kv_sharing(h)}: the heads of a group "
                                             "mix the same values, each with its own weights.")
    own = ("" if cfg.group_size == 1 else
           " Query heads that share a key/value head still have their own queries, so their weights and outputs differ.")
    return [
        TourStep("softmax", "Softmax: scores become weights that sum to 1",
                 r"a_j = \frac{e^{s_j}}{\sum_{m \le i} e^{s_m}}",
                 f"The weights of {where} for {labels[p]!r}. The chart shows every key; the table the last few.",
                 {"a_j": _row(pattern, p, labels, f"{p + 1}")}, "pages/attention.py",
                 attend_check(pattern[: p + 1], labels, p, where),
                 Shown(pattern[: p + 1].float().clone(), (p + 1,), tuple(labels[: p + 1]))),
        TourStep("weighted", "Weighted sum of the values",
                 r"z = \sum_{j \le i} a_j\, v_j",
                 f"The head's output is the values mixed by those weights: a vector of d_head = {hd}." + values,
                 {"z": vec(z[h])}, "pages/attention.py"),
        TourStep("heads", "All heads concatenated, then W_O",
                 r"\mathrm{attn}(x) = \big[z^{(1)}; \dots; z^{(H)}\big]\, W_O"
                 + (r" + b_O" if cfg.bias else ""),
                 f"The {cfg.n_head} heads' outputs are placed side by side ({cfg.n_head} × {hd} = {cfg.d_model}) "
                 "and one matrix mixes them back into the residual stream's size." + own,
                 {"z per head": Shown(z[:, :SHOW].float().clone(), tuple(z.shape),
                                      tuple(str(i) for i in range(min(hd, SHOW))),
                                      rows=tuple(f"head {i}" for i in range(z.shape[0])),
                                      note=f"first {SHOW} of {hd} per head" if hd > SHOW else ""),
                  "attn_out": vec(tr[f"{b}.attn_out"][0, p])}, "pages/shapes.py"),
    ]


def mask_window(pos: int, t: int, size: int = 6) -> slice:
    """Positions a slide shows of the score matrix: up to `size` around the query, future included."""
    lo = max(0, min(pos - size + 1, t - size))
    return slice(lo, min(t, lo + size))


def _mask_matrix(scores: torch.Tensor, pos: int, labels: list[str]) -> Shown:
    """Scores (queries × keys) around the query: the future keys above the diagonal are −∞."""
    t = scores.shape[-1]
    w = mask_window(pos, t)
    return Shown(scores[w, w].float().clone(), (t, t), tuple(labels[w]), rows=tuple(labels[w]),
                 note=f"queries and keys {w.start}..{w.stop - 1} of {t}")


def _norm_step(lm, tr: Trace, f: Focus, name: str, title: str, where: str) -> TourStep:
    """The norm `blocks.{layer}.{name}` at the focus position: statistics, gain, bias, output."""
    cfg, p = lm.config, f.pos
    b, module = f"blocks.{f.layer}.{name}", getattr(lm.model.blocks[f.layer], name)
    x = tr[f"{b}.input"][0, p]
    shown = {"input x": vec(x)}
    if cfg.norm == "layernorm":
        mean, std = tr[f"{b}.mean"][0, p], tr[f"{b}.std"][0, p]
        var = std.pow(2) - cfg.norm_eps
        shown["mean μ, variance σ²"] = Shown(torch.stack([mean, var]).float(), (2,), ("μ", "σ²"))
        formula = r"y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}" + (r" + \beta" if module.bias is not None else "")
        text = (f"LayerNorm {where}: subtract the mean of the {cfg.d_model} numbers, divide by their standard "
                "deviation, then scale by a learned gain γ" + (" and shift by a learned bias β." if module.bias is not None else "."))
    else:
        shown["rms"] = Shown(tr[f"{b}.rms"][0, p].reshape(1).float(), (1,), ("rms",))
        formula = r"y = \gamma \odot \frac{x}{\sqrt{\tfrac{1}{d}\sum_k x_k^2 + \epsilon}}"
        text = (f"RMSNorm {where}: divide by the root mean square of the {cfg.d_model} numbers (no mean is "
                "subtracted and there is no bias), then scale by a learned gain γ.")
    shown["normalised"] = vec(tr[f"{b}.normalized"][0, p])
    shown["gain γ"] = vec(module.weight.detach().cpu())
    if module.bias is not None:
        shown["bias β"] = vec(module.bias.detach().cpu())
    shown["output y"] = vec(tr[f"{b}.output"][0, p])
    return TourStep("norm", title, formula, text, shown, "pages/norms.py")


def _block_steps(lm, tr: Trace, f: Focus) -> list[TourStep]:
    cfg, p, b = lm.config, f.pos, f"blocks.{f.layer}"
    pre = cfg.norm_placement == "pre"
    resid = {"x (resid_pre)": vec(tr[f"{b}.resid_pre"][0, p]), "attn_out": vec(tr[f"{b}.attn_out"][0, p])}
    if pre:
        resid["x + attn_out (resid_mid)"] = vec(tr[f"{b}.resid_mid"][0, p])
        add = TourStep("residual", "Residual add", r"x \leftarrow x + \mathrm{attn}(\mathrm{LN_1}(x))",
                       "The attention output is added to the stream, not written over it: every layer only nudges "
                       "the vector, and the original information keeps flowing.", resid, "pages/norms.py")
        norm = _norm_step(lm, tr, f, "ln2", "LayerNorm before the MLP" if cfg.norm == "layernorm" else "RMSNorm before the MLP",
                          "before the MLP (pre-norm)")
    else:
        resid["x + attn_out"] = vec(tr[f"{b}.ln1.input"][0, p])
        add = TourStep("residual", "Residual add, then the norm", r"x \leftarrow \mathrm{LN_1}(x + \mathrm{attn}(x))",
                       "The attention output is added to the stream; in this post-norm model the sum is "
                       "normalised right away (the 2017 design).", resid, "pages/norms.py")
        norm = _norm_step(lm, tr, f, "ln1", "LayerNorm after the residual sum" if cfg.norm == "layernorm"
                          else "RMSNorm after the residual sum", "after the residual sum (post-norm)")
    return [add, norm, _mlp_step(lm, tr, f)]


def _mlp_step(lm, tr: Trace, f: Focus) -> TourStep:
    cfg, p, b = lm.config, f.pos, f"blocks.{f.layer}"
    gated = {"swiglu": ("SiLU", "SiLU", "SwiGLU"), "geglu": (r"GELU_{\tanh}", "tanh GELU", "GeGLU")}.get(cfg.activation)
    shown = {"pre-activation h" if gated is None else "gate h": vec(tr[f"{b}.mlp.pre"][0, p])}
    if gated is not None:
        shown["up u"] = vec(tr[f"{b}.mlp.up"][0, p])
        formula = rf"\mathrm{{mlp}}(x) = \big(\mathrm{{{gated[0]}}}(x W_{{gate}}) \odot x W_{{up}}\big)\, W_{{down}}"
        act = f"the {gated[1]} of a gate times an up-projection ({gated[2]})"
    else:
        fn = {"gelu": r"\mathrm{GELU}", "gelu_tanh": r"\mathrm{GELU}_{\tanh}", "relu": r"\mathrm{ReLU}"}[cfg.activation]
        formula = rf"\mathrm{{mlp}}(x) = {fn}(x W_1" + (r" + b_1" if cfg.bias else "") + r")\, W_2" + (r" + b_2" if cfg.bias else "")
        act = f"the {cfg.activation.replace('_tanh', ' (tanh)').upper()} activation"
    shown["after activation"] = vec(tr[f"{b}.mlp.post"][0, p])
    shown["mlp_out"] = vec(tr[f"{b}.mlp_out"][0, p])
    shown["resid_post"] = vec(tr[f"{b}.resid_post"][0, p])
    text = (f"Each position on its own: expand from {cfg.d_model} to d_ff = {cfg.d_ff}, apply {act}, contract back "
            f"to {cfg.d_model}. " + ("The result is added to the residual stream." if cfg.norm_placement == "pre"
                                     else "The sum with the stream is normalised again (ln2)."))
    return TourStep("mlp", "MLP: expand, activate, contract", formula, text, shown, "pages/shapes.py")


def _output_steps(lm, tr: Trace, ids, labels, f: Focus, settings: SamplingSettings, seed: int,
                  n_words: int) -> list[TourStep]:
    cfg, p, tok = lm.config, f.pos, lm.tokenizer
    norms = [tr[f"blocks.{i}.resid_pre"][0, p].norm() for i in range(cfg.n_layer)]
    norms.append(tr[f"blocks.{cfg.n_layer - 1}.resid_post"][0, p].norm())
    growth = Shown(torch.stack(norms).float(), (cfg.n_layer + 1,),
                   tuple(["x_0"] + [f"after {i}" for i in range(cfg.n_layer)]))
    steps = [TourStep("blocks", f"The same for every block ({cfg.n_layer} of them)",
                      r"x_{l+1} = \mathrm{block}_l(x_l), \quad l = 0, \dots, L-1",
                      "Every block repeats attention and MLP with its own weights. The length ‖x‖ of the residual "
                      "vector at this position, entering block 0 and after each block:",
                      {"‖x‖": growth}, "pages/norms.py", chart=growth)]
    if cfg.norm_placement == "pre":
        steps.append(TourStep("final_norm", "Final norm", r"x_L \leftarrow \mathrm{LN_f}(x_L)",
                              "One last norm before the unembedding, so the logits do not scale with the stream's growth.",
                              {"x_L": vec(tr["ln_final.input"][0, p]), "LN_f(x_L)": vec(tr["ln_final.output"][0, p])},
                              "pages/norms.py"))
    else:
        steps.append(TourStep("final_norm", "Final norm: already done", r"x_L = \mathrm{LN_2}(\dots)",
                              "In a post-norm model the last block already ends with a norm, so there is no separate one.",
                              {"x_L": vec(tr[f"blocks.{cfg.n_layer - 1}.resid_post"][0, p])}, "pages/norms.py"))
    logits = tr.logits_at(p)[:n_words].float()   # one row: never the (T, V) logits (1 GB for Gemma 3 at 1,024 tokens)
    top = torch.topk(logits, SHOW).indices
    pieces = [repr(x) for x in tok.display_pieces(top.tolist())]
    steps.append(TourStep("logits", "Logits: a score for every token of the vocabulary",
                          r"\ell = x_L\, W_U^{\top},\quad W_U \in \mathbb{R}^{V \times d_{model}}",
                          f"One dot product per vocabulary entry ({n_words:,}); the highest scores, with their tokens:",
                          {"ℓ (top 8)": Shown(logits[top].clone(), (n_words,), tuple(pieces), note=f"top {SHOW} of {n_words:,}")},
                          "pages/logit_lens.py", next_token_check(logits, tok, labels[p])))
    steps += _sampling_steps(logits, tok, settings, seed)
    return steps


def _sampling_steps(logits: torch.Tensor, tok, settings: SamplingSettings, seed: int) -> list[TourStep]:
    bd = breakdown(logits, settings=settings)
    top = torch.topk(bd.probs_t, SHOW).indices
    pieces = tuple(repr(x) for x in tok.display_pieces(top.tolist()))
    drawn = sample(logits, settings, torch.Generator().manual_seed(seed))
    t, k, pp = settings.temperature, settings.top_k, settings.top_p
    v = logits.shape[0]
    note = f"the {SHOW} most likely after temperature, of {v:,}"
    return [
        TourStep("sampling", "Temperature, top-k, top-p",
                 r"P(w) \propto \exp(\ell_w / T)\ \text{ over the kept tokens}",
                 f"T = {t:g}, top-k = {k or 'off'}, top-p = {pp:g}: {int(bd.n_kept):,} tokens are kept, "
                 "in the Hugging Face order (temperature, then top-k, then top-p), and renormalised.",
                 {"P at T = 1": Shown(bd.probs[top].clone(), (v,), pieces, note=note),
                  "P after temperature": Shown(bd.probs_t[top].clone(), (v,), pieces, note=note),
                  "P sampled from": Shown(bd.final[top].clone(), (v,), pieces, note=note)},
                 "pages/next_token.py", chart=Shown(bd.final[top].clone(), (v,), pieces, note=note)),
        TourStep("drawn", "The drawn token",
                 r"t_{next} \sim P" if not settings.greedy else r"t_{next} = \arg\max_w \ell_w",
                 f"With seed {seed}, the draw gives {tok.display_piece(drawn)!r} (id {drawn}, probability "
                 f"{float(bd.final[drawn]):.2%}). It is appended to the text and the whole pass runs again.",
                 {"drawn id, P": Shown(torch.tensor([float(drawn), float(bd.final[drawn])]), (2,), ("id", "P"))},
                 "pages/generate.py"),
    ]


def tour(lm, trace: Trace, ids, labels: list[str], focus: Focus, settings: SamplingSettings = SamplingSettings(),
         seed: int = 0, n_words: int | None = None) -> list[TourStep]:
    """The tour's steps for the token at `focus.pos` of a traced forward of `ids` (batch 0)."""
    ids, cfg = list(ids), lm.config
    if not 0 <= focus.pos < len(ids):
        raise ValueError(f"position {focus.pos} is outside the prompt's {len(ids)} tokens; pick 0..{len(ids) - 1}")
    if not (0 <= focus.layer < cfg.n_layer and 0 <= focus.head < cfg.n_head):
        raise ValueError(f"block {focus.layer}, head {focus.head} does not exist: the model has "
                         f"{cfg.n_layer} blocks of {cfg.n_head} heads")
    n_words = n_words or min(lm.tokenizer.vocab_size, cfg.vocab_size)
    return (_embed_steps(lm, trace, ids, labels, focus) + _attention_steps(lm, trace, labels, focus)
            + _block_steps(lm, trace, focus) + _output_steps(lm, trace, ids, labels, focus, settings, seed, n_words))
