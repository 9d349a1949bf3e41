"""Attribution graphs beyond exactness: the features' slopes rank the real model's ablations on
held-out prompts (the trained bundled set), and a graph file tells the app's caches its bytes."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis.graph.build import attribution_graph
from tfm.analysis.graph.files import graph_file
from tfm.analysis.graph.prune import prune_graph
from tfm.text.token_view import token_labels

from tests.test_graph import bundled  # noqa: F401 (the module's fixture: the bundled model and a graph)

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # faithfulness measured: CI only


@torch.no_grad()
def test_first_order_ranks_real_ablations_on_held_out_prompts():
    """With the bundled model's trained transcoders, on two story openings of TinyStories'
    validation text (bench_graph's held-out rule), the slopes rank the real effects of switching
    off each of the 10 most influential features at Spearman >= 0.6 on average (bench_graph measures
    the rest); the edges alone (frozen norm scales) do not reach it on every prompt."""
    from tfm.analysis.graph.edit import faithfulness
    from tfm.analysis.dictionaries.transcoder import load_transcoders

    lm = tfm.load("default")
    ts = load_transcoders("assets/transcoders/default", lm)
    rhos = []
    for text in (
        "Once upon a time, there was a boy named Timmy. Timmy loved to play",
        "Once upon a time, there was a big, hot sun in the sky.",
    ):
        ids = lm.tokenizer.prompt_ids(text)
        g = attribution_graph(lm, ids, ts)
        f = faithfulness(lm, ids, ts, g, prune_graph(g).influence, 10, "first_order")
        torch.testing.assert_close(
            f.predicted,
            -(g.slopes * g.activations.double())[[int(((g.features == row).all(1)).nonzero()) for row in f.features]],
        )
        rhos.append(f.spearman)
    assert sum(rhos) / len(rhos) >= 0.6, rhos


def test_a_graph_file_reports_its_bytes_and_the_cache_counts_them(bundled):  # noqa: F811 (the fixture)
    """Its nodes and edges are ~10^5 small Python objects: nbytes bounds what tracemalloc sees them
    allocate, by at most 1.5x (shared small ints and dict keys make it an over-count), and the
    app's caches read it instead of walking them."""
    import time
    import tracemalloc

    from services.memory import sizeof

    lm, ts, ids, g = bundled
    p = prune_graph(g, 1.0, 1.0)
    tracemalloc.start()
    gf = graph_file(p, token_labels(lm.tokenizer, ids), lm.config, ts)
    allocated = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(gf.edges) > 1000 and allocated <= gf.nbytes <= 1.5 * allocated, (gf.nbytes, allocated)
    start = time.perf_counter()
    assert sizeof(gf) == gf.nbytes and sizeof({"graph": gf}) == gf.nbytes
    assert time.perf_counter() - start < 0.5  # read, not walked (walking took seconds at 1.0 / 1.0)
