"""Toy tasks: data, training to the accuracy bar, learned alignment, save/load as zip."""

from __future__ import annotations

import io
import json
import time
import zipfile

import pytest
import torch

from tfm.teach import toy


@pytest.mark.parametrize(
    "task, src, want",
    [
        ("reverse", [1, 2, 3, 4], [4, 3, 2, 1]),
        ("sort", [3, 1, 4, 1, 5], [1, 1, 3, 4, 5]),
        ("copy", [9, 0, 9], [9, 0, 9]),
        ("shift", [1, 2, 3, 4, 5], [3, 4, 5, 1, 2]),
        ("shift", [7], [7]),
    ],
)
def test_targets(task, src, want):
    assert toy.target_of(task, src) == want


def test_batches_pad_and_frame_with_bos_eos():
    spec = toy.ToySpec("reverse", 2, 5)
    b = toy.make_batch(spec, [[1, 2, 3], [4, 5, 6, 7, 8]])
    assert b.src.tolist() == [[4, 5, 6, 0, 0], [7, 8, 9, 10, 11]]
    assert b.src_pad.tolist() == [[False, False, False, True, True], [False] * 5]
    assert b.tgt_in[0].tolist() == [toy.BOS, 6, 5, 4, 0, 0]
    assert b.tgt_out[0].tolist() == [6, 5, 4, toy.EOS, 0, 0]
    assert toy.decode_text(b.tgt_out[1].tolist()) == "87654"
    with pytest.raises(ValueError, match="does not fit"):
        toy.make_batch(spec, [[1] * 6])
    with pytest.raises(ValueError, match="digits 0-9"):
        toy.encode_digits("12a")
    with pytest.raises(ValueError, match="unknown task"):
        toy.ToySpec("rotate")


def test_random_batches_are_reproducible_and_vary_in_length():
    spec = toy.ToySpec("sort")
    a = toy.random_batch(spec, 200, torch.Generator().manual_seed(5))
    b = toy.random_batch(spec, 200, torch.Generator().manual_seed(5))
    assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
    lengths = (~a.src_pad).sum(1)
    assert int(lengths.min()) == spec.min_len and int(lengths.max()) == spec.max_len
    for row in range(20):  # every target row is the sorted source
        digits = [t - toy.FIRST_DIGIT for t in a.src[row].tolist() if t != toy.PAD]
        assert toy.decode_text(a.tgt_out[row].tolist()) == "".join(map(str, sorted(digits)))


@pytest.mark.slow  # a whole training run: CI only
def test_reversal_trains_to_the_bar_with_an_antidiagonal_alignment():
    """The page's model and settings: 300 steps of batch 64 (about 10 s of CPU)."""
    spec = toy.ToySpec("reverse")
    start = time.process_time()
    result = toy.train(spec, 300, seed=0, snapshot_every=100)
    acc = toy.exact_match(result.model, spec, n=500)
    print(
        f"reversal: 300 steps in {result.seconds:.1f} s wall, {time.process_time() - start:.1f} s CPU, exact match {acc:.3f}"
    )
    assert acc >= 0.95
    assert len(result.losses) == 300 and result.losses[-1] < 0.1 < result.losses[0]
    assert [s.step for s in result.snapshots] == [0, 100, 200, 300]
    probe = toy.probe_batch(spec)
    n = int((~probe.src_pad[0]).sum())
    last = result.snapshots[-1].cross[-1, :, :n, :n]  # last decoder layer (H, n, n)
    anti = last.flip(-1).diagonal(dim1=-2, dim2=-1).mean(-1)  # mass on source n-1-i per head
    first = result.snapshots[0].cross[-1, :, :n, :n].flip(-1).diagonal(dim1=-2, dim2=-1).mean(-1)
    assert float(anti.max()) > 0.5 > float(first.max())  # learned, not there at step 0
    assert torch.all(result.snapshots[-1].cross[:, :, :, n:] == 0)  # padded source columns


def test_training_is_reproducible_and_restores_threads():
    threads = torch.get_num_threads()
    a = toy.train(toy.ToySpec("copy"), 5, seed=3)
    b = toy.train(toy.ToySpec("copy"), 5, seed=3)
    assert a.losses == b.losses
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="steps"):
        toy.train(toy.ToySpec("copy"), 0)


def test_answer_trace_rows_are_the_steps_that_wrote_each_token():
    spec = toy.ToySpec("copy")
    model = toy.train(spec, 3, seed=0).model
    batch = toy.make_batch(spec, [[4, 2, 7]])
    answer, written, trace = toy.answer_trace(model, batch)
    assert answer == toy.decode_text(written)
    with torch.no_grad():
        fed = torch.tensor([[toy.BOS] + written[:-1]])
        logits = model(batch.src, fed, batch.src_pad).logits[0]
    assert logits.argmax(-1).tolist() == written  # row i wrote written[i]
    assert trace["dec.blocks.0.cross.pattern"].shape[-2] == len(written)


def test_zip_round_trip_and_errors(tmp_path):
    spec = toy.ToySpec("shift", 3, 7)
    model = toy.train(spec, 2, seed=0).model
    data = toy.to_zip(model, spec)
    loaded, spec2 = toy.from_zip(data)
    assert spec2 == spec
    batch = toy.make_batch(spec, [[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(batch.src, batch.tgt_in, batch.src_pad).logits, model(batch.src, batch.tgt_in, batch.src_pad).logits
        )
    toy.save_folder(tmp_path / "f", model, spec)
    assert toy.load_folder(tmp_path / "f")[1] == spec
    with pytest.raises(ValueError, match="not a saved toy model"):
        toy.from_zip(b"not a zip")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("config.json", json.dumps({"format": "tfm-encdec"}))
    with pytest.raises(ValueError, match="lacks"):
        toy.from_zip(buf.getvalue())
