"""Attribution graphs (tfm.analysis.graph.build): time and memory of one graph, scores, faithfulness.
Prints numbers; no asserts.

    .venv/bin/python bench/bench_graph.py [--tokens 16] [--no-smollm2] [--threads 2] [--sink both]

Graphs fold the attention sink (position 0's features into "sink" nodes: GraphSettings.fold_sink);
each model is measured with the sink kept as nodes (before #55) and folded (after), one row each
(--sink kept / folded: only one; --no-default: SmolLM2 only). Per graph: the kept features (pruned at 0.8 / 0.98) and the
share of them at position 0, and on the fact prompt how many kept features at " capital" and at
" France" reach the target through kept edges.

For the bundled model and SmolLM2, a graph of a `--tokens`-token prompt with the transcoder set in
assets/transcoders/<model> when it exists, else a random set of the same size (exactness and cost
do not depend on training; the scores and faithfulness do, so they are printed only for a trained
set): seconds (median of --repeats after a warm-up; the trace is included, loading is not) and
CPU seconds (on a shared machine the wall clock also counts the others' load), and the peak
resident memory the graph added (ru_maxrss after minus the resident size before).
Then, for each example prompt (a fact, an indirect object, an induction repeat, three stories) and
each held-out prompt (the first 16 tokens of every 46th "Once upon" story of TinyStories'
validation file, which no transcoder saw; --corpus): the replacement and completeness scores and
the Spearman correlation between the graph's predicted and the real model's measured effect of
switching off each of its 10 most influential features (predicted "direct", "total" and
"first_order": tfm.analysis.graph.edit.predicted_change), and of the 10 with the largest edge into
the target ("first_order"), and their means.
Targets: 16 tokens ≤ 3 s on the bundled model, ≤ 30 s on SmolLM2 (2 cores); Spearman ≥ 0.6 on the
bundled model with its trained transcoders.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import tfm  # noqa: E402
import write_docs  # noqa: E402
from tfm.analysis.graph.build import GraphSettings, attribution_graph  # noqa: E402
from tfm.analysis.graph.edit import faithfulness  # noqa: E402
from tfm.analysis.graph.prune import prune_graph  # noqa: E402
from tfm.analysis.dictionaries.transcoder import load_transcoders, random_transcoders  # noqa: E402

PROMPTS = {
    "fact": "The capital of France is",
    "indirect object": "When Mary and John went to the store, John gave a drink to",
    "induction": "The old man said the magic word. Later the old man said the magic",
    "story 1": "Once upon a time, there was a little dog named Max. Max liked to",
    "story 2": "Lily wanted to play with her ball, but it was stuck in the tree. She asked her mom",
    "story 3": "Tom and Sue went to the park. Tom found a big red ball and gave it to",
}
MODES = ("direct", "total", "first_order")
WORDS = (" capital", " France")  # the fact prompt's words that must reach the target through kept features
SINKS = {"kept": False, "folded": True}
SINK_NAMES = {"kept": "kept (before #55)", "folded": "folded (after)"}
COLUMNS = [f"influence/{m}" for m in MODES] + ["edge/first_order"]
FILLER = "Once upon a time there was a little girl named Lily who loved to play outside in the sun"


def transcoders_for(spec: str, lm, given: str | None):
    folder = Path(given) if given else ROOT / "assets" / "transcoders" / spec
    if (folder / "card.json").is_file():
        return load_transcoders(folder, lm), True
    return random_transcoders(lm.config, 1536 if spec == "default" else 4096, 24, seed=0), False


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def bench_time(lm, ts, n_tokens: int, repeats: int, settings: GraphSettings) -> None:
    ids = (lm.tokenizer.prompt_ids(FILLER) * 4)[:n_tokens]
    before = rss_bytes()
    times, cpu = [], []
    for _ in range(repeats + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        g = attribution_graph(lm, ids, ts, settings=settings)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(
        f"  {n_tokens} tokens: {statistics.median(times[1:]):.2f} s (first {times[0]:.2f} s; "
        f"CPU {statistics.median(cpu[1:]):.2f} s over {torch.get_num_threads()} threads), "
        f"{g.n_active:,} active features, {g.n_features:,} rows, {g.n_nodes:,} nodes; "
        f"peak RSS added {max(peak, 0) / 2**20:,.0f} MB, edges {g.edges.numel() * 4 / 2**20:,.1f} MB"
    )


def reaching(g, p) -> torch.Tensor:
    """(n_nodes,) bool: nodes with a path of kept edges to the target (the target included)."""
    rows, (row, src) = g.row_nodes(), p.edge_index
    tgt = rows[row]
    reach = torch.zeros(g.n_nodes, dtype=torch.bool)
    reach[g.target_index] = True
    while True:
        grown = reach.clone()
        grown[src[reach[tgt]]] = True
        if bool((grown == reach).all()):
            return reach
        reach = grown


def word_reach(lm, g, p) -> str:
    """Kept features at each of WORDS' positions that reach the target through kept edges."""
    reach, feats = reaching(g, p), g.features
    kept = p.nodes[: g.n_features] & reach[: g.n_features]
    out = []
    for word in WORDS:
        at = [i for i, t in enumerate(g.ids) if lm.tokenizer.decode([t]) == word]
        out.append(f"`{word.strip()}` {int((kept & torch.isin(feats[:, 1], torch.tensor(at))).sum())}")
    return ", ".join(out)


def graph_row(lm, ts, ids, settings: GraphSettings) -> tuple[list, list[float], str, str]:
    """The table's cells for one graph, its Spearmans, the word reach ("" but on the fact prompt)
    and the printed line."""
    g = attribution_graph(lm, ids, ts, settings=settings)
    p = prune_graph(g)
    r = [faithfulness(lm, ids, ts, g, p.influence, 10, m).spearman for m in MODES]
    r.append(faithfulness(lm, ids, ts, g, g.edges[-1].abs(), 10, "first_order").spearman)
    kept = p.nodes[: g.n_features]
    n_kept, at_sink = int(kept.sum()), int((kept & (g.features[:, 1] == 0)).sum())
    sink = f"{at_sink} ({100 * at_sink / max(n_kept, 1):.0f}%)"
    target = lm.tokenizer.decode([g.target.token])
    reach = word_reach(lm, g, p) if all(w in lm.tokenizer.decode(list(ids)) for w in WORDS) else ""
    cells = [f"`{target}` {g.prob:.2f}", n_kept, sink, f"{p.replacement:.3f}", f"{p.completeness:.3f}"]
    line = (
        f"-> {target!r} p={g.prob:.2f}: kept {n_kept} features ({sink} at position 0){'; ' + reach if reach else ''}; "
        f"replacement {p.replacement:.3f}, completeness {p.completeness:.3f}; Spearman "
        + ", ".join(f"{c} {v:+.2f}" for c, v in zip(COLUMNS, r))
    )
    return cells, r, reach, line


def bench_scores(lm, ts, sink: str, prompts: dict[str, str], group: str) -> tuple[list[list], list[str]]:
    """Per prompt a table row (group, sink, prompt, target, kept, at sink, scores, Spearmans), then
    the mean and lowest rows; and the fact prompt's word reach."""
    rows, rhos, reaches = [], [], []
    for name, text in prompts.items():
        cells, r, reach, line = graph_row(lm, ts, lm.tokenizer.prompt_ids(text), GraphSettings(fold_sink=SINKS[sink]))
        print(f"  {sink} {name[-40:]!r:42s} {line}")
        rhos.append(r)
        rows.append([group, sink, f"`{name[-40:]}`", *cells, *(f"{v:+.2f}" for v in r)])
        reaches += [f"sink {sink}, {name}: {reach}"] if reach else []
    for how, f in (("mean", statistics.mean), ("lowest", min)):
        vals = [f(r[i] for r in rhos) for i in range(len(COLUMNS))]
        print(f"  {sink} {how} Spearman: " + ", ".join(f"{n} {v:+.2f}" for n, v in zip(COLUMNS, vals)))
        rows.append([group, sink, f"**{how}**", "", "", "", "", "", *(f"**{v:+.2f}**" for v in vals)])
    return rows, reaches


def held_out(lm, corpus: Path, n: int) -> dict[str, str]:
    """The first 16 tokens of every 46th "Once upon" story of TinyStories' validation file."""
    stories = [s for s in (corpus / "tinystories_valid.txt").read_text().split("\n\n") if s.startswith("Once upon")]
    texts = [lm.tokenizer.decode(lm.tokenizer.prompt_ids(" ".join(s.split()))[:16]) for s in stories[::46][:n]]
    return {t: t for t in texts}


def score_table(lm, ts, spec: str, sinks: list[str], args) -> str:
    """The example and held-out prompts' rows, each sink setting in turn, as one Markdown table."""
    rows, reaches = [], []
    prompts = {"example": PROMPTS, "held out": held_out(lm, args.corpus, args.held_out) if args.held_out else {}}
    for group, texts in prompts.items():
        for sink in sinks:
            if texts:
                print(f" {group} prompts, sink {sink}:")
                found = bench_scores(lm, ts, sink, texts, group)
                rows += found[0]
                reaches += found[1]
    head = [
        "prompts",
        "sink",
        "prompt",
        "target, p",
        "kept features",
        "at position 0",
        "replacement",
        "completeness",
        *COLUMNS,
    ]
    return (
        f"{spec}, transcoders `{ts.identity}`; sink {' and '.join(SINK_NAMES[s] for s in sinks)}; kept features at "
        "0.8 / 0.98; Spearman of predicted vs measured effects of switching off 10 features one at a time:\n\n"
        + write_docs.markdown(head, rows)
        + "\n\nKept features at the fact prompt's words that reach the target "
        "through kept edges: " + "; ".join(reaches) + "."
    )


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-smollm2", action="store_true")
    ap.add_argument(
        "--no-default", action="store_true", help="SmolLM2 only (the bundled model's rows stay as they were)"
    )
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--held-out", type=int, default=12, help="how many held-out story prompts (0: none)")
    ap.add_argument(
        "--sink",
        choices=("both", *SINKS),
        default="both",
        help="position 0's features kept as nodes (before #55), folded into sink nodes, or both",
    )
    ap.add_argument("--transcoders", help="the bundled model's transcoder folder (default: assets/transcoders/default)")
    write_docs.add_flag(ap, "bench_graph")
    args = ap.parse_args()
    write_docs.check(args)
    return args


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    tables = []
    print(f"torch threads: {torch.get_num_threads()}")
    for spec in ([] if args.no_default else ["default"]) + ([] if args.no_smollm2 else ["smollm2"]):
        lm = tfm.load(spec)
        ts, trained = transcoders_for(spec, lm, args.transcoders if spec == "default" else None)
        print(
            f"{spec}: transcoders {ts.identity} ({ts.cfg.n_features} features, k={ts.cfg.k}, "
            f"{'trained' if trained else 'random: scores not meaningful'})"
        )
        sinks = list(SINKS) if args.sink == "both" else [args.sink]
        bench_time(lm, ts, args.tokens, args.repeats if spec == "default" else 1, GraphSettings())
        if trained:
            tables.append(score_table(lm, ts, spec, sinks, args))
    write_docs.publish(args, tables, f"{torch.get_num_threads()} torch thread(s)")


if __name__ == "__main__":
    main()
