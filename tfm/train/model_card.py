"""Write the model card of a trained tfm model: `python -m tfm.train.model_card RUN --out FOLDER`.

Everything in the card is measured here from the run folder (metrics.jsonl, the exported
model/) and from the model itself: held-out bits per byte, samples at three temperatures,
head scores. The loss curve is a small hand-written SVG (no plotting dependency).
"""

from __future__ import annotations

import argparse
import re
import json
import shutil
import time
from pathlib import Path

import torch

from .. import analysis
from ..core.files import read_json
from ..generation.generate import generate
from ..loaders.loading import LM, load
from .model_card_text import HEADS_SECTION, TEMPLATE

PROMPTS = ["Once upon a time, there was a little girl named", "The old man looked at the sea and said"]
TEMPERATURES = (0.5, 0.8, 1.1)
CORPUS_LICENCES = [
    ("tinystories_train.txt", "TinyStories (Eldan & Li 2023), V1 + V2-GPT4 train stories", "CDLA-Sharing-1.0"),
    ("tinystories_valid.txt", "TinyStories V1 validation (held out: evaluation only)", "CDLA-Sharing-1.0"),
    ("tinyshakespeare.txt", "Tiny Shakespeare (karpathy/char-rnn)", "public domain"),
    ("gutenberg_pd_37books.txt.gz", "37 public-domain books from Project Gutenberg", "public domain"),
]


def read_metrics(run: Path) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train"], [r for r in rows if r.get("kind") == "eval"]


def stages(run: Path, meta: dict) -> list[tuple[Path, dict]]:
    """(run folder, exported meta) of every training stage, first to last: a run started with
    `--init-from RUN0/model` follows RUN0's stages."""
    init = (meta.get("args") or {}).get("init_from")
    if not init:
        return [(run, meta)]
    parent = read_json(Path(init) / "config.json")["meta"]
    return stages(Path(init).parent, parent) + [(run, meta)]


def chained_metrics(chain: list[tuple[Path, dict]]) -> tuple[list[dict], list[dict]]:
    """Every stage's metrics up to its exported step, tokens and steps counted from the start."""
    train, evals, tokens, steps = [], [], 0, 0
    for run, meta in chain:
        t, e = read_metrics(run)
        shift = lambda r: {**r, "tokens": r["tokens"] + tokens, "step": r["step"] + steps}
        train += [shift(r) for r in t if r["step"] <= meta["steps"]]
        evals += [shift(r) for r in e if r["step"] <= meta["steps"]]
        tokens, steps = tokens + meta["tokens_seen"], steps + meta["steps"]
    return train, evals


def stage_lines(chain: list[tuple[Path, dict]]) -> str:
    if len(chain) == 1:
        return ""
    out = []
    for k, (_, m) in enumerate(chain, 1):
        a = m.get("args") or {}
        start = "from scratch" if not a.get("init_from") else "from the previous stage's weights"
        out.append(
            f"- Stage {k}, {start}: {m['tokens_seen']:,} tokens in {m['steps']:,} steps, "
            f"peak lr {a.get('lr')}, repeat fraction {a.get('repeat_frac') or 0:g}, "
            f"copy fraction {a.get('copy_frac') or 0:g}, "
            f"{m['wall_time_s'] / 3600:.2f} h."
        )
    return "\n".join(out) + "\n"


def loss_svg(train: list[dict], evals: list[dict], width: int = 640, height: int = 320) -> str:
    """Training loss and held-out loss against tokens seen, as a self-contained SVG."""
    pad, xs = 48, [r["tokens"] for r in train] + [r["tokens"] for r in evals]
    ys = [r["loss"] for r in train] + [r["val_loss"] for r in evals]
    x0, x1, y0, y1 = 0, max(xs), min(ys) * 0.95, max(ys) * 1.02
    sx = lambda x: pad + (x - x0) / (x1 - x0) * (width - 2 * pad)
    sy = lambda y: height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)
    line = lambda pts, colour: (
        f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
        + " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        + '"/>'
    )
    ticks = "".join(
        f'<text x="{pad - 6}" y="{sy(v):.1f}" text-anchor="end" font-size="11">{v:.1f}</text>'
        for v in torch.linspace(y0, y1, 5).tolist()
    )
    xt = "".join(
        f'<text x="{sx(v):.1f}" y="{height - pad + 16}" text-anchor="middle" font-size="11">{v / 1e6:.0f}M</text>'
        for v in torch.linspace(0, x1, 5).tolist()
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
        f'<rect width="100%" height="100%" fill="white"/>{ticks}{xt}'
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">tokens seen</text>'
        f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle" font-size="12">loss (nats/token)</text>'
        + line([(r["tokens"], r["loss"]) for r in train], "#1f77b4")
        + line([(r["tokens"], r["val_loss"]) for r in evals], "#d62728")
        + f'<text x="{width - pad}" y="{pad - 16}" text-anchor="end" font-size="12" fill="#1f77b4">train (mix)</text>'
        + f'<text x="{width - pad}" y="{pad - 2}" text-anchor="end" font-size="12" fill="#d62728">held-out (mix)</text></svg>\n'
    )


def samples(lm: LM, n_tokens: int = 80) -> list[dict]:
    out = []
    for prompt in PROMPTS:
        for t in TEMPERATURES:
            n = min(n_tokens, lm.config.context_length - len(lm.tokenizer.encode(prompt)))
            text = "".join(s.text for s in generate(lm, prompt, max_new_tokens=max(n, 1), temperature=t, seed=0))
            out.append({"prompt": prompt, "temperature": t, "seed": 0, "text": text})
    return out


@torch.no_grad()
def head_table(lm: LM, text: str) -> dict:
    """Previous-token and first-token scores on natural text; induction on the head table's
    repeated random tokens (the same probe the app shows)."""
    ids = lm.tokenizer.encode(text)[: lm.config.context_length]
    out = lm.model(torch.tensor([ids]), trace=True)
    heads = analysis.head_table(lm, out.trace, ids)
    if heads.probe is None:
        raise ValueError(f"context_length={lm.config.context_length} is too short for the induction probe")
    s = {name: score.tolist() for name, score in heads.scores.items()}
    return {
        "previous_token": s["previous_token"],
        "first_token": s["first_token"],
        "induction": s["repeat_induction"],
        "previous_token_probe": s["repeat_previous_token"],
        "n_tokens_natural": len(ids),
        "probe_tokens": heads.probe.seq_len,
    }


@torch.no_grad()
def copy_test(lm: LM, text: str, span: int = 60, n: int = 30) -> dict:
    """Mean loss (nats/token) on `n` spans of held-out text and on the same span repeated right
    after: what induction heads buy. Positions before 10 are skipped (little context). Spans are
    at most half the context."""
    ids, span = lm.tokenizer.encode(text), min(span, lm.config.context_length // 2)
    first, second = [], []
    for s in range(0, min(len(ids) - span, n * 100), 100):
        x = torch.tensor([ids[s : s + span] * 2])
        logp = lm.model(x).logits[0, :-1].float().log_softmax(-1)
        nll = -logp.gather(1, x[0, 1:, None])[:, 0]  # nll[i] predicts token i+1
        first.append(nll[9 : span - 1].mean().item())
        second.append(nll[span + 9 :].mean().item())
    return {"span": span, "n": len(first), "first": sum(first) / len(first), "second": sum(second) / len(second)}


def top_heads(scores: list[list[float]], k: int = 3) -> str:
    flat = sorted(((v, l, h) for l, row in enumerate(scores) for h, v in enumerate(row)), reverse=True)[:k]
    return ", ".join(f"L{l}H{h} {v:.2f}" for v, l, h in flat)


def fmt_table(scores: list[list[float]]) -> str:
    head = "| layer | " + " | ".join(f"H{h}" for h in range(len(scores[0]))) + " |"
    sep = "|---" * (len(scores[0]) + 1) + "|"
    rows = [f"| {l} | " + " | ".join(f"{v:.2f}" for v in row) + " |" for l, row in enumerate(scores)]
    return "\n".join([head, sep, *rows])


def quote(text: str) -> str:
    """Markdown blockquote of generated text, every line quoted (blank lines kept)."""
    return "\n".join("> " + line if line.strip() else ">" for line in text.split("\n"))


def reproduce_command(chain: list[tuple[Path, dict]], corpus: str) -> str:
    """Every stage's command, independent of wall-clock time: each time budget is replaced by
    `--stop-at-step` at the exported step (the schedule of the full run is kept)."""
    lines = []
    for _, meta in chain:
        cmd = meta["commands"][0] if meta.get("commands") else meta["command"]
        cmd = re.sub(r" --time-budget \S+", "", cmd).replace(corpus.rstrip("/") + "/", "../shared/corpus/")
        cmd = re.sub(r"--(run|init-from|cache-dir) \S+", lambda m: f"--{m[1]} {portable(m[0].split(' ', 1)[1])}", cmd)
        lines.append(f".venv/bin/{cmd} --stop-at-step {meta['steps']}")
    return "\n".join(lines)


def portable(path: str) -> str:
    """A run path as the repository-relative runs/NAME[/...] the card tells people to use."""
    parts = Path(path).parts
    return (
        str(Path("runs", *parts[parts.index("runs") + 1 :])) if "runs" in parts else str(Path("runs", Path(path).name))
    )


def render(
    lm: LM, chain: list[tuple[Path, dict]], evals: list[dict], heads: dict, samples_: list[dict], corpus: str
) -> str:
    c, last = lm.config, evals[-1]
    counts = analysis.param_counts(lm.model)
    mix = _mix_rows(chain)
    lic = "\n".join(f"| `{f}` | {what} | {l} |" for f, what, l in CORPUS_LICENCES)
    cmds = reproduce_command(chain, corpus)
    best = min(evals, key=lambda r: r["eval_bpb"])
    text = "\n\n".join(
        f"**T = {x['temperature']}**, prompt *{x['prompt']}*:\n\n" + quote(x["prompt"] + x["text"]) for x in samples_
    )
    return TEMPLATE.format(
        n_params=lm.model.num_params(),
        cfg=json.dumps(c.to_dict(), indent=2),
        counts=json.dumps(counts),
        tokens=sum(m["tokens_seen"] for _, m in chain),
        steps=sum(m["steps"] for _, m in chain),
        hours=sum(m["wall_time_s"] for _, m in chain) / 3600,
        stages=stage_lines(chain),
        bpb=last["eval_bpb"],
        best_bpb=best["eval_bpb"],
        best_step=best["step"],
        val=last["val_loss"],
        per_file=", ".join(f"{k}: {v:.3f}" for k, v in last["val"].items()),
        mix=mix,
        lic=lic,
        cmds=cmds,
        samples=text,
        run=portable(str(chain[-1][0])),
        heads_section=heads_section(heads),
        date=time.strftime("%Y-%m-%d"),
        repeat=repeat_note(chain, c.context_length),
    )


def _mix_rows(chain: list[tuple[Path, dict]]) -> str:
    """The last stage's data mix as table rows: each file's share, tokens and epochs over every stage."""
    meta = chain[-1][1]
    epochs = {
        d["file"]: sum(e["epochs"] for _, m in chain for e in m["data"] if e["file"] == d["file"]) for d in meta["data"]
    }  # over every stage
    return "\n".join(
        f"| `{Path(d['file']).name}` | {d['share']:.0%} | {d['train_tokens']:,} | {epochs[d['file']]:.1f} |"
        for d in meta["data"]
    )


def heads_section(heads: dict) -> str:
    return HEADS_SECTION.format(
        top_prev_probe=top_heads(heads["previous_token_probe"]),
        prev=fmt_table(heads["previous_token"]),
        first=fmt_table(heads["first_token"]),
        ind=fmt_table(heads["induction"]),
        top_prev=top_heads(heads["previous_token"]),
        top_first=top_heads(heads["first_token"]),
        top_ind=top_heads(heads["induction"]),
        n_nat=heads["n_tokens_natural"],
        probe_len=heads["probe_tokens"],
        cp=heads["copy"],
    )


def refresh_heads(folder: Path, corpus: str) -> None:
    """Re-measure only the head scores of an existing model folder's card (card.json and its README
    section), e.g. after the app's probe changed; the training figures stay as the run wrote them."""
    lm = load(folder, device="cpu")
    card = read_json(folder / "card.json")
    valid = Path(corpus) / "tinystories_valid.txt"
    card["heads"] = {**head_table(lm, valid.read_text(encoding="utf-8")[:4000]), "copy": card["heads"]["copy"]}
    (folder / "card.json").write_text(json.dumps(card, indent=1))
    readme = (folder / "README.md").read_text()
    start, end = readme.index("## Attention heads"), readme.index("## Reproduce\n")
    (folder / "README.md").write_text(readme[:start] + heads_section(card["heads"]) + readme[end:])


def repeat_note(chain: list[tuple[Path, dict]], ctx: int) -> str:
    """What the stages' --repeat-frac / --copy-frac rows were, in words."""
    args = [m.get("args") or {} for _, m in chain]
    rep = [a.get("repeat_frac") or 0 for a in args]
    cop = [a.get("copy_frac") or 0 for a in args]
    if not any(rep) and not any(cop):
        return "Every training row is a plain window of the text."
    which = lambda fr: (
        ", ".join(f"{f:.0%} of rows in stage {k}" for k, f in enumerate(fr, 1) if f)
        if len(chain) > 1
        else f"{fr[0]:.0%} of rows"
    )
    out = []
    if any(rep):
        out.append(
            f"Repeated-text rows (`--repeat-frac`: {which(rep)}): the text restarts after a random "
            f"span of 8 to {ctx // 2} tokens (A B C D | A B C D E F ...), so the second copy can be "
            "predicted only by looking back in context. The jump back itself is never a target."
        )
    if any(cop):
        out.append(
            f"Copy rows (`--copy-frac`: {which(cop)}): random ordinary tokens repeating with a "
            f"period of 8 to {ctx // 2}; only the repeats are targets, so the model learns to copy "
            "from context without learning to predict noise."
        )
    out.append(
        "Both teach what a model this small, trained on this little text, otherwise does not learn: "
        "previous-token and induction heads. The other rows are plain windows."
    )
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tfm.train.model_card", description=__doc__.splitlines()[0])
    ap.add_argument(
        "run", type=Path, nargs="?", help="a tfm.train run folder (metrics.jsonl, model/); not with --heads-only"
    )
    ap.add_argument("--out", type=Path, required=True, help="where to write the model folder with its card")
    ap.add_argument("--corpus", default="/work/shared/corpus", help="corpus path used by the run")
    ap.add_argument(
        "--heads-only", action="store_true", help="only re-measure the head scores of the card already in --out"
    )
    args = ap.parse_args(argv)
    if args.heads_only:
        return refresh_heads(args.out, args.corpus)
    if args.run is None:
        ap.error("give the run folder to write a card from (or --heads-only to re-measure a card's heads)")
    if args.out.exists():
        shutil.rmtree(args.out)
    shutil.copytree(args.run / "model", args.out)
    lm = load(args.out, device="cpu")
    meta = read_json(args.out / "config.json")["meta"]
    # metrics.jsonl may run ahead of the exported model: keep what the exported weights saw.
    chain = stages(args.run, meta)
    train, evals = chained_metrics(chain)
    valid = Path(args.corpus) / "tinystories_valid.txt"
    heads = head_table(lm, valid.read_text(encoding="utf-8")[:4000])
    heads["copy"] = copy_test(lm, valid.read_text(encoding="utf-8")[:40_000])
    samples_ = samples(lm)
    (args.out / "loss_curve.svg").write_text(loss_svg(train, evals))
    (args.out / "card.json").write_text(json.dumps({"heads": heads, "samples": samples_, "evals": evals}, indent=1))
    (args.out / "README.md").write_text(render(lm, chain, evals, heads, samples_, args.corpus))
    print(f"wrote {args.out}/README.md")


if __name__ == "__main__":
    main()
