"""Today's families: tfm vs Hugging Face on a SmolLM2-135M-shaped Llama (random weights, CPU).

    .venv/bin/python bench/bench_families.py [--threads 2] [--runs 7] [--tokens 128] [--new-tokens 64] [--no-generate]

1. Every attention pattern: tfm's eager trace, a lazy trace with keep=("pattern",) (the patterns
   stored in the main pass, the fastest way to all of them) and a lazy trace read block by block,
   vs HF `output_attentions=True` (eager attention, HF's way to get attentions); values checked.
2. `tfm.generate` (greedy, KV cache) vs HF `generate(do_sample=False)`.
The tfm model is converted from the HF model's own state dict by tfm/convert/llama.py, so both
run identical weights. Figures and ratios from this one run only; nothing asserts on time.
Targets: keep=("pattern",) and generate ratios >= 1.0x (the eager trace row is shown too). On a
CPU, tfm's float32 products go through oneDNN (tfm.core.kernels); the "torch's BLAS" row runs the same
code with the products HF uses, to show what that choice is worth on the machine at hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import fmt, timed  # noqa: E402
from bench_generate import best_of, hf_greedy, machine, numbered_tokenizer, tfm_greedy  # noqa: E402

from tfm import LM
from tfm.core import kernels  # noqa: E402
from tfm.loaders.convert import common, llama  # noqa: E402

SMOLLM2 = dict(
    vocab_size=49152,
    hidden_size=576,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    intermediate_size=1536,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
)


def smollm2_pair(seed: int = 0):
    """A random HF LlamaForCausalLM of SmolLM2-135M's shape and the same weights in tfm."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    hf = LlamaForCausalLM(LlamaConfig(**SMOLLM2, attn_implementation="eager")).eval()
    hf.generation_config.eos_token_id = None  # never stop early
    hf.generation_config.pad_token_id = 0
    kwargs, _ = llama.fields(hf.config.to_dict(), "HF LlamaConfig")
    cfg = common.make_config("HF LlamaConfig", **kwargs)
    weights = common.Weights(hf.state_dict(), "HF state dict", lambda key: llama.ignore(cfg, key))
    state = llama.convert(weights, cfg)
    weights.finish()
    tok = numbered_tokenizer(cfg.vocab_size)
    model = common.build(cfg, state, tok, "HF state dict", "float32").eval()
    return hf, LM(model, tok, cfg, torch.device("cpu"), "bench:smollm2-random", {})


def traced_forward(hf, lm, tokens: int, runs: int) -> None:
    print(
        f"\n## 1. Traced forward with every attention pattern vs HF output_attentions=True "
        f"({hf.config._attn_implementation}), {tokens} tokens"
    )
    print(
        "Each row is the whole path from token ids to all layers' patterns (B, H, T, T) in hand, plus the logits.\n"
        "HF keeps only the patterns; tfm's eager trace records every entry (q, k, v, scores, pattern, z, residuals,\n"
        "norm statistics, MLP activations); keep=('pattern',) stores only the patterns (and each block's input) in\n"
        "the same explicit forward; the lazy trace recomputes each block when its pattern is read."
    )
    idx = torch.randint(0, lm.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    model, n = lm.model, lm.config.n_layer

    def blas(fn):  # tfm's own code with the products HF uses (see tfm.core.kernels)
        with kernels.using_cpu_product("blas"):
            return fn()

    def patterns(**kw):
        out = model(idx, trace=True, **kw)
        return out.logits, [out.trace.pattern(i) for i in range(n)]  # n x (H, T, T)

    fns = {
        "tfm eager trace, every entry  ": lambda: patterns(lazy=False),
        "tfm keep=('pattern',)         ": lambda: patterns(keep=("pattern",)),
        "  same, torch's BLAS products ": lambda: blas(lambda: patterns(keep=("pattern",))),
        "HF forward, output_attentions ": lambda: hf(idx, output_attentions=True),
        "tfm lazy trace, read patterns ": lambda: patterns(),
        "tfm forward, no trace         ": lambda: model(idx),
    }
    with torch.no_grad():
        print_differences(fns, list(fns)[:3] + list(fns)[4:5], hf(idx, output_attentions=True))
        times = timed(fns, runs, 1)
    print_ratios(times, list(fns)[3], list(fns)[:3] + list(fns)[4:5])


def print_differences(fns: dict, traced: list[str], want) -> None:
    """Each traced way's largest pattern and logits differences from HF's output."""
    for name in traced:
        logits, pats = fns[name]()
        diff = max(float((p - a[0]).abs().max()) for p, a in zip(pats, want.attentions))
        print(
            f"{name.strip()}: max |pattern diff| vs HF {diff:.1e}, max |logits diff| "
            f"{float((logits - want.logits).abs().max()):.1e}"
        )


def print_ratios(times: dict, hf_name: str, traced: list[str]) -> None:
    """Every way's times, then HF's median and minimum over each traced way's."""
    print()
    for name, ts in times.items():
        print(f"{name} {fmt(ts)}")
    for name in traced:
        print(
            f"ratio HF / {name.strip():28s} {statistics.median(times[hf_name]) / statistics.median(times[name]):.2f}x "
            f"of medians, {min(times[hf_name]) / min(times[name]):.2f}x of minimums"
            + ("   (target >= 1.0x)" if "keep" in name else "")
        )


def generation(hf, lm, n: int, repeats: int) -> None:
    hf.set_attn_implementation("sdpa")  # HF's fastest attention for decoding
    print(
        f"\n## 2. tfm.generate (KV cache, {lm.config.n_kv_head} KV heads) vs HF generate "
        f"({hf.config._attn_implementation}), greedy, prompt 16 tokens, {n} new tokens"
    )
    prompt = torch.randint(0, lm.config.vocab_size - 1, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    tfm_greedy(lm, prompt, 4), hf_greedy(hf, prompt, 4)  # warm-up

    def tfm_blas():
        with kernels.using_cpu_product("blas"):
            return tfm_greedy(lm, prompt, n)

    best, outs = best_of(
        repeats,
        {"tfm": lambda: tfm_greedy(lm, prompt, n), "hf": lambda: hf_greedy(hf, prompt, n), "tfm, BLAS": tfm_blas},
    )
    print(f"tfm.generate   {n / best['tfm']:7.1f} tokens/s  ({best['tfm']:.2f} s)")
    print(f"  same, BLAS   {n / best['tfm, BLAS']:7.1f} tokens/s  ({best['tfm, BLAS']:.2f} s)")
    print(f"HF generate    {n / best['hf']:7.1f} tokens/s  ({best['hf']:.2f} s)")
    print(f"ratio tfm / HF {best['hf'] / best['tfm']:7.2f}x   (target >= 1.0x)")
    print(f"greedy tokens match HF: {[s.token_id for s in outs['tfm']] == outs['hf']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=7, help="timed rounds of the forward comparison")
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds of the generation comparison")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--no-generate", action="store_true", help="only the traced forward comparison")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    print(f"# tfm families benchmark\n{machine()}, transformers {transformers.__version__}")
    hf, lm = smollm2_pair()
    print(
        f"SmolLM2-135M shape: {lm.model.num_params() / 1e6:.1f}M parameters, {lm.config.n_head} query heads, "
        f"{lm.config.n_kv_head} KV heads, random weights shared with the HF model"
    )
    traced_forward(hf, lm, args.tokens, args.runs)
    if not args.no_generate:
        generation(hf, lm, args.new_tokens, args.repeats)


if __name__ == "__main__":
    main()
