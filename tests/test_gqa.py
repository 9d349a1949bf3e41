"""Grouped-query and multi-query attention at every query head, against Hugging Face.

The bug these guard: the trace holds k and v per KEY/VALUE head (B, Hkv, T, hd), and the Tour
indexed them with a QUERY head: on SmolLM2 (9 query heads, 3 key/value heads) heads 3-8 crashed
and heads 1-2 showed another head's keys. Query head h reads key/value head h // (H / Hkv)
(Hugging Face's `repeat_kv`). Every per-head number a page shows is compared here, at heads past
the key/value heads, with what `transformers` computes on the same weights (tests/hf_heads.py):
random Llama folders with 9 query heads over 3 key/value heads and over 1 (multi-query), and
SmolLM2-135M-Instruct's own GGUF file."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tfm
from tests.hf_heads import hf_heads
from tfm.analysis import attribution, heads, patching, positions
from tfm.analysis.attention_rows import pattern_rows
from tfm.core import edits as E
from tfm.core.config import ModelConfig
from tfm.core.functional import expand_kv
from tfm.core.trace_read import head_qkv, kv_per_query_head
from tfm.teach.tour import SHOW, Focus, key_window, tour
from tfm.viz import notebook

transformers = pytest.importorskip("transformers")
from transformers.models.llama.modeling_llama import repeat_kv  # noqa: E402

from tests.test_families import hf_model, save, write_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = {
    "gqa-9-3": dict(num_attention_heads=9, num_key_value_heads=3),
    "mqa-9-1": dict(num_attention_heads=9, num_key_value_heads=1),
}
PROMPT_IDS = [5, 71, 200, 33, 71, 200, 9, 140, 71, 200, 33, 17, 250, 71]


def kv_of(h: int, n_head: int, n_kv: int) -> int:
    """Hugging Face's rule, written out: repeat_kv repeats each key/value head for n_head / n_kv
    consecutive query heads."""
    return h // (n_head // n_kv)


@pytest.fixture(scope="module", params=sorted(SHAPES))
def family(request, tmp_path_factory):
    """A random HF Llama with 9 query heads (d_head 8) over 3 or 1 key/value heads, and tfm's load
    of its folder; HF's per-head numbers on PROMPT_IDS."""
    hf = hf_model("llama-gqa", hidden_size=72, **SHAPES[request.param])
    vocab = write_tokenizer(tmp_path_factory.mktemp("tok"))
    lm = tfm.load(save(hf, tmp_path_factory.mktemp(request.param), vocab), device="cpu")
    idx = torch.tensor([PROMPT_IDS])
    assert (lm.config.n_head, lm.config.n_kv_head) == (9, SHAPES[request.param]["num_key_value_heads"])
    return lm, hf, idx, hf_heads(hf, idx)


# ---- the one mapping ------------------------------------------------------------------------


@pytest.mark.parametrize("n_head,n_kv", [(9, 3), (9, 1), (14, 2), (4, 4), (6, 2)])
def test_kv_head_and_query_heads_are_hugging_faces_repeat_kv(n_head, n_kv):
    cfg = ModelConfig.preset("tiny", d_model=2 * n_head * 2, n_head=n_head, n_kv_head=n_kv)
    labels = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1)  # kv head g holds g
    read = repeat_kv(labels, n_head // n_kv)[0, :, 0, 0].long().tolist()  # (H,): kv head of each
    assert [cfg.kv_head(h) for h in range(n_head)] == read
    for g in range(n_kv):
        assert list(cfg.query_heads(g)) == [h for h in range(n_head) if read[h] == g]
    x = torch.randn(2, n_kv, 5, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(expand_kv(x, n_head // n_kv), repeat_kv(x, n_head // n_kv), rtol=0, atol=0)
    torch.testing.assert_close(expand_kv(x[1], n_head // n_kv), repeat_kv(x, n_head // n_kv)[1], rtol=0, atol=0)
    for bad, call in ((n_head, cfg.kv_head), (-1, cfg.kv_head), (n_kv, cfg.query_heads)):
        with pytest.raises(ValueError, match="out of range"):
            call(bad)


def test_kv_sharing_names_the_heads_that_share():
    cfg = ModelConfig.preset("smollm2-135m")
    assert cfg.kv_sharing(6) == "key/value head 2, shared by query heads 6, 7, 8"
    assert cfg.kv_sharing(0) == "key/value head 0, shared by query heads 0, 1, 2"
    assert (
        ModelConfig.preset("smollm2-135m", n_kv_head=1).kv_sharing(8)
        == "the model's one key/value head, shared by all 9 query heads"
    )
    assert ModelConfig.preset("gpt2").kv_sharing(11) == ""


# ---- trace accessors ------------------------------------------------------------------------


def test_trace_reads_give_each_query_head_the_keys_and_values_it_attends_with(family):
    lm, hf, idx, want = family
    cfg = lm.config
    for lazy in (True, False):
        tr = lm.model(idx, trace=True, lazy=lazy).trace
        for layer in range(cfg.n_layer):
            w = want[layer]
            assert tr[f"blocks.{layer}.attn.k"].shape[1] == cfg.n_kv_head  # stored per key/value head
            torch.testing.assert_close(kv_per_query_head(tr, "k", layer, cfg.n_head), w["k"], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(kv_per_query_head(tr, "v", layer, cfg.n_head), w["v"], atol=1e-5, rtol=1e-5)
            for h in range(cfg.n_head):
                q, k, v = head_qkv(tr, cfg, layer, h)
                torch.testing.assert_close(q, w["q"][h], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(k, w["k_kv"][kv_of(h, 9, cfg.n_kv_head)], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(v, w["v"][h], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="choose 'k' or 'v'"):
        kv_per_query_head(tr, "q", 0, cfg.n_head)


# ---- the Tour -------------------------------------------------------------------------------


def assert_tour_equals_hf(lm, tr, ids, w, p: int, layer: int, h: int, atol: float) -> None:
    """The Tour's attention steps for (p, layer, h) show HF's numbers for query head h."""
    steps = {s.key: s for s in tour(lm, tr, ids, [f"t{i}" for i in range(len(ids))], Focus(p, layer, h))}
    close = lambda got, want, what: np.testing.assert_allclose(  # noqa: E731
        got.values.numpy(), want.double().numpy(), rtol=1e-4, atol=atol, err_msg=f"L{layer} H{h} {what}"
    )
    shown = steps["qkv"].tensors
    for n in "qkv":
        close(shown[n], w[n][h, p, :SHOW], n)
    raw = w["k"][h, : p + 1] @ w["q"][h, p]  # (p+1,) HF's q . k_j
    win = key_window(p)
    close(steps["scores"].tensors["q · k_j"], raw[win], "q . k")
    close(steps["scores"].tensors["s_j"], raw[win] / math.sqrt(lm.config.d_head), "scores")
    close(steps["softmax"].tensors["a_j"], w["pattern"][h, p, win], "pattern row")
    close(steps["softmax"].chart, w["pattern"][h, p, : p + 1], "whole pattern row")
    close(steps["weighted"].tensors["z"], w["z"][h, p, :SHOW], "z")
    cfg = lm.config
    if cfg.n_kv_head < cfg.n_head:
        g = kv_of(h, cfg.n_head, cfg.n_kv_head)
        sharing = [x for x in range(cfg.n_head) if kv_of(x, cfg.n_head, cfg.n_kv_head) == g]
        words = (
            f"key/value head {g}, shared by query heads {', '.join(map(str, sharing))}"
            if cfg.n_kv_head > 1
            else f"one key/value head, shared by all {cfg.n_head} query heads"
        )
        for key in ("qkv", "scores", "weighted"):
            assert words in steps[key].text, (key, steps[key].text)
        assert rf"\lfloor {h} / {cfg.n_head // cfg.n_kv_head} \rfloor = {g}" in steps["qkv"].formula_latex


def test_tour_at_a_query_head_past_the_kv_heads_on_grouped_query_model(family):
    """Every query head of every layer, at the last position and one in the middle: the heads past
    the key/value heads crashed (IndexError), those below them showed another head's keys."""
    lm, hf, idx, want = family
    tr = lm.model(idx, trace=True).trace
    for layer in range(lm.config.n_layer):
        for h in range(lm.config.n_head):
            for p in (len(PROMPT_IDS) - 1, 6):
                assert_tour_equals_hf(lm, tr, PROMPT_IDS, want[layer], p, layer, h, atol=1e-5)


# ---- the pages' per-head analyses ----------------------------------------------------------


def test_attention_rows_and_notebook_figures_at_every_query_head(family):
    lm, hf, idx, want = family
    tr = lm.model(idx, trace=True).trace
    t = len(PROMPT_IDS)
    for layer in range(lm.config.n_layer):
        rows = pattern_rows(lm.model, tr, layer, 4, t)  # the Attention page's window
        torch.testing.assert_close(rows, want[layer]["pattern"][:, 4:], atol=1e-5, rtol=0)
        for source in (tr, tuple(w["pattern"][None] for w in want.values())):
            fig = notebook.attention_pattern(source, [f"t{i}" for i in range(t)], layer, head=7)
            z = np.asarray(fig.data[0].z, dtype=float)
            expected = want[layer]["pattern"][7].double().numpy()
            np.testing.assert_allclose(np.where(np.isnan(z), 0, z), expected, atol=1e-5)


def test_head_table_scores_equal_scores_of_hf_attentions(family):
    lm, hf, idx, want = family
    tr = lm.model(idx, trace=True).trace
    got = heads.head_scores(tr, PROMPT_IDS)
    tok = torch.tensor(PROMPT_IDS)
    same = (tok[:, None] == tok[None, :]).tril(-1).float()  # key holds the query's token
    induction = torch.zeros_like(same)
    induction[:, 1:] = same[:, :-1]  # key right after such a copy
    for layer, w in want.items():
        a = w["pattern"]  # (H, T, T), rows sum to 1
        t = a.shape[-1]
        torch.testing.assert_close(got["previous_token"][layer], a.diagonal(-1, -2, -1).sum(-1) / t, atol=1e-5, rtol=0)
        torch.testing.assert_close(got["first_token"][layer], a[..., 0].sum(-1) / t, atol=1e-5, rtol=0)
        torch.testing.assert_close(got["duplicate_token"][layer], (a * same).sum((-2, -1)) / t, atol=1e-5, rtol=0)
        torch.testing.assert_close(got["induction"][layer], (a * induction.tril()).sum((-2, -1)) / t, atol=1e-5, rtol=0)
        ent = -(a * a.clamp_min(1e-30).log()).sum(-1).mean(-1)
        torch.testing.assert_close(got["entropy"][layer], ent, atol=1e-4, rtol=0)


def final_direction(hf, idx, p: int, token: int) -> torch.Tensor:
    """d with logit(token) = x_final . d at p, the RMSNorm scale frozen: from HF's own final norm."""
    got = {}
    hook = hf.model.norm.register_forward_pre_hook(lambda m, a: got.__setitem__("x", a[0]))
    with torch.inference_mode():
        hf(idx)
    hook.remove()
    x = got["x"][0, p].double()
    rms = (x.pow(2).mean() + hf.config.rms_norm_eps).sqrt()
    return hf.model.norm.weight.double() * hf.lm_head.weight[token].double() / rms


@torch.no_grad()
def test_why_head_contributions_split_by_source_equal_hf(family):
    """Why this token?: head h's direct contribution from source s = a[h, p, s] (v_s W_O,h) . d, with
    v the values of h's key/value head; the heads past the key/value heads included."""
    lm, hf, idx, want = family
    p = len(PROMPT_IDS) - 1
    attr = attribution.direct(lm, PROMPT_IDS, position=p)
    d = final_direction(hf, idx, p, attr.token)
    hd, n_head = lm.config.d_head, lm.config.n_head
    for layer, w in want.items():
        w_o = hf.model.layers[layer].self_attn.o_proj.weight.double()  # (D, H hd)
        for h in range(n_head):
            out = w["v"][h].double() @ w_o[:, h * hd : (h + 1) * hd].T  # (T, D) what each source writes
            expected = w["pattern"][h, p].double() * (out @ d)
            torch.testing.assert_close(attr.by_source(layer, h), expected, atol=1e-6, rtol=1e-4)
    flow = attribution.flow(lm, lm.model(idx, trace=True).trace, 0, len(PROMPT_IDS))
    layer, s = 1, 8  # one edge: sum over heads of a * |v W_O,h|
    w, w_o = want[layer], hf.model.layers[layer].self_attn.o_proj.weight
    edge = sum(
        float(w["pattern"][h, p, s]) * float((w["v"][h, s] @ w_o[:, h * hd : (h + 1) * hd].T).norm())
        for h in range(n_head)
    )
    assert float(flow[layer, p, s]) == pytest.approx(edge, rel=1e-4)


def hf_logits_with_head(hf, idx, layer: int, head: int, z: torch.Tensor | None) -> torch.Tensor:
    """HF's logits with query head `head`'s output z (o_proj's input slice) zeroed or replaced."""
    hd = hf.config.hidden_size // hf.config.num_attention_heads

    def edit(m, args):
        x = args[0].clone()
        x[..., head * hd : (head + 1) * hd] = 0 if z is None else z
        return (x,)

    hook = hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(edit)
    try:
        with torch.inference_mode():
            return hf(idx).logits[0]
    finally:
        hook.remove()


def test_head_ablation_and_patching_edit_the_query_head_not_the_shared_kv(family):
    """Ablating query head 7 removes its output only: heads 6 and 8, which read the same keys
    and values, keep theirs (as zeroing head 7's slice of o_proj's input in HF)."""
    lm, hf, idx, want = family
    with torch.inference_mode():
        for layer, h in ((0, 7), (1, 4), (1, 8)):
            got = lm.model(idx, edits=[E.AblateHead(layer, h)]).logits[0]
            torch.testing.assert_close(got, hf_logits_with_head(hf, idx, layer, h, None), atol=1e-4, rtol=0)
        sweep = patching.ablation_sweep(lm, PROMPT_IDS, patching.Metric(len(PROMPT_IDS) - 1, 17))
        base = float(hf(idx).logits[0, -1, 17])
        assert sweep.base == pytest.approx(base, abs=1e-4)
        for layer, h in ((0, 5), (1, 7)):
            assert float(sweep.heads[layer, h]) == pytest.approx(
                float(hf_logits_with_head(hf, idx, layer, h, None)[-1, 17]), abs=1e-4
            )
        corrupt = torch.tensor([[9] + PROMPT_IDS[1:]])
        clean_z = lm.model(idx, trace=True).trace["blocks.1.attn.z"][0]
        got = lm.model(corrupt, edits=[E.Patch("blocks.1.attn.z", clean_z, head=7)]).logits[0]
    torch.testing.assert_close(got, hf_logits_with_head(hf, corrupt, 1, 7, want[1]["z"][7]), atol=1e-4, rtol=0)


def test_positions_page_block0_attention_equals_hf_layer0(family):
    """The Positional encodings page's shuffle check runs block 0's own attention: with shared
    key/value heads it equals HF's layer-0 self-attention, causal (from HF's forward) or bare."""
    lm, hf, idx, want = family
    att = hf.model.layers[0].self_attn
    got = {}
    hook = att.register_forward_hook(lambda m, a, kw, out: got.__setitem__("out", out[0]), with_kwargs=True)
    rot = hf.model.rotary_emb.register_forward_hook(lambda m, a, out: got.__setitem__("cos_sin", out))
    with torch.inference_mode():
        hf(idx)
        hook.remove()
        rot.remove()
        x = lm.model.tok_emb(idx)
        _, angles = lm.model.positions(0, idx.shape[1])
        causal = positions.block0_attention(lm.model, x, angles, causal=True)
        bare = positions.block0_attention(lm.model, x, angles, causal=False)
        bare_hf, _ = att(hf.model.layers[0].input_layernorm(hf.model.embed_tokens(idx)), got["cos_sin"], None)
    torch.testing.assert_close(causal, got["out"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bare, bare_hf, atol=1e-5, rtol=1e-5)
    check = positions.permutation_check(lm.model, PROMPT_IDS)
    assert check.full_without < 1e-4 * check.scale < check.full_with  # no positions: shuffling is invisible


def test_quant_head_comparison_at_a_query_head_past_the_kv_heads(tmp_path):
    """Quantization page: `compare(..., layer, head)` shows query head 7's pattern of an 8-head,
    2-key/value-head GGUF file, equal to HF's on the same file (and the re-quantized copy's)."""
    from tests.gguf_files import write_model
    from tests.test_gguf import hf_model as hf_gguf
    from tfm.analysis.quant import requantize as quant

    path = write_model(tmp_path / "gqa-q8_0.gguf", qtype="Q8_0", n_head=8, n_kv=2, seed=4)
    lm = tfm.load(path, device="cpu")
    assert (lm.config.n_head, lm.config.n_kv_head) == (8, 2)
    ids = [3, 77, 150, 9, 77, 150, 40, 77]
    effect = quant.compare(lm, quant.requantize(lm, "Q4_0"), ids, layer=1, head=7)
    with torch.inference_mode():
        want = hf_gguf(path)(torch.tensor([ids]), output_attentions=True).attentions[1][0, 7]
    np.testing.assert_allclose(effect.pattern_original, want.numpy(), atol=1e-5)
    assert not np.allclose(effect.pattern_requantized, effect.pattern_original, atol=1e-4)


# ---- SmolLM2 itself: the model the bug was found on (transformers' copy: tests/conftest.smollm2_hf) ----
@pytest.fixture(scope="module")
def smollm2(smollm2_hf):
    lm, hf = tfm.load("smollm2", device="cpu"), smollm2_hf
    ids = lm.tokenizer.prompt_ids("The cat sat on the mat. The cat sat on the")
    idx = torch.tensor([ids])
    return lm, ids, lm.model(idx, trace=True).trace, hf_heads(hf, idx)


@pytest.mark.xdist_group("smollm2_hf")  # with tests/test_gguf.py's: one worker makes the oracle
@pytest.mark.parametrize("layer", [0, 14, 29])
def test_smollm2_tour_at_head_6_equals_transformers_on_the_same_gguf(smollm2, layer):
    lm, ids, tr, want = smollm2
    assert (lm.config.n_head, lm.config.n_kv_head) == (9, 3)
    assert_tour_equals_hf(lm, tr, ids, want[layer], len(ids) - 1, layer, 6, atol=2e-4)


@pytest.mark.xdist_group("smollm2_hf")
def test_smollm2_tour_at_every_head_of_the_last_layer_equals_transformers(smollm2):
    lm, ids, tr, want = smollm2
    for h in range(9):
        assert_tour_equals_hf(lm, tr, ids, want[29], len(ids) - 1, 29, h, atol=2e-4)
