"""Decode speed of tfm.generate: vs Hugging Face, KV cache vs recompute, vs memory bandwidth.

    .venv/bin/python bench/bench_generate.py [--threads 2] [--repeats 2] [--bare]

Prints figures and ratios measured in this one run; asserts nothing about time. Everything
runs on the CPU with random weights (no downloads). Each timed figure is the best of
`--repeats` runs, alternating the engines so a busy neighbour slows both alike.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import write_docs  # noqa: E402
import tfm  # noqa: E402
from tfm import LM, GPT, ModelConfig  # noqa: E402
from tfm.core.kv_cache import KVCache  # noqa: E402
from tfm.text.tokenizer import Tokenizer  # noqa: E402
from tfm.loaders.weights import convert_gpt2_state, load_state_checked  # noqa: E402

PROMPT_LEN = 16


def machine() -> str:
    return f"{write_docs.cpu()} | Python {platform.python_version()}, torch {torch.__version__}, threads {torch.get_num_threads()}"


def numbered_tokenizer(vocab_size: int) -> Tokenizer:
    """A stand-in vocabulary of exactly `vocab_size` ids (bytes, "<i>" tokens, end-of-text),
    so no model row is masked as padding and decoding a piece costs what it costs."""
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({f"<{i}>".encode(): i for i in range(256, vocab_size - 1)})
    return Tokenizer(ranks, {"<|endoftext|>": vocab_size - 1}, name="numbered")


def gpt2_pair(seed: int = 0):
    """HF GPT2LMHeadModel from GPT2Config() defaults with seeded random weights, and the same
    weights in tfm (through tfm.loaders.weights.convert_gpt2_state)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    hf = GPT2LMHeadModel(GPT2Config()).eval()
    hf.generation_config.eos_token_id = None  # never stop early: always 128 new tokens
    hf.generation_config.pad_token_id = 0
    model = GPT(ModelConfig.preset("gpt2"))
    load_state_checked(model, convert_gpt2_state(hf.state_dict(), conv1d=True), "hf")
    lm = LM(
        model.eval(),
        numbered_tokenizer(model.config.vocab_size),
        model.config,
        torch.device("cpu"),
        "bench:gpt2-random",
        {},
    )
    return hf, lm


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def best_of(repeats: int, fns: dict):
    """Run each fn `repeats` times, interleaved; best time and that run's output per name."""
    best, outs = {k: float("inf") for k in fns}, {}
    for r in range(repeats):
        for name, fn in fns.items():
            t, out = timed(fn)
            if t < best[name]:
                best[name], outs[name] = t, out
            print(f"  run {r + 1}: {name} {t:.2f} s", flush=True)
    return best, outs


def step_overhead_ms(lm, repeats: int) -> tuple[float, float]:
    """Min and median time of what tfm.generate adds per step besides the forward: the
    breakdown, the greedy pick, the prob/rank numbers (on a vocabulary-sized logits vector)."""
    from tfm.generation.decode import choose as _choose
    from tfm.generation.sampling import SamplingSettings

    logits, gen, greedy = torch.randn(lm.config.vocab_size), torch.Generator(), SamplingSettings(0)
    n = lm.config.vocab_size  # the real vocabulary: no padding rows
    times = [1e3 * timed(lambda: _choose(logits, greedy, n, gen))[0] for _ in range(10 * repeats + 1)]
    return min(times), statistics.median(times)


def tfm_greedy(lm, prompt, n, use_cache=True):
    return list(tfm.generate(lm, prompt, max_new_tokens=n, temperature=0, use_cache=use_cache, stop_at_eot=False))


@torch.no_grad()
def raw_loop(lm, prompt, n):
    """The bare decode loop (forward + argmax, no Step records): what generate() adds is the rest."""
    cache = KVCache(lm.config, 1, len(prompt) + n - 1)
    tokens, idx = [], torch.tensor([prompt])
    for _ in range(n):
        tok = int(lm.model(idx, cache=cache, last_only=True).logits[0, -1].argmax())
        tokens.append(tok)
        idx = torch.tensor([[tok]])
    return tokens


@torch.no_grad()
def hf_greedy(hf, prompt, n):
    ids = torch.tensor([prompt])
    out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def vs_huggingface(hf, lm, prompt, n, repeats, bare):
    print("\n## 1. tfm.generate (KV cache) vs transformers GPT2LMHeadModel.generate")
    print(
        f"GPT-2 small shape ({lm.model.num_params() / 1e6:.1f}M parameters, random weights, seed 0), "
        f"greedy, prompt {len(prompt)} tokens, {n} new tokens, attention: {hf.config._attn_implementation}"
    )
    fns = {"tfm": lambda: tfm_greedy(lm, prompt, n), "hf": lambda: hf_greedy(hf, prompt, n)}
    if bare:
        fns["bare"] = lambda: raw_loop(lm, prompt, n)
    tfm_greedy(lm, prompt, 4), hf_greedy(hf, prompt, 4)  # warm-up
    best, outs = best_of(repeats, fns)
    ours = [s.token_id for s in outs["tfm"]]
    print(f"tfm.generate        {n / best['tfm']:7.1f} tokens/s  ({best['tfm']:.2f} s)")
    print(f"HF generate         {n / best['hf']:7.1f} tokens/s  ({best['hf']:.2f} s)")
    print(f"ratio tfm / HF      {best['hf'] / best['tfm']:7.2f}x   (target >= 1.0x, aim 1.5x)")
    if bare:
        print(f"bare tfm loop       {n / best['bare']:7.1f} tokens/s  (forward + argmax, no Step records)")
    per_step = 1e3 * statistics.median(s.step_s for s in outs["tfm"][1:])
    low, mid = step_overhead_ms(lm, repeats)
    print(
        f"Step record cost    {low:7.2f} ms/step min, {mid:.2f} median, of a {per_step:.1f} ms median decode step "
        f"(breakdown over {lm.config.vocab_size} logits + pick + prob/rank, timed alone)"
    )
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, outs["hf"])) if a != b), None)
    print(
        f"greedy tokens match HF: {ours == outs['hf']}"
        + ("" if first_diff is None else f" (first difference at new token {first_diff})")
    )
    return outs["tfm"]


def cache_vs_recompute(n, repeats):
    cfg = ModelConfig.preset("tfm-small", context_length=512)
    lm = tfm.random_model(cfg, tokenizer=numbered_tokenizer(cfg.vocab_size), seed=0)
    prompt = list(range(1000, 1000 + PROMPT_LEN))
    print(f"\n## 2. KV cache vs recomputing the prefix every step, {n} new tokens")
    print(
        f"tfm-small shape with context 512 ({lm.model.num_params() / 1e6:.1f}M parameters: GPT-2 small "
        f"recomputing 256 prefixes would take minutes on 2 shared cores), greedy, prompt {PROMPT_LEN} tokens"
    )
    tfm_greedy(lm, prompt, 4), tfm_greedy(lm, prompt, 4, use_cache=False)
    best, outs = best_of(
        repeats,
        {"cache": lambda: tfm_greedy(lm, prompt, n), "recompute": lambda: tfm_greedy(lm, prompt, n, use_cache=False)},
    )
    print(f"with KV cache       {n / best['cache']:7.1f} tokens/s  ({best['cache']:.2f} s)")
    print(f"recompute prefix    {n / best['recompute']:7.1f} tokens/s  ({best['recompute']:.2f} s)")
    print(f"ratio cache / none  {best['recompute'] / best['cache']:7.2f}x   (target >= 3x)")
    same = [s.token_id for s in outs["cache"]] == [s.token_id for s in outs["recompute"]]
    print(f"same tokens: {same}")


def bandwidth(repeats: int, mib: int = 512):
    n = mib * 2**20 // 4
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    copy = min(timed(lambda: dst.copy_(src))[0] for _ in range(repeats + 1))
    read = min(timed(lambda: src.sum())[0] for _ in range(repeats + 1))
    size = mib * 2**20
    return 2 * size / copy / 1e9, size / read / 1e9  # copy counts bytes read + written


def vs_bandwidth(lm, steps, repeats):
    copy_gbs, read_gbs = bandwidth(repeats)
    params = lm.model.num_params()
    weight_bytes = params * 4
    decode = statistics.median(s.step_s for s in steps[1:])  # steps after the prefill
    bound = weight_bytes / (copy_gbs * 1e9)
    print("\n## 3. GPT-2 small decode step vs the memory-bandwidth limit")
    print(f"copy bandwidth      {copy_gbs:7.1f} GB/s  (torch copy of a 512 MiB float32 tensor, read + write bytes)")
    print(f"read bandwidth      {read_gbs:7.1f} GB/s  (sum over the same tensor)")
    print(
        f"weights per token   {weight_bytes / 1e9:7.3f} GB    ({params:,} parameters x 4 bytes fp32, tied counted once)"
    )
    print(f"lower bound         {1e3 * bound:7.1f} ms/token  (weights / copy bandwidth)")
    print(f"measured decode     {1e3 * decode:7.1f} ms/token  (median step after the prefill, best tfm.generate run)")
    print(
        f"fraction achieved   {bound / decode:7.0%}   (of the bandwidth limit; {1e3 * weight_bytes / (read_gbs * 1e9):.1f} "
        f"ms/token with the read bandwidth: {weight_bytes / (read_gbs * 1e9) / decode:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--recompute-tokens", type=int, default=256)
    parser.add_argument("--bare", action="store_true", help="also time the bare forward+argmax loop")
    parser.add_argument("--sections", default="123", help="which sections to run, e.g. 13")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    print(f"# tfm generate benchmark\n{machine()}, transformers {transformers.__version__}")
    hf, lm = gpt2_pair()
    prompt = torch.randint(
        0, lm.config.vocab_size - 1, (PROMPT_LEN,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    steps = None
    if "1" in args.sections:
        steps = vs_huggingface(hf, lm, prompt, args.new_tokens, args.repeats, args.bare)
    del hf
    if "2" in args.sections:
        cache_vs_recompute(args.recompute_tokens, args.repeats)
    if "3" in args.sections:  # reuses section 1's decode steps, else times 32 new tokens
        vs_bandwidth(lm, steps or tfm_greedy(lm, prompt, 32), args.repeats)


if __name__ == "__main__":
    main()
