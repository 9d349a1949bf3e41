"""Many sessions at once: each sees its own prompt's numbers, the same seed gives the same text
whatever else runs, and no more heavy computations run at once than the server allows."""

from __future__ import annotations

import dataclasses

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import tfm
from ui import cache, heavy, models
from services import server
from ui.heavy import Gate

from tests.app.conftest import allow_models, open_page

PROMPTS = [
    f"Student {i} writes about {w} and the {w} again."
    for i, w in enumerate(["rivers", "cats", "numbers", "storms", "bread", "maps"])
]


def generate_ids(lm, text: str, seed: int) -> list[int]:
    with heavy.slot("generation", quiet=True):  # as the page runs it: through the server's gate
        return [s.token_id for s in tfm.generate(lm, text, 16, temperature=1.0, seed=seed)]


def test_the_same_seed_gives_the_same_text_whatever_else_runs():
    """Streamlit's AppTest swaps process-wide globals on every run (Runtime._instance, the pages
    flag), so it cannot run sessions in parallel: sessions are threads calling what pages call,
    on the shared cached model (bench/bench_load.py drives the real server)."""
    lm = models.load_lm(models.default_model_spec(), "cpu")
    alone = generate_ids(lm, PROMPTS[0], 7)
    jobs = [(PROMPTS[0], 7)] * 3 + [(p, i) for i, p in enumerate(PROMPTS[1:5])]
    with ThreadPoolExecutor(len(jobs)) as pool:
        texts = list(pool.map(lambda job: generate_ids(lm, *job), jobs))
    assert texts[0] == texts[1] == texts[2] == alone and len(alone) >= 1
    for (text, seed), got in zip(jobs[3:], texts[3:]):
        assert got == generate_ids(lm, text, seed) and got != alone


def test_sessions_at_once_each_get_their_own_prompts_trace():
    spec = models.default_model_spec()
    lm = models.load_lm(spec, "cpu")
    ids = [tuple(lm.tokenizer.encode(p)) for p in PROMPTS] * 2  # each prompt twice: one compute, one hit
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: cache.run_traced(spec, "cpu", i), ids))
    assert len({id(o) for o in outs}) == len(PROMPTS)  # computed once per prompt, then shared
    for i, out in zip(ids, outs):
        with torch.inference_mode():
            ref = lm.model(torch.tensor([i]), trace=True)
        torch.testing.assert_close(out["logits"], ref.logits)
        torch.testing.assert_close(out.pattern(1), ref.trace.pattern(1))


def test_the_gate_runs_at_most_its_slots_at_once():
    gate, lock, now, peak = Gate(2), threading.Lock(), [0], [0]

    def job(_):
        with gate.hold("a test job", quiet=True):
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            with gate.hold("nested: shares the slot", quiet=True):
                time.sleep(0.05)
            with lock:
                now[0] -= 1

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(job, range(12)))
    assert peak[0] == 2 and now[0] == 0 and not gate.running


def test_the_server_gate_follows_the_settings():
    s = server.settings()
    server.configure(dataclasses.replace(s, limits=s.limits.replace(heavy_slots=3)))
    assert heavy.gate().slots == 3


def test_a_page_from_cached_work_is_not_blocked_while_every_slot_is_busy():
    """One session's long heavy job holds the only slot: another session's page whose trace is
    cached still renders; a new prompt's trace waits for the slot, then renders."""
    allow_models(heavy_slots=1)
    open_page("attention", PROMPTS[0])  # warms the trace and derived numbers
    held, release = threading.Event(), threading.Event()

    def long_job():
        with heavy.slot("someone's long generation", quiet=True):
            held.set()
            release.wait(60)

    job = threading.Thread(target=long_job)
    job.start()
    try:
        assert held.wait(10)
        at = open_page("attention", PROMPTS[0], timeout=30)  # raises on timeout if it waited for the slot
        assert not at.exception and not at.error
        timer = threading.Timer(1.0, release.set)
        timer.start()
        start = time.perf_counter()
        at.text_area(key="sidebar.prompt").set_value(PROMPTS[1]).run()  # a new trace: needs the slot
        assert not at.exception, at.exception
        assert time.perf_counter() - start >= 0.9  # it waited for the long job to end
    finally:
        release.set()
        job.join()
