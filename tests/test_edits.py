"""tfm.core.edits and tfm.analysis.patching: every intervention equals a manual recomputation on a deep copy
of the model, the shared model is never changed (also with 8 threads editing at once),
batched sweeps equal sequential single-edit forwards, patching identities hold, and on the
bundled model ablating its induction head hurts copying far more than a control head."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import tfm
from tfm.core import edits as E
from tfm.core.cancel import Cancelled
from tfm.analysis import patching

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 17, 200, 5, 99, 17, 200, 41, 7, 3]])


def _logits(model, edits=None, ids=IDS):
    with torch.no_grad():
        return model(ids, edits=edits).logits


@pytest.fixture
def model(make_model):
    return make_model("tiny", n_layer=3, n_head=4, d_model=16)


def test_zero_head_equals_zeroed_w_o_slice(model):
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.blocks[1].attn.proj.weight[:, 2 * 4 : 3 * 4] = 0  # head 2's slice of W_O (hd = 4)
    assert torch.allclose(_logits(model, [E.AblateHead(1, 2)]), _logits(ref), atol=1e-5)
    assert not torch.allclose(_logits(model), _logits(ref), atol=1e-3)


def test_mlp_and_neuron_ablation_equal_zeroed_weights(model):
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.blocks[2].mlp.proj.weight.zero_()
        ref.blocks[2].mlp.proj.bias.zero_()
    assert torch.allclose(_logits(model, [E.AblateMLP(2)]), _logits(ref), atol=1e-5)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.blocks[0].mlp.proj.weight[:, [1, 5, 9]] = 0
    assert torch.allclose(_logits(model, [E.AblateNeurons(0, (1, 5, 9))]), _logits(ref), atol=1e-5)


def test_mean_ablation(model):
    tr = model(IDS, trace=True).trace
    z = tr["blocks.0.attn.z"][0, 3]  # (T, hd)
    ref = copy.deepcopy(model)
    with torch.no_grad():  # a constant head output = its mean z through W_O, folded into the bias
        w = ref.blocks[0].attn.proj.weight
        ref.blocks[0].attn.proj.bias += w[:, 12:16] @ z.mean(0)
        w[:, 12:16] = 0
    assert torch.allclose(_logits(model, [E.AblateHead(0, 3, "mean")]), _logits(ref), atol=1e-5)
    means, mlp_means = E.head_means(model, torch.randint(0, 200, (4, 10), generator=torch.Generator().manual_seed(1)))
    with torch.no_grad():
        ref = copy.deepcopy(model)
        w = ref.blocks[0].attn.proj.weight
        ref.blocks[0].attn.proj.bias += w[:, 12:16] @ means[0, 3]
        w[:, 12:16] = 0
    assert torch.allclose(_logits(model, [E.AblateHead(0, 3, "mean", means[0, 3])]), _logits(ref), atol=1e-5)
    assert mlp_means.shape == (3, 16)


def test_patching_identities(model, make_model):
    tr = model(IDS, trace=True).trace
    self_patch = [
        E.Patch(f"blocks.{l}.{p}", tr[f"blocks.{l}.{p}"][0])
        for l in range(3)
        for p in ("attn.z", "mlp.post", "attn_out", "mlp_out", "resid_pre")
    ]
    # the traced run uses the explicit attention path, the plain one the fused kernel: equal to rounding
    assert torch.allclose(_logits(model, self_patch), _logits(model), atol=1e-5)
    other = torch.tensor([[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]])
    restored = _logits(model, [E.Patch("blocks.0.resid_pre", tr["blocks.0.resid_pre"][0])], other)
    assert torch.equal(restored, _logits(model))  # everything patched: the clean run
    part = _logits(model, [E.Patch("blocks.0.resid_pre", tr["blocks.0.resid_pre"][0], positions=(0, 1))], other)
    assert not torch.allclose(part, _logits(model), atol=1e-3)


def test_rows_and_validation(model):
    both = _logits(model, [E.AblateHead(1, 1, row=1)], IDS.expand(2, -1))
    assert torch.equal(both[0], _logits(model)[0])
    assert torch.allclose(both[1], _logits(model, [E.AblateHead(1, 1)])[0], atol=1e-5)
    for bad, msg in [
        (E.AblateHead(3, 0), "layer 3"),
        (E.AblateHead(0, 4), "head 4"),
        (E.AblateHead(0, 0, row=1), "row"),
        (E.AblateNeurons(0, (32,)), "neurons"),
        (E.Patch("blocks.0.resid_pre", torch.zeros(9, 16)), "shape"),
    ]:
        with pytest.raises(ValueError, match=msg):
            _logits(model, [bad])
    with pytest.raises(ValueError, match="cannot patch"):
        E.Patch("blocks.0.attn.pattern", torch.zeros(1))
    with pytest.raises(ValueError, match="zero"):
        E.AblateHead(0, 0, "half")


def test_threads_do_not_interfere_and_model_is_unchanged(model):
    before = copy.deepcopy(model.state_dict())
    jobs = [[E.AblateHead(i % 3, i % 4)] if i % 2 else [E.AblateNeurons(i % 3, (i, i + 1))] for i in range(8)]
    expect = [_logits(model, j) for j in jobs]
    results, errors = [None] * 8, []

    def work(i):
        try:
            for _ in range(20):
                results[i] = _logits(model, jobs[i])
                assert torch.equal(results[i], expect[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert torch.equal(_logits(model), _logits(copy.deepcopy(model)))


def test_batched_sweep_equals_sequential(model):
    metric = patching.Metric(9, 5, 7)
    for budget in (patching.BUDGET_BYTES, 1):  # one batch, and one row per chunk
        sweep = patching.ablation_sweep(model, IDS, metric, budget_bytes=budget)
        for l in range(3):
            for h in range(4):
                one = float(metric(_logits(model, [E.AblateHead(l, h)])[:, 9]))
                assert float(sweep.heads[l, h]) == pytest.approx(one, abs=1e-4)
            assert float(sweep.mlps[l]) == pytest.approx(
                float(metric(_logits(model, [E.AblateMLP(l)])[:, 9])), abs=1e-4
            )
        assert sweep.base == pytest.approx(float(metric(_logits(model)[:, 9])), abs=1e-5)
    assert patching.row_bytes(tfm.ModelConfig.preset("gpt2"), 64) == 4 * (
        64 * (8 * 768 + 2 * 3072 + 2 * 12 * 64) + 50257
    )


def test_patch_prompts(model):
    clean, corrupt = IDS[0].tolist(), [9, 8, 7, 6, 5, 4, 3, 2, 1, 3]  # the same last token
    metric = patching.Metric(9, 5, 7)
    res = patching.patch_prompts(model, clean, corrupt, metric)
    assert res.clean == pytest.approx(float(metric(_logits(model)[:, 9])), abs=1e-5)
    assert res.corrupt == pytest.approx(float(metric(_logits(model, ids=torch.tensor([corrupt]))[:, 9])), abs=1e-5)
    assert abs(float(res.resid[0, 9])) < 1e-4  # same token, same position: nothing to patch
    assert res.resid[0, :9].abs().max() > 1e-2
    tr = model(IDS, trace=True).trace
    one = float(
        metric(
            _logits(model, [E.Patch("blocks.2.attn.z", tr["blocks.2.attn.z"][0], head=1)], torch.tensor([corrupt]))[
                :, 9
            ]
        )
    )
    assert float(res.heads[2, 1]) == pytest.approx((one - res.corrupt) / (res.clean - res.corrupt), abs=1e-4)
    lm = tfm.random_model("tiny")
    with pytest.raises(ValueError, match=r"10 tokens \[.*\], the corrupted one 9 \["):
        patching.patch_prompts(lm, clean, corrupt[:-1], metric)


def test_induction_check_holds_a_chunk_of_logit_rows_and_equals_the_full_logits(monkeypatch):
    """Gemma 3's 262,144-token vocabulary: the probe's forward unembeds its last row only and the three
    losses read the second copy's logits a chunk at a time (3 rows here; the old code held all 80
    positions' logits), equal to cross-entropy on the model's full logits."""
    from tests.logit_rows import WidestLogits
    from tfm.core import encoder

    from tfm.analysis.heads import induction_probe
    from tfm.core.config import ModelConfig

    lm = tfm.random_model(ModelConfig.preset("tiny", context_length=128), seed=2)
    monkeypatch.setattr(encoder, "LOGIT_CHUNK_BYTES", 3 * 4 * lm.config.vocab_size)
    patching.induction_check(lm, seq_len=40, seed=0)  # (tfm.core.kernels times a new product shape on 8 rows, once)
    with WidestLogits(lm.config.vocab_size) as seen:
        check = patching.induction_check(lm, seq_len=40, seed=0)
    assert 1 <= seen.rows <= 3
    toks = induction_probe(lm.model, 40, 0)["tokens"][None]
    for edit, loss in zip(
        ([], [E.AblateHead(check.layer, check.head)], [E.AblateHead(check.layer, check.control)]),
        (check.loss_clean, check.loss_ablated, check.loss_control),
    ):
        with torch.no_grad():
            logits = lm.model(toks, edits=edit).logits[0, 39:-1]
        assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, toks[0, 40:])), rel=1e-5)


def test_induction_ablation_hurts_copying_on_the_bundled_model():
    lm = tfm.load("default")
    check = patching.induction_check(lm, seq_len=40, seed=0)
    assert check.control != check.head
    hurt, control = check.loss_ablated - check.loss_clean, check.loss_control - check.loss_clean
    print(
        f"induction head L{check.layer}H{check.head}: repeat-half loss {check.loss_clean:.3f} -> "
        f"{check.loss_ablated:.3f}; control H{check.control}: {check.loss_control:.3f}"
    )
    assert hurt > 0.5 and hurt > 5 * max(control, 0.05)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False),
        dict(norm_placement="post", pos_encoding="sinusoidal"),
    ],
)
def test_rows_starting_mid_model_equal_full_forwards(make_model, overrides):
    """run_rows starts each row at its first edited layer: same numbers as whole forwards."""
    model = make_model("tiny", n_layer=3, n_head=4, d_model=16, **overrides)
    tr = model(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]), trace=True).trace
    rows = [
        [],
        [E.AblateHead(2, 1)],
        [E.AblateNeurons(1, (3,)), E.AblateHead(2, 0)],
        [E.Patch("blocks.1.resid_pre", tr["blocks.1.resid_pre"][0], positions=(4,))],
        [E.AblateMLP(0, "mean")],
    ]
    for budget in (1, patching.BUDGET_BYTES):  # one row per batch; every row joining one batch at its layer
        got = patching.run_rows(model, IDS, rows, position=6, budget_bytes=budget)
        for r, edits in enumerate(rows):
            assert torch.allclose(got[r], _logits(model, edits)[0, 6], atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, n_kv_head=2),
        dict(norm_placement="post", pos_encoding="sinusoidal"),
        dict(parallel_block=True),
    ],
)
@pytest.mark.parametrize("position", [9, 5])
def test_resid_patching_on_later_positions_equals_whole_patched_forwards(make_model, overrides, position):
    """patch_resid runs positions p.. on the corrupted run's keys and values; every (layer,
    position) equals a whole forward of the corrupted ids with that one patch, in any chunking."""
    model = make_model("tiny", n_layer=3, n_head=4, d_model=16, **overrides)
    corrupt = torch.tensor([[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]])
    tr = model(IDS, trace=True).trace
    clean = [tr[f"blocks.{l}.resid_pre"][0] for l in range(3)]
    metric = patching.Metric(position, 5, 7)
    want = torch.tensor(
        [
            [
                float(
                    metric(
                        _logits(model, [E.Patch(f"blocks.{l}.resid_pre", clean[l], positions=(p,))], corrupt)[
                            :, position
                        ]
                    )
                )
                for p in range(10)
            ]
            for l in range(3)
        ],
        dtype=torch.float64,
    )
    for budget in (patching.BUDGET_BYTES, 1):  # all layers in one batch; one row per batch
        got = patching.patch_resid(model, clean, corrupt, metric, budget)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert got[:, : position + 1].abs().max() > 0 and torch.all(got[:, position + 1 :] == got[0, -1])


def test_sweeps_stop_when_nobody_waits(model):
    """A page that left stops the minutes-long sweeps between batches (tfm.core.cancel)."""
    asked = []

    def after(n):  # says stop at its n-th question: the sweep asked, then stopped
        return lambda: asked.append(1) or len(asked) >= n

    metric = patching.Metric(9, 5, 7)
    for run in (
        lambda stop: patching.patch_prompts(
            model, IDS[0].tolist(), [9, 8, 7, 6, 5, 4, 3, 2, 1, 3], metric, budget_bytes=1, should_stop=stop
        ),
        lambda stop: patching.ablation_sweep(model, IDS, metric, budget_bytes=1, should_stop=stop),
    ):
        asked.clear()
        with pytest.raises(Cancelled):
            run(after(3))
        assert len(asked) == 3
