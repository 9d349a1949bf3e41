"""Command line: `tfm info|trace|generate|lens [SOURCE] ...` (or `python -m tfm ...`) and `tfm app`.

SOURCE is anything `tfm.load` accepts: "default", "random:<preset>", a tfm / Hugging Face
GPT-2 folder or a nanoGPT ckpt.pt. Problems the user can fix (a bad folder, a bad setting)
print one line `error: ...` to stderr and exit with status 2, never a traceback.
`tfm app [STREAMLIT ARGS]` starts the web app of the checkout tfm was installed from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .analysis import param_counts
from .analysis.lens.compare import lens_grid, prompt_fits
from .analysis.lens.tuned import TRAIN_COMMAND, shipped_lens
from .generation.generate import generate, n_words, prepare_prompt
from .loaders.loading import DEVICES, LM, load

EXIT_USAGE = 2
# The web app lives beside the package in a checkout (an editable install points there); a wheel
# carries the engine only.
CHECKOUT = Path(__file__).resolve().parents[1]
APP_HELP = (
    "start the web app (the checkout's app.py); arguments go to `streamlit run`, "
    "e.g. `tfm app --server.port 8600 -- --max-new-tokens 256`"
)


class UsageError(Exception):
    """A problem with the command line or its inputs: reported as one `error:` line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors, in the same one-line form
        raise UsageError(f"{message} (see `tfm {self.prog.split()[-1]} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfm", description="Inspect and run tfm models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    info = sub.add_parser("info", help="config and parameter counts by component")
    trace = sub.add_parser("trace", help="the shape of every tensor of one forward pass")
    gen = sub.add_parser("generate", help="stream generated text to the terminal")
    lens = sub.add_parser("lens", help="per layer: the logit and tuned lens against the final prediction")
    sub.add_parser("app", help=APP_HELP, add_help=False)  # listed here; main() runs it before parsing
    for p in (info, trace, gen, lens):
        p.add_argument(
            "source",
            nargs="?",
            default="default",
            help='"default", "random:<preset>", or a model folder (default: %(default)s)',
        )
        p.add_argument("--device", default="auto", choices=DEVICES, help="default: %(default)s")
    for p in (info, trace, lens):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for p in (trace, gen, lens):
        p.add_argument("--prompt", required=True, help="the input text")
    gen.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default: %(default)s)")
    gen.add_argument("--top-k", type=int, default=0, help="0 = off (default: %(default)s)")
    gen.add_argument("--top-p", type=float, default=1.0, help="1 = off (default: %(default)s)")
    gen.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    gen.add_argument("--max-new-tokens", type=int, default=None, help="default: 64, or the context length if smaller")
    gen.add_argument("--no-cache", action="store_true", help="recompute the whole prefix every step")
    return parser


def _table(rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """Rows of strings as aligned columns (`right[i]`: right-align column i)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    cells = lambda r: [c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(r, widths, right)]
    return "\n".join("  ".join(cells(r)).rstrip() for r in rows)


# --------------------------------------------------------------------------- #
# Commands
# --------------------------------------------------------------------------- #


def info_data(lm: LM) -> dict:
    counts = param_counts(lm.model)
    return {
        "source": lm.source,
        "device": str(lm.device),
        "config": lm.config.to_dict(),
        "tokenizer": {"name": lm.tokenizer.name, "vocab_size": lm.tokenizer.vocab_size, "eot_id": lm.tokenizer.eot_id},
        "parameters": counts,
        "total": sum(counts.values()),
    }


def cmd_info(lm: LM, args) -> None:
    data = info_data(lm)
    if args.json:
        print(json.dumps(data, indent=2))
        return
    tok = data["tokenizer"]
    print(f"source     {data['source']}  ({data['device']})")
    print(f"tokenizer  {tok['name']}, {tok['vocab_size']} ids, end-of-text id {tok['eot_id']}\n")
    print(_table([(k, str(v)) for k, v in data["config"].items()], (False, False)) + "\n")
    total = data["total"]
    rows = [("component", "parameters", "share")]
    rows += [(k, f"{n:,}", f"{100 * n / total:.1f}%") for k, n in data["parameters"].items()]
    rows.append(("total", f"{total:,}", "100.0%"))
    print(_table(rows, (False, True, True)))
    if lm.config.tied_embeddings:
        print("(tied embeddings: the unembedding shares the token embedding, counted once)")


@torch.no_grad()
def trace_data(lm: LM, prompt: str) -> dict:
    info = prepare_prompt(lm, prompt)
    if info.notice:
        print(f"note: {info.notice}", file=sys.stderr)
    idx = torch.tensor([info.ids], device=lm.device)
    out = lm.model(idx, trace=True)
    return {
        "source": lm.source,
        "tokens": list(info.ids),
        "pieces": lm.tokenizer.display_pieces(info.ids),
        "shapes": [entry.as_dict() for entry in out.trace.shapes],
    }


def cmd_trace(lm: LM, args) -> None:
    data = trace_data(lm, args.prompt)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    print(f"{len(data['tokens'])} tokens: {' | '.join(data['pieces'])}\n")
    rows = [("name", "shape", "axes", "dtype")]
    for e in data["shapes"]:
        name = e["name"] if e["stored"] else e["name"] + " *"
        rows.append((name, "(" + ", ".join(map(str, e["shape"])) + ")", ", ".join(e["axes"]), e["dtype"]))
    print(_table(rows, (False, False, False, False)))
    print("\n* listed in the shape trace only (a reshape), not stored in the Trace")


@torch.no_grad()
def lens_data(lm: LM, prompt: str, source: str) -> dict:
    """Both lenses on the prompt (tfm.analysis.lens.compare): per layer the mean KL to the final
    distribution, top-1 agreement, and the last position's top token; "tuned" only where the
    model ships a tuned lens (tfm.analysis.lens.tuned.shipped_lens)."""
    ids = list(prepare_prompt(lm, prompt).ids)
    trace = lm.model(torch.tensor([ids], device=lm.device), trace=True).trace
    lens, words = shipped_lens(source, lm), n_words(lm)
    fits = prompt_fits(lm.model, trace, lens, words)
    rows = {}
    for name, fit in fits.items():
        grid = lens_grid(lm.model, trace, lens if name == "tuned" else None, 1, slice(len(ids) - 1, None), False, words)
        rows[name] = {
            "kl": fit.mean_kl(),
            "top1_agreement": fit.agreement(),
            "last_top": lm.tokenizer.display_pieces(grid.top_ids[:, 0, 0].tolist()),
        }
    return {
        "source": lm.source,
        "tokens": ids,
        "layers": fits["logit"].labels,
        "lenses": rows,
        "tuned_lens": "shipped" if lens else f"none: train one with {TRAIN_COMMAND}",
    }


def cmd_lens(lm: LM, args) -> None:
    data = lens_data(lm, args.prompt, args.source)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    names = list(data["lenses"])
    head = ["layer"] + [f"{n} {what}" for n in names for what in ("KL", "top-1=final", "last top")]
    rows = [head] + [
        [label]
        + [
            cell
            for n in names
            for cell in (
                f"{data['lenses'][n]['kl'][r]:.3f}",
                f"{100 * data['lenses'][n]['top1_agreement'][r]:.0f}%",
                repr(data["lenses"][n]["last_top"][r]),
            )
        ]
        for r, label in enumerate(data["layers"])
    ]
    print(_table(rows, [False] + [True, True, False] * len(names)))
    print(f"\nKL in nats, mean over positions after the first; tuned lens: {data['tuned_lens']}")


# On a terminal, control bytes a model may emit (ESC, CR, ...) are shown, not obeyed.
_TTY_SAFE = {c: f"\\x{c:02x}" for c in (*range(32), 127) if c not in (9, 10)}


def cmd_generate(lm: LM, args) -> None:
    safe = _TTY_SAFE if sys.stdout.isatty() else {}
    gen = generate(
        lm,
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        use_cache=not args.no_cache,
    )
    if gen.prompt.notice:
        print(f"note: {gen.prompt.notice}", file=sys.stderr, flush=True)
    step = None
    for step in gen:
        sys.stdout.write(step.new_text.translate(safe))
        sys.stdout.flush()
    if step is not None and not step.text_so_far.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    n, seconds = step.index + 1, max(step.elapsed_s, 1e-9)
    print(
        f"stop: {step.stop_reason} after {n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s, prefill included)",
        file=sys.stderr,
    )


def app_argv(args: Sequence[str], checkout: Path = CHECKOUT) -> list[str]:
    """The command `tfm app` runs: this Python's streamlit on the checkout's app.py."""
    app = checkout / "app.py"
    if not (app.is_file() and all((checkout / d).is_dir() for d in ("ui", "services", "pages"))):
        raise UsageError(
            f"`tfm app` needs the tfm repository checkout (app.py, pages/, ui/, services/, assets/); tfm was "
            f"installed from {checkout}, which has no app. Clone the repository and run "
            "`pip install -e .` there (or `./run_app.sh`); a wheel holds the engine only"
        )
    return [sys.executable, "-m", "streamlit", "run", str(app), *args]


def cmd_app(args: Sequence[str]) -> int:
    """Run the app in the checkout (its relative default folders, e.g. models/, are read from
    there, as with run_app.sh); returns streamlit's exit status."""
    if list(args[:1]) in (["-h"], ["--help"]):
        print(
            f"usage: tfm app [STREAMLIT ARGS] [-- APP ARGS]\n\n{APP_HELP}.\n"
            "App flags after `--`: `python -m services.server --help` in the checkout lists them."
        )
        return 0
    argv = app_argv(args)
    print("running: " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.call(argv, cwd=CHECKOUT)


COMMANDS = {"info": cmd_info, "trace": cmd_trace, "generate": cmd_generate, "lens": cmd_lens}


def _load(source: str, device: str) -> LM:
    """tfm.load, with anything a broken model folder can raise turned into a UsageError."""
    try:
        return load(source, device=device)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    except Exception as e:  # e.g. a KeyError from a config.json missing a field
        raise UsageError(f"could not load {source!r}: {type(e).__name__}: {e}") from None


def _error(message: str) -> int:
    print("error: " + " ".join(message.splitlines()), file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if hasattr(sys.stdout, "reconfigure"):  # generated text may hold U+FFFD; never crash on it
        sys.stdout.reconfigure(errors="replace")
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["app"]:  # everything after `app` belongs to streamlit: no parsing here
            return cmd_app(argv[1:])
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        COMMANDS[args.command](_load(args.source, args.device), args)
    except BrokenPipeError:  # e.g. `| head`: the reader left; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UsageError, ValueError, TypeError, OSError, RuntimeError) as e:
        return _error(str(e))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    return 0
