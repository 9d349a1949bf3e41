"""What `python -m tfm.train.sae` measures on held-out text and ships with an SAE: the card's
metrics and each feature's top-activating contexts and activation histogram."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from ..analysis.dictionaries.sae import FEATURES_FILE, SAE, stream_at
from ..core import edits as E
from .data import id_windows, next_token_loss

N_CONTEXTS, BEFORE, AFTER, BINS = 8, 12, 3, 24  # contexts per feature, window tokens, histogram bins


@torch.no_grad()
def _ce(model, rows: torch.Tensor, edits=None) -> float:
    return float(next_token_loss(model(rows[:, :-1], edits=edits).logits, rows[:, 1:]))


@torch.no_grad()
def metric_sums(lm, sae: SAE, ids: np.ndarray, ctx: int, skip: int = 0, rows: int = 8) -> dict:
    """The running sums `finish` turns into metrics (sums of several texts add up)."""
    model, layer, name = lm.model, sae.cfg.layer, f"blocks.{sae.cfg.layer}.resid_pre"
    wins = id_windows(ids, ctx + 1)
    fired = torch.zeros(sae.cfg.n_features, dtype=torch.bool)
    sums = dict(clean=0.0, recon=0.0, zero=0.0, l0=0.0, err=0.0, var=0.0)
    for i in range(0, len(wins), rows):
        b = wins[i : i + rows]
        full = stream_at(model, b[:, :-1], layer)  # (b, ctx, D)
        x = full[:, skip:]
        vals, idx = sae.topk(x.flatten(0, 1))
        x_hat = torch.cat([full[:, :skip], sae.decode_kept(vals, idx).view_as(x)], 1)
        zero = torch.cat([full[:, :skip], torch.zeros_like(x)], 1)
        fired[idx[vals > 0]] = True
        sums["l0"] += float((vals > 0).sum())
        sums["err"] += float((x - x_hat[:, skip:]).pow(2).sum())
        sums["var"] += float((x - x.mean((0, 1))).pow(2).sum())
        sums["clean"] += _ce(model, b) * len(b)
        sums["recon"] += _ce(model, b, [E.Patch(name, x_hat[r], row=r) for r in range(len(b))]) * len(b)
        sums["zero"] += _ce(model, b, [E.Patch(name, zero[r], row=r) for r in range(len(b))]) * len(b)
    return {**sums, "fired": fired, "rows": len(wins), "tokens": len(wins) * (ctx - skip)}


def add_sums(parts: list[dict]) -> dict:
    """Several texts' sums as one (fired: any of them)."""
    out = {k: sum(p[k] for p in parts) for k in parts[0] if k != "fired"}
    out["fired"] = torch.stack([p["fired"] for p in parts]).any(0)
    return out


def finish(sums: dict) -> dict:
    """L0, dead share, FVU, CE clean / with the reconstruction / with the stream zeroed, CE recovered."""
    n_rows, n_tok = sums["rows"], sums["tokens"]
    ce = {k: sums[k] / n_rows for k in ("clean", "recon", "zero")}
    return {
        "tokens": n_tok,
        "l0": sums["l0"] / n_tok,
        "dead_share": float((~sums["fired"]).float().mean()),
        "fvu": sums["err"] / sums["var"],
        "ce_clean": ce["clean"],
        "ce_recon": ce["recon"],
        "ce_zero": ce["zero"],
        "ce_recovered": (ce["zero"] - ce["recon"]) / (ce["zero"] - ce["clean"]),
    }


def metrics(lm, sae: SAE, ids: np.ndarray, ctx: int, skip: int = 0, rows: int = 8) -> dict:
    """L0, dead share, FVU and CE clean / with the reconstruction / with the stream zeroed,
    leaving each window's first `skip` positions as they are (and out of the statistics)."""
    return finish(metric_sums(lm, sae, ids, ctx, skip, rows))


@torch.no_grad()
def _sparse_acts(lm, sae: SAE, ids: np.ndarray, ctx: int, skip: int = 0):
    """Flattened held-out tokens (N,), their kept activations (N, k) and features (N, k); the
    first `skip` positions of each window never fire."""
    wins = id_windows(ids, ctx)
    vals, idx = [], []
    for i in range(0, len(wins), 16):
        v, j = sae.topk(stream_at(lm.model, wins[i : i + 16], sae.cfg.layer).flatten(0, 1))
        v.view(-1, ctx, v.shape[-1])[:, :skip] = 0
        vals.append(v)
        idx.append(j)
    return wins.flatten(), torch.cat(vals), torch.cat(idx)


def top_positions(vals: torch.Tensor, idx: torch.Tensor, f: int, n: int = N_CONTEXTS):
    """From (N, k) kept activations and their features: each feature's `n` strongest positions
    (F, n) (-1 none), how often each fired (F,), and the firing (feature, value) pairs."""
    flat_f, flat_v = idx.flatten(), vals.flatten()
    pos = torch.arange(vals.shape[0]).repeat_interleave(vals.shape[1])
    live = flat_v > 0
    flat_f, flat_v, pos = flat_f[live], flat_v[live], pos[live]
    top = torch.full((f, n), -1, dtype=torch.long)
    order = torch.argsort(flat_f * 1e6 - flat_v.double().clamp_max(1e5), stable=True)  # by feature, then value desc
    counts = torch.bincount(flat_f, minlength=f)
    starts = torch.cumsum(counts, 0) - counts
    for feat in torch.nonzero(counts).flatten().tolist():
        s, c = int(starts[feat]), min(int(counts[feat]), n)
        top[feat, :c] = pos[order[s : s + c]]
    return top, counts, flat_f, flat_v


def feature_data(
    lm, sae: SAE, ids: np.ndarray, ctx: int, folder: Path, skip: int = 0, row_domain: torch.Tensor | None = None
) -> None:
    """features.safetensors: top contexts (ids and the feature's activation along each),
    activation histograms over [0, max], firing rates; see tfm.analysis.dictionaries.sae. With `row_domain`
    (each window's domain index, windows of `ctx` never crossing domains) also ctx_domain (F, n)."""
    toks, vals, idx = _sparse_acts(lm, sae, ids, ctx, skip)
    n, f = toks.shape[0], sae.cfg.n_features
    dense_top, counts, flat_f, flat_v = top_positions(vals, idx, f)
    width = BEFORE + 1 + AFTER
    offs = torch.arange(-BEFORE, AFTER + 1)
    at = dense_top[..., None] + offs  # (F, n, W) token positions
    same_row = (at // ctx == dense_top[..., None] // ctx) & (dense_top[..., None] >= 0) & (at >= 0) & (at < n)
    at = at.clamp(0, n - 1)
    ctx_ids = torch.where(same_row, toks[at], -1).to(torch.int32)
    feat_ids = torch.arange(f)[:, None, None].expand(-1, N_CONTEXTS, width)
    ctx_acts = ((idx[at] == feat_ids[..., None]) * vals[at]).sum(-1) * same_row
    hist_max = torch.zeros(f).scatter_reduce_(0, flat_f, flat_v, "amax")
    bins = (flat_v / hist_max[flat_f].clamp_min(1e-12) * BINS).long().clamp(0, BINS - 1)
    hist = torch.bincount(flat_f * BINS + bins, minlength=f * BINS).view(f, BINS)
    out = {
        "ctx_ids": ctx_ids.contiguous(),
        "ctx_acts": ctx_acts.half().contiguous(),
        "hist": hist.to(torch.int32),
        "hist_max": hist_max.float(),
        "freq": (counts.float() / n),
    }
    if row_domain is not None:
        out["ctx_domain"] = torch.where(dense_top >= 0, row_domain[dense_top.clamp_min(0) // ctx], -1).to(torch.int8)
    save_file(out, folder / FEATURES_FILE)


def card_markdown(card: dict) -> str:
    m = card["metrics"]
    lines = [
        f"# TopK sparse autoencoder: {card['model']}, layer {card['layer']} ({card['point']})",
        "",
        "Trained by tfm (`python -m tfm.train.sae`); files: `sae.safetensors` (fp16), `card.json`, "
        "`features.safetensors` (top contexts and histograms on held-out text).",
        "",
        "```",
        card["command"],
        "```",
        "",
        f"- training: {card['steps']} steps of {card['tokens_seen'] // max(card['steps'], 1):,} activations, "
        f"{card['tokens_seen']:,} seen in all: {card['epochs']:g} passes over {card['train_tokens']:,} "
        f"distinct tokens",
        f"- wall time: {card['wall_time_s']:.0f} s on {card['threads']} CPU thread(s) "
        f"(activations {card['activations_s']:.0f} s)",
        f"- held-out text: {card['eval_file']} ({card['eval_tokens']:,} tokens)",
        "",
        "| metric | value |",
        "|---|---|",
        f"| L0 (features firing per token) | {m['l0']:.1f} |",
        f"| dead features (never fire on held-out text) | {100 * m['dead_share']:.1f}% |",
        f"| fraction of variance unexplained | {m['fvu']:.4f} |",
        f"| CE loss clean / reconstruction / stream zeroed | {m['ce_clean']:.4f} / {m['ce_recon']:.4f} / "
        f"{m['ce_zero']:.4f} |",
        f"| CE loss recovered (zero - recon) / (zero - clean) | {100 * m['ce_recovered']:.2f}% |",
        "",
    ]
    return "\n".join(lines + _domain_lines(card.get("domain_metrics", {})))


def _domain_lines(per: dict) -> list[str]:
    """One row per held-out domain (a --mix card)."""
    if not per:
        return []
    lines = [
        "Per held-out domain:",
        "",
        "| domain | tokens | L0 | dead | FVU | CE clean / recon / zero | CE recovered |",
        "|---|---|---|---|---|---|---|",
    ]
    for d, m in per.items():
        lines.append(
            f"| {d} | {m['tokens']:,} | {m['l0']:.1f} | {100 * m['dead_share']:.1f}% | {m['fvu']:.4f} | "
            f"{m['ce_clean']:.3f} / {m['ce_recon']:.3f} / {m['ce_zero']:.3f} | {100 * m['ce_recovered']:.2f}% |"
        )
    return lines + [""]
