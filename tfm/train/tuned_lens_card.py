"""The README.md of a tuned-lens set (`python -m tfm.train.tuned_lens`): its card.json in words."""

from __future__ import annotations

from .transcoder_card import _data_lines


def _table(card: dict) -> list[str]:
    if "heldout" not in card:
        return [
            f"Training: step {card.get('step', 0)} of {card.get('steps', '?')}; the held-out table is "
            "measured once every step is taken."
        ]
    domains = list(card["heldout"])
    head = (
        "| stream | "
        + " | ".join(f"{d}: tuned / logit KL" for d in domains)
        + " | top-1 agreement (tuned / logit, mean) |"
    )
    rows = [head, "|---" * (len(domains) + 2) + "|"]
    n = len(card["heldout"][domains[0]]["tuned"]["kl"])
    for r in range(n):
        cells = [
            f"{card['heldout'][d]['tuned']['kl'][r]:.3f} / {card['heldout'][d]['logit']['kl'][r]:.3f}" for d in domains
        ]
        agree = [
            sum(card["heldout"][d][lens]["top1_agreement"][r] for d in domains) / len(domains)
            for lens in ("tuned", "logit")
        ]
        rows.append(
            f"| {'embed' if r == 0 else f'block {r - 1}'} | "
            + " | ".join(cells)
            + f" | {100 * agree[0]:.0f}% / {100 * agree[1]:.0f}% |"
        )
    return rows


def card_markdown(card: dict) -> str:
    cfg, s = card["config"], card["settings"]
    lines = [
        f"# Tuned lens for {cfg['model']}",
        "",
        f"One affine translator per residual stream ({cfg['n_layer'] + 1} streams, {cfg['d_model']} wide: "
        "x + x W + b, stored fp16), trained from the identity to minimise KL(final ‖ lens) "
        "(Belrose et al. 2023). Written by `python -m tfm.train.tuned_lens`; card.json holds every number.",
        "",
        f"- command: `{card['command']}`",
        f"- training: {card.get('train_positions', '?')} positions ({s['tokens']} tokens of the mix in windows of "
        f"{s['ctx']}, the first {s['skipped_first_positions']} of each left out), {card.get('steps', '?')} Adam "
        f"steps of {s['batch']} positions, lr {s['lr']}, {card.get('train_s', '?')} s",
        *(
            [
                f"- started from a finished set (a second stage), itself trained by `{card['init']['command']}`: "
                f"{card['init']['steps']} steps on {card['init']['train_positions']} positions"
            ]
            if card.get("init")
            else []
        ),
        *_data_lines(card),
        f"- files: {card.get('bytes', '?')} bytes",
        "",
        "KL(final ‖ lens) in nats on held-out text, mean over positions:",
        "",
        *_table(card),
        "",
    ]
    return "\n".join(lines)
