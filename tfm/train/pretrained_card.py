"""The card of a model tfm did not train (the packaged SmolLM2, a GGUF file, a Hugging Face folder),
measured here beside another model: `python -m tfm.train.pretrained_card smollm2 --beside default
--corpus ../shared/corpus --out assets/cards/smollm2`.

Everything in it is measured by this command on the running models: bits per byte on a held-out
prefix of `tinystories_valid.txt` (vocabulary independent, so two tokenizers compare), the head
table the app shows (previous-token and first-token scores on natural text, induction on repeated
random tokens) and the copy test (loss on a span, then on the same span repeated).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ..loaders.loading import LM, load
from .data import EvalText
from .model_card import copy_test, fmt_table, head_table, top_heads

EVAL_FILE = "tinystories_valid.txt"


def measure(lm: LM, corpus: Path, eval_bytes: int) -> dict:
    """One model's figures (see the module docstring)."""
    valid = corpus / EVAL_FILE
    text = valid.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    bpb = EvalText(valid, lm.tokenizer, eval_bytes, min(lm.config.context_length, 512)).bits_per_byte(lm.model, "cpu")
    heads = head_table(lm, text[:4000])
    return {
        "bits_per_byte": bpb,
        "eval_bytes": eval_bytes,
        "heads": heads,
        "copy": copy_test(lm, text[4000:40000]),
        "params": lm.model.num_params(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def render(name: str, beside: str, card: dict, command: str) -> str:
    me, other = card[name], card[beside]
    rows = "\n".join(
        f"| {n} | {c['params'] / 1e6:,.1f}M | {c['bits_per_byte']:.3f} | {c['copy']['first']:.2f} → "
        f"{c['copy']['second']:.2f} | {top_heads(c['heads']['previous_token_probe'], 2)} | "
        f"{top_heads(c['heads']['induction'], 2)} |"
        for n, c in ((name, me), (beside, other))
    )
    return f"""# Model card: {name}, measured beside {beside}

Measured by `{command}`. Bits per byte on the first {me["eval_bytes"]:,} bytes of `{EVAL_FILE}`
(held out: neither model trained on it); the copy test is the loss (nats per token) on {me["copy"]["n"]}
spans of {me["copy"]["span"]} tokens, then on the same span repeated right after (what induction
heads buy); heads are the app's head table (scores 0..1).

| model | parameters | bits per byte | copy test | strongest previous-token heads | strongest induction heads |
|---|---|---|---|---|---|
{rows}

## {name}: induction score of every head (repeated random tokens, {me["heads"]["probe_tokens"]} per half)

{fmt_table(me["heads"]["induction"])}

## {name}: previous-token score of every head ({me["heads"]["n_tokens_natural"]} tokens of natural text)

{fmt_table(me["heads"]["previous_token"])}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tfm.train.pretrained_card", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a model spec: smollm2, a .gguf file, a folder")
    ap.add_argument("--beside", default="default", help="the model it is measured beside (default: the bundled one)")
    ap.add_argument("--corpus", type=Path, default=Path("../shared/corpus"), help=f"folder holding {EVAL_FILE}")
    ap.add_argument("--eval-bytes", type=int, default=20_000)
    ap.add_argument("--out", type=Path, required=True, help="folder for README.md and card.json")
    a = ap.parse_args(argv)
    with torch.no_grad():
        card = {spec: measure(load(spec, device="cpu"), a.corpus, a.eval_bytes) for spec in (a.model, a.beside)}
    a.out.mkdir(parents=True, exist_ok=True)
    command = (
        "python -m tfm.train.pretrained_card " + a.model + f" --beside {a.beside} --corpus {a.corpus}"
        f" --eval-bytes {a.eval_bytes} --out {a.out}"
    )
    (a.out / "card.json").write_text(json.dumps({"command": command, **card}, indent=1))
    (a.out / "README.md").write_text(render(a.model, a.beside, card, command))
    print((a.out / "README.md").read_text())


if __name__ == "__main__":
    main()
