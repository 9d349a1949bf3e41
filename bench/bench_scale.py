"""Real sizes: GPT-2-small shape (random weights, CPU) at 128, 512 and 1024 tokens in the app,
against Hugging Face and TransformerLens on the same weights. Prints figures and ratios
measured in this run; asserts nothing on time.

    .venv/bin/python bench/bench_scale.py [--lengths 128 512 1024] [--prompts 30] [--budget 4GB] [--no-peers]
        [--write-docs[=NAME]]

`--model smollm2 --lengths 2048` times the real model's 2048-token first Attention page (issue #24).
Rows (targets from issue #13):
- new prompt -> rendered Attention page (server time through AppTest) / plain untraced forward
  of the same ids: <= 1.5x at 1024;
- bytes the app's cache holds for that prompt after every page was opened once: <= 300 MB at 1024;
- a layer or a head change on the Attention page at 1024 tokens: < 150 ms;
- process RSS after `--prompts` different 1024-token prompts in a row (budget `--budget`), and
  that the page still renders;
- peers: HF GPT2LMHeadModel(output_attentions, output_hidden_states) and TransformerLens's
  `run_with_cache`: time, time / their plain forward, bytes and count of returned tensors.
Each time is the median of `--repeats` runs unless it says "once".
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import torch  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import write_docs  # noqa: E402
from tfm.loaders.weights import rename_gpt2_key  # noqa: E402
from services import memory  # noqa: E402
from ui import models  # noqa: E402

PAGES = ("attention", "positions", "norms", "shapes", "logit_lens", "next_token", "generate", "tokens", "home")
CORPUS = Path("/work/shared/corpus/tinystories_train.txt")
MB = 1e6


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def prompt_text(lm, n_tokens: int, tag: int) -> tuple[str, tuple[int, ...]]:
    """Corpus text of about n_tokens tokens, a different stretch per `tag`; the ids the app keeps."""
    words = CORPUS.read_text(encoding="utf-8", errors="replace").split()
    span = max(1500, n_tokens)  # a word is at least one token
    start = (tag * span) % (len(words) - span)
    chunk = words[start : start + span]
    ids = lm.tokenizer.encode(" ".join(chunk))[:n_tokens]
    text = lm.tokenizer.decode(ids)
    return text, tuple(lm.tokenizer.encode(text)[-lm.config.context_length :])


def app_on(model: str) -> tuple[AppTest, str]:
    """The app on GPT-2 small's shape (random weights) or the real SmolLM2-135M."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    at.run()
    if model == "smollm2":
        at.radio(key="sidebar.model_kind").set_value("smollm2").run()
    else:
        at.radio(key="sidebar.model_kind").set_value("random").run()
        at.selectbox(key="sidebar.preset").set_value("gpt2").run()
    assert not at.exception, at.exception
    return at, at.session_state["app.model_spec"]


def run_page(at: AppTest) -> float:
    t0 = time.perf_counter()
    at.run()
    took = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"page failed: {at.exception}")
    return took


def plain_forward(lm, ids, repeats: int) -> float:
    x = torch.tensor([ids])
    with torch.inference_mode():
        return median_time(lambda: lm.model(x), repeats)


def prompt_bytes(ids) -> int:
    """Bytes of every cached value made for this prompt (its trace and derived numbers)."""
    return sum(size for key, size in models.PROMPTS.sizes().items() if ids in key)


def app_rows(at, lm, lengths, repeats) -> dict:
    out = {}
    for n in lengths:
        text, ids = prompt_text(lm, n, tag=n)
        at.switch_page("pages/attention.py")
        at.text_area(key="sidebar.prompt").set_value(text)
        page = run_page(at)  # once: a second run would find the trace cached
        fwd = plain_forward(lm, ids, repeats)
        out[n] = {"tokens": len(ids), "page": page, "forward": fwd}
        print(
            f"{len(ids):5d} tokens: new prompt -> Attention page {page:6.2f} s (once); plain forward "
            f"{fwd:5.2f} s; ratio {page / fwd:5.2f}x (target <= 1.5x at 1024)",
            flush=True,
        )
    return out


def every_page(at, ids) -> None:
    times = {}
    for page in PAGES:
        at.switch_page(f"pages/{page}.py")
        times[page] = run_page(at)
    print("every page once at", len(ids), "tokens (s): " + ", ".join(f"{p} {t:.2f}" for p, t in times.items()))
    print(
        f"cache bytes for this prompt after every page: {prompt_bytes(ids) / MB:.0f} MB (target <= 300 MB); "
        f"whole cache {models.PROMPTS.nbytes / MB:.0f} MB, models {models.MODELS.nbytes / MB:.0f} MB",
        flush=True,
    )


def widget_changes(at, repeats) -> None:
    at.switch_page("pages/attention.py")
    run_page(at)
    layers = [median_time(lambda v=v: at.select_slider(key="attn.layer").set_value(v).run(), 1) for v in (5, 6, 7)]
    heads = [median_time(lambda v=v: at.select_slider(key="attn.head").set_value(v).run(), 1) for v in (3, 4, 5)]
    assert not at.exception, at.exception
    print(
        f"layer change {statistics.median(layers) * 1000:.0f} ms, head change {statistics.median(heads) * 1000:.0f} ms "
        "(median of 3; target < 150 ms)",
        flush=True,
    )


def many_prompts(at, lm, count: int) -> None:
    proc = psutil.Process()
    at.switch_page("pages/attention.py")
    t0 = time.perf_counter()
    for tag in range(count):
        text, _ = prompt_text(lm, 1024, tag=100 + tag)
        at.text_area(key="sidebar.prompt").set_value(text)
        run_page(at)
    took = time.perf_counter() - t0
    at.select_slider(key="attn.layer").set_value(2)
    still = run_page(at)
    budget = memory.memory_budget()
    print(
        f"after {count} different 1024-token prompts ({took:.0f} s): RSS {proc.memory_info().rss / MB:.0f} MB, "
        f"cache {models.PROMPTS.nbytes / MB:.0f} MB + models {models.MODELS.nbytes / MB:.0f} MB, budget "
        f"{budget / MB:.0f} MB; still serving (layer change {still * 1000:.0f} ms)",
        flush=True,
    )


def hf_copy(lm, folder: Path):
    """A Hugging Face GPT2LMHeadModel holding exactly the tfm model's weights, saved to `folder`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = lm.config
    cfg = GPT2Config(
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.d_model,
        n_positions=c.context_length,
        vocab_size=c.vocab_size,
        attn_implementation="eager",
    )
    hf = GPT2LMHeadModel(cfg).eval()
    ours = dict(lm.model.state_dict())
    with torch.no_grad():
        for key, p in hf.state_dict().items():
            name, transposed = rename_gpt2_key(key, conv1d=True)
            if name is not None:
                p.copy_(ours[name].t() if transposed else ours[name])
    hf.save_pretrained(folder)
    return hf


def tensor_stats(obj) -> tuple[int, int]:
    """(bytes, count) of the tensors in nested tuples/lists/dicts/model outputs."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size(), 1
    items = obj.values() if hasattr(obj, "values") else obj if isinstance(obj, (list, tuple)) else []
    pairs = [tensor_stats(v) for v in items]
    return sum(b for b, _ in pairs), sum(n for _, n in pairs)


def peer_rows(lm, lengths, repeats) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hf = hf_copy(lm, Path(tmp))
        for n in lengths:
            x = torch.tensor([prompt_text(lm, n, tag=n)[1]])
            with torch.inference_mode():
                ours = lm.model(x).logits
                diff = float((hf(x).logits - ours).abs().max())
                plain = median_time(lambda: hf(x), repeats)
                full = median_time(lambda: hf(x, output_attentions=True, output_hidden_states=True), repeats)
                out = hf(x, output_attentions=True, output_hidden_states=True)
            size, count = tensor_stats(dict(out))
            del out
            print(
                f"{x.shape[1]:5d} tokens: HF with attentions+hidden {full:5.2f} s ({full / plain:4.2f}x its plain "
                f"{plain:5.2f} s), {size / MB:6.0f} MB in {count} tensors; |logits - tfm| max {diff:.1e}",
                flush=True,
            )
        hf = None  # free it before TransformerLens loads its own copy
        tl_rows(tmp, lm, lengths, repeats)


def tl_rows(folder: str, lm, lengths, repeats) -> None:
    if importlib.util.find_spec("transformer_lens") is None:  # a peer, not a requirement of tfm
        print("TransformerLens is not installed here (pip install transformer-lens): its rows are left out", flush=True)
        return
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(folder, device="cpu")
    for n in lengths:
        x = torch.tensor([prompt_text(lm, n, tag=n)[1]])
        with torch.inference_mode():
            plain = median_time(lambda: bridge(x), repeats)
            cached = median_time(lambda: bridge.run_with_cache(x), repeats)
            _, cache = bridge.run_with_cache(x)
        size, count = tensor_stats(dict(cache.items()))
        del cache
        print(
            f"{x.shape[1]:5d} tokens: TransformerLens run_with_cache {cached:5.2f} s ({cached / plain:4.2f}x its "
            f"plain {plain:5.2f} s), {size / MB:6.0f} MB in {count} tensors",
            flush=True,
        )


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    ap.add_argument("--prompts", type=int, default=30, help="different 1024-token prompts in a row (0: skip)")
    ap.add_argument("--budget", default="4GB", help="TFM_MEMORY_BUDGET for this run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the app's server runs with 1 here)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument(
        "--model",
        choices=("gpt2", "smollm2"),
        default="gpt2",
        help="smollm2: the real SmolLM2-135M (e.g. --lengths 2048 --prompts 0 --no-peers)",
    )
    write_docs.add_flag(ap, "bench_scale")
    args = ap.parse_args()
    write_docs.check(args)
    return args


def main() -> None:
    args = arguments()
    os.environ[memory.BUDGET_ENV] = args.budget
    torch.set_num_threads(args.threads)
    at, spec = app_on(args.model)
    lm = models.load_lm(spec, "cpu")
    print(
        f"{'SmolLM2-135M' if args.model == 'smollm2' else 'GPT-2-small shape, random weights'}, CPU, "
        f"{args.threads} torch thread(s), budget {args.budget}; model {lm.model.num_params() / 1e6:.0f}M parameters",
        flush=True,
    )
    pages = app_rows(at, lm, args.lengths, args.repeats)
    write_docs.publish(
        args,
        [
            write_docs.markdown(
                ["tokens", "new prompt -> Attention page (once)", "plain forward", "ratio"],
                [
                    [r["tokens"], f"{r['page']:.2f} s", f"{r['forward']:.2f} s", f"{r['page'] / r['forward']:.2f}x"]
                    for r in pages.values()
                ],
            )
        ],
        f"model {args.model}, {args.threads} torch thread(s)",
    )
    longest = prompt_text(lm, max(args.lengths), tag=max(args.lengths))[1]
    widget_changes(at, args.repeats)
    every_page(at, longest)
    if args.prompts:
        many_prompts(at, lm, args.prompts)
    if not args.no_peers:
        peer_rows(lm, args.lengths, args.repeats)


if __name__ == "__main__":
    main()
