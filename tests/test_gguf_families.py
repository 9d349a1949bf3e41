"""GGUF files of `gemma3`, `qwen3` and `phi3` written with `gguf`'s GGUFWriter (random weights, as
llama.cpp's converter lays them out), read by tfm and by `transformers` (`gguf_file=`, eager
attention): the same logits and every attention pattern; Gemma's window shorter than the prompt."""

from __future__ import annotations

import pytest
import torch
from gguf import GGUFValueType

import tfm
from tests.gguf_files import write_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from transformers import AutoModelForCausalLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "every_product_onednn")
D, F, L, H = 64, 96, 6, 4


def layer_shapes(arch: str, hd: int, n_kv: int) -> tuple[dict, tuple[str, ...]]:
    """(tensor shapes beyond / instead of the llama layout, tensors to leave out)."""
    shapes, skip, qd, kv = {}, [], H * hd, n_kv * hd
    for i in range(L):
        b = f"blk.{i}."
        shapes |= {
            b + "attn_q.weight": (qd, D),
            b + "attn_k.weight": (kv, D),
            b + "attn_v.weight": (kv, D),
            b + "attn_output.weight": (D, qd),
        }
        if arch in ("gemma3", "qwen3"):
            shapes |= {b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,)}
        if arch == "gemma3":
            shapes |= {b + "post_attention_norm.weight": (D,), b + "post_ffw_norm.weight": (D,)}
        if arch == "phi3":
            shapes |= {b + "attn_qkv.weight": (qd + 2 * kv, D), b + "ffn_up.weight": (2 * F, D)}
            skip += [b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight", b + "ffn_gate.weight"]
    return shapes, tuple(skip)


# arch: (head size, kv heads, extra metadata). transformers reads Gemma 3's scores scale as 256 and
# Qwen3's head size as 128 (its config defaults): the files use those.
CASES = {"gemma3": (256, 1, {"attention.sliding_window": 5}), "qwen3": (128, 2, {}), "phi3": (16, 2, {})}


def write(tmp_path, arch: str, seed: int = 0):
    hd, n_kv, extra = CASES[arch]
    shapes, skip = layer_shapes(arch, hd, n_kv)
    kv = {
        f"{arch}.attention.key_length": (hd, GGUFValueType.UINT32),
        f"{arch}.attention.value_length": (hd, GGUFValueType.UINT32),
        f"{arch}.rope.dimension_count": (hd, GGUFValueType.UINT32),
    }
    kv |= {f"{arch}.{k}": (v, GGUFValueType.UINT32) for k, v in extra.items()}
    kv["tokenizer.ggml.padding_token_id"] = (
        0,
        GGUFValueType.UINT32,
    )  # (Phi3Config's default, 32000, is past the vocabulary)
    return write_model(
        tmp_path / f"{arch}.gguf",
        arch,
        d=D,
        f=F,
        n_layer=L,
        n_head=H,
        n_kv=n_kv,
        ctx=64,
        tied=arch == "gemma3",
        seed=seed,
        extra_kv=kv,
        shapes=shapes,
        skip=skip,
    )


@pytest.mark.parametrize("arch", sorted(CASES))
def test_random_gguf_logits_and_patterns_equal_transformers(arch, tmp_path):
    path = write(tmp_path, arch)
    lm = tfm.load(path, device="cpu")
    hf = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    idx = torch.randint(0, lm.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = hf(idx, output_attentions=True)
        got = lm.model(idx, trace=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-4)
    for i, pattern in enumerate(want.attentions):
        torch.testing.assert_close(got.trace.pattern(i), pattern[0], atol=1e-5, rtol=0)
    if arch == "gemma3":
        assert lm.config.local_layers == (0, 1, 2, 3, 4) and lm.config.sliding_window == 5
        assert got.trace.pattern(0)[:, 12, :8].abs().max() == 0 < got.trace.pattern(5)[:, 12, :8].abs().max()


def test_gemma_merges_in_token_order_equal_the_sorted_scores():
    """tfm.text.gguf_tokenizer.ordered_merges (no sort) equals scores_to_merges with each token
    scored minus its index (its last index for a token listed twice), on a vocabulary of every
    string of up to three letters of 'ab▁' in a shuffled order, one token repeated."""
    import itertools
    import random

    from tfm.text.gguf_tokenizer import ordered_merges, scores_to_merges

    tokens = ["".join(p) for n in (1, 2, 3) for p in itertools.product("ab▁", repeat=n)]
    random.Random(0).shuffle(tokens)
    for listed in (tokens, tokens[:20] + ["ab"] + tokens[20:]):
        vocab = {t: i for i, t in enumerate(listed)}
        want = scores_to_merges(vocab, {t: -float(i) for t, i in vocab.items()})
        assert len(want) > 50 and ordered_merges(listed, vocab) == [list(m) for m in want]
