"""Steering and SAE features: what they cost. Prints figures and ratios; asserts nothing.

    .venv/bin/python bench/bench_steer.py [--repeats 3] [--tokens 64] [--real]

- Features page, first render at 256 tokens: AppTest runs of the page with a prompt never seen
  before (its trace not cached), wall time and the page thread's CPU time (bench_app.py says
  why both); target < 1 s.
- Steered generation per token against plain generation, same prompt, seed and settings,
  alternating the two so a busy neighbour slows both alike (best of --repeats); target <= 5%
  more. --real adds SmolLM2-135M (tfm.load("smollm2")).
- The Steer page's calibration (`steer_calibrate.calibrate`, once per model): wall seconds and
  what it chose; target well under a minute on SmolLM2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import tfm  # noqa: E402
from bench_app import SCRIPT_CPU, measure_script_threads, prompt_of  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from tfm.analysis.steering import calibrate as steer_calibrate, vectors as steering  # noqa: E402
from ui import models  # noqa: E402


def features_page(repeats: int) -> None:
    measure_script_threads()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/features.py").run()
    lm = models.load_lm("default", "cpu")
    walls, cpus = [], []
    for tag in range(repeats):
        text, n = prompt_of(256, 1000 + tag, lm)
        at.text_area(key="sidebar.prompt").set_value(text)
        SCRIPT_CPU.clear()
        t0 = time.perf_counter()
        at.run()
        walls.append(time.perf_counter() - t0)
        cpus.append(sum(SCRIPT_CPU))
        assert not at.exception, at.exception
    print(
        f"Features page, new {n}-token prompt: wall median {statistics.median(walls) * 1000:.0f} ms, "
        f"page thread CPU median {statistics.median(cpus) * 1000:.0f} ms (target < 1000 ms)"
    )


def per_token(lm, prompt: str, n: int, edits) -> float:
    t0 = time.perf_counter()
    steps = list(tfm.generate(lm, prompt, n, temperature=0.0, stop_at_eot=False, edits=edits))
    return (time.perf_counter() - t0) / len(steps)


def generation(name: str, lm, tokens: int, repeats: int) -> None:
    prompt = "Once upon a time there was a little girl who"
    vec = steering.pair_vector(lm, " happy", " sad", lm.config.n_layer // 2)
    edits = [vec.edit(0.5, start=1)]
    per_token(lm, prompt, 4, edits)  # warm-up
    plain, steered = [], []
    for _ in range(repeats):
        plain.append(per_token(lm, prompt, tokens, ()))
        steered.append(per_token(lm, prompt, tokens, edits))
    p, s = min(plain), min(steered)
    print(
        f"{name}: plain {p * 1000:.2f} ms/token, steered {s * 1000:.2f} ms/token, "
        f"steered/plain {s / p:.3f} (target <= 1.05; best of {repeats}, {tokens} tokens, greedy)"
    )


def calibration(name: str, lm) -> None:
    t0 = time.perf_counter()
    cal = steer_calibrate.calibrate(lm)
    print(
        f"{name}: calibration {time.perf_counter() - t0:.1f} s (target < 60 s): {cal.prompt!r}, layer {cal.layer}, "
        f"strength {cal.strength:g}, moves both moods fluently: {cal.moves}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--real", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    features_page(a.repeats)
    for name, spec in (("bundled model", "default"), ("SmolLM2-135M", "smollm2"))[: 2 if a.real else 1]:
        lm = tfm.load(spec, device="cpu")
        generation(name, lm, a.tokens, a.repeats)
        calibration(name, lm)


if __name__ == "__main__":
    main()
