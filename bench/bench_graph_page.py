"""The Attribution graph page at its extremes (issue #51): both threshold sliders at 1.0 on SmolLM2's
default prompt and on the bundled model at 64 tokens. Prints a table; no asserts.

    nice -n 10 .venv/bin/python bench/bench_graph_page.py [--no-smollm2] [--write-docs]

For each model, in this process (the server's, as AppTest runs the page in it):
- the page opened at its defaults (0.8 / 0.98), then both sliders moved to 1.0: the second run's
  wall time, the peak resident memory above the RSS before it (a thread reads /proc every 10 ms),
  and the retained RSS after it (what the app's cache and the heap keep), the edges the view keeps
  and the bytes the cache counts for the pruned view and its file;
- leaving the page while it works: what the page calls (the graph, the view at 1.0 / 1.0 and its
  file, each with `should_stop`) runs in a thread; `should_stop` turns true 1 s into each stage;
  CPU seconds the process spends from then until the thread has stopped (before issue #51's fix
  the pruning and file building went on for 75-90 s).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TFM_DEFAULT_MODEL", "default")

import write_docs  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import tfm  # noqa: E402
from tfm.analysis.graph import view as graph_view  # noqa: E402
from tfm.analysis.graph.build import GraphSettings, Target, attribution_graph  # noqa: E402
from tfm.analysis.graph.files import graph_file  # noqa: E402
from tfm.analysis.graph.prune import prune_graph  # noqa: E402
from tfm.analysis.dictionaries.transcoder import load_transcoders  # noqa: E402
from tfm.core.cancel import Cancelled  # noqa: E402
from tfm.text.token_view import token_labels  # noqa: E402
from ui import sidebar  # noqa: E402
from ui.models import PROMPTS  # noqa: E402

LONG = "Once upon a time there was a little girl named Lily who loved to play outside in the sun. " * 6
SETTINGS = GraphSettings(max_tokens=64)  # the page's


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


class Peak:
    def __enter__(self):
        self.start = self.peak = rss()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.01):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def prompt_for(spec: str, lm) -> str:
    """SmolLM2: the sidebar's default prompt; the bundled model: the first 64 tokens of LONG."""
    if spec == "smollm2":
        return sidebar.DEFAULT_PROMPT
    return lm.tokenizer.decode(lm.tokenizer.prompt_ids(LONG)[:64])


def page_at_extremes(spec: str, prompt: str) -> dict:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=1800)
    at.query_params.update({"prompt": prompt, "model": spec})
    at.switch_page("pages/attribution_graph.py").run()
    assert not at.exception, [e.message for e in at.exception]
    gc.collect()
    before = rss()
    at.slider(key="graph.node_threshold").set_value(1.0)
    at.slider(key="graph.edge_threshold").set_value(1.0)
    start = time.perf_counter()
    with Peak() as peak:
        at.run()
    wall = time.perf_counter() - start
    assert not at.exception, [e.message for e in at.exception]
    gc.collect()
    held = {
        k[3]: n
        for k, n in PROMPTS.sizes().items()  # what the cache counts for the 1.0 / 1.0 view
        if k[0] == "derived" and k[3] in ("graph.pruned", "graph.file") and k[-2:] == (1.0, 1.0)
    }
    notes = [i.value for i in at.info if "keeps the strongest" in i.value]
    return {"wall": wall, "peak": peak.peak - before, "retained": rss() - before, "held": held, "capped": bool(notes)}


def after_leaving(spec: str, lm, ts, ids) -> dict:
    """CPU seconds spent after `should_stop` turns true 1 s into each stage of what the page runs."""
    out = {}
    g = attribution_graph(lm, ids, ts, Target(), SETTINGS)
    p = prune_graph(g, 1.0, 1.0)
    labels = token_labels(lm.tokenizer, ids)
    stages = {
        "graph": lambda stop: attribution_graph(lm, ids, ts, Target(), SETTINGS, should_stop=stop),
        "prune 1.0/1.0": lambda stop: prune_graph(g, 1.0, 1.0, should_stop=stop),
        "file": lambda stop: graph_file(p, labels, lm.config, ts, should_stop=stop),
    }
    for name, work in stages.items():
        left = threading.Event()
        done = {}

        def run():
            try:
                work(left.is_set)
                done["finished"] = True
            except Cancelled:
                done["stopped"] = True

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(1.0)
        cpu0 = time.process_time()
        left.set()
        worker.join()
        out[name] = (time.process_time() - cpu0, "stopped" if "stopped" in done else "had finished")
    return out


def page_row(spec: str, n_tokens: int, page: dict) -> list:
    """One model's table row: the run's wall time, memory in MB, the cache's counts, capped or not."""
    mb = lambda n: f"{n / 2**20:,.0f}"  # noqa: E731
    return [
        spec,
        n_tokens,
        f"{page['wall']:.1f}",
        mb(page["peak"]),
        mb(page["retained"]),
        " / ".join(f"{k} {mb(v)}" for k, v in sorted(page["held"].items())) or "?",
        "yes" if page["capped"] else "no",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-smollm2", action="store_true")
    write_docs.add_flag(ap, "bench_graph_page")
    args = ap.parse_args()
    write_docs.check(args)
    rows, leave_rows = [], []
    for spec in ("default",) + (() if args.no_smollm2 else ("smollm2",)):
        lm = tfm.load(spec)
        ts = load_transcoders(graph_view.shipped_folder(spec), lm)
        prompt = prompt_for(spec, lm)
        ids = lm.tokenizer.prompt_ids(prompt)
        rows.append(page_row(spec, len(ids), page_at_extremes(spec, prompt)))
        print(rows[-1], flush=True)
        for stage, (cpu, how) in after_leaving(spec, lm, ts, ids).items():
            leave_rows.append([spec, stage, f"{cpu:.2f}", how])
            print(leave_rows[-1], flush=True)
        PROMPTS.clear()
    tables = [
        write_docs.markdown(
            [
                "model",
                "tokens",
                "1.0/1.0 run (s)",
                "peak RSS added (MB)",
                "retained RSS (MB)",
                "cache counts (MB)",
                "edges capped",
            ],
            rows,
        ),
        write_docs.markdown(["model", "left 1 s into", "CPU s after leaving", "then"], leave_rows),
    ]
    print("\n\n".join(tables))
    write_docs.publish(args, tables)


if __name__ == "__main__":
    main()
