"""The README.md of a transcoder set (`python -m tfm.train.transcoders`): its card.json in words."""

from __future__ import annotations

import statistics


def _data_lines(card: dict) -> list[str]:
    lines = []
    for split, what in (("train", "training"), ("heldout", "held-out")):
        d = card["data"][split]
        py = d["python"]
        lines.append(
            f"- {what} text: books ({d['books']}), Shakespeare ({d['shakespeare']}), stories "
            f"({d['stories']}), Python ({py['stdlib']}: {len(py['files'])} top-level modules, "
            f"listed in card.json)"
        )
    return lines


def _layer_table(card: dict) -> list[str]:
    rows = [
        "| layer | FVU (held-out) | L0 | dead (held-out) | dead (last training pass) | train s |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(card["layers"], key=int):
        m = card["layers"][key]
        rows.append(
            f"| {key} | {m['fvu']:.4f} | {m['l0']:.1f} | {100 * m['dead_share']:.1f}% | "
            f"{100 * m['dead_share_train']:.1f}% | {m['train_s']:.0f} |"
        )
    return rows


def _ce_table(card: dict) -> list[str]:
    if "ce" not in card:
        return ["The next-token loss with the MLPs replaced is measured once every layer is trained."]
    rows = [
        "| domain | tokens | clean | every MLP replaced | replaced + error terms | one layer replaced (mean, worst) |",
        "|---|---|---|---|---|---|",
    ]
    for domain, c in card["ce"].items():
        one = c["one_layer"]
        worst = max(range(len(one)), key=lambda i: one[i])
        rows.append(
            f"| {domain} | {c['tokens']:,} | {c['clean']:.4f} | {c['replaced']:.4f} | {c['with_errors']:.4f} | "
            f"{sum(one) / len(one):.4f}, {one[worst]:.4f} (layer {worst}) |"
        )
    return rows + [
        "",
        "Error terms add each MLP's true output minus its transcoder's back, so that column must "
        "equal clean (a check of the replacement itself); card.json has the one-layer loss of every layer.",
    ]


def _summary_lines(card: dict, layer_bytes: int | None) -> list[str]:
    """Adam steps per layer, the median held-out FVU and the layer files' bytes (when given)."""
    layers = card["layers"].values()
    steps = sorted({m["steps"] for m in layers if "steps" in m})
    lines = [f"- Adam steps per layer: {'-'.join(f'{n:,}' for n in steps[:: max(len(steps) - 1, 1)])}"] if steps else []
    if layers:
        lines.append(
            f"- median held-out FVU over {len(layers)} layers: {statistics.median(m['fvu'] for m in layers):.4f}"
        )
    if layer_bytes is not None:
        lines.append(f"- layer files: {layer_bytes:,} bytes")
    return lines


def card_markdown(card: dict, layer_bytes: int | None = None) -> str:
    cfg, s = card["config"], card["settings"]
    n_done = len(card["layers"])
    lines = [
        f"# TopK transcoders: {card['model']}, {n_done} of {cfg['n_layer']} layers",
        "",
        f"Trained by tfm (`python -m {card.get('trainer', 'tfm.train.transcoders')}`): one transcoder per block "
        "reads the MLP's input "
        "(`blocks.L.ln2.output`) and writes its output (`blocks.L.mlp_out`). Files: `card.json`, "
        f"`layer_LL.safetensors` ({cfg['storage']}).",
        "",
        "```",
        card["command"],
        "```",
        "",
        f"- {cfg['n_features']} features per layer, k = {cfg['k']}; windows of {s['ctx']} tokens"
        + (
            f", the first {s['skipped_first_positions']} position(s) of each left out (attention sink) "
            "and never replaced"
            if s["skipped_first_positions"]
            else ""
        ),
        f"- training: {card.get('train_tokens', 0):,} activations per layer, {s['epochs']:g} passes, "
        f"batch {s['batch']}, lr {s['lr']:g}; wall time {card.get('wall_time_s', 0):.0f} s on "
        f"{card.get('threads', 1)} CPU thread(s)",
        f"- held-out: {card.get('heldout_tokens', 0):,} tokens for the per-layer figures",
        *_summary_lines(card, layer_bytes),
        *_data_lines(card),
        "",
        "## Per layer",
        "",
        *_layer_table(card),
        "",
        "## Next-token loss (CE, nats) per held-out domain",
        "",
        *_ce_table(card),
        "",
    ]
    return "\n".join(lines)
