"""tfm.loaders.weights and tfm.loaders.loading: the tfm folder format round trip, clear errors that name the
file and key for every way a folder can be broken, refusal to unpickle code, random models,
device choice, and loading never touching the caller's model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tfm
from tfm.core.config import ModelConfig
from tfm.loaders.loading import bytes_tokenizer, pick_device
from tfm.text.tokenizer import Tokenizer
from tfm.loaders.weights import load_state_checked, load_tfm_folder, save_model

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


def ids(n=9, seed=0):
    return torch.randint(0, 257, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def saved(tmp_path, make_model):
    """A tiny model saved as a tfm folder: (folder, model)."""
    model = make_model("tiny")
    return save_model(tmp_path / "m", model, bytes_tokenizer(), meta={"note": "test"}), model


def rewrite_weights(folder: Path, change) -> None:
    state = load_file(str(folder / "model.safetensors"))
    change(state)
    save_file(state, str(folder / "model.safetensors"))


def rewrite_config(folder: Path, change) -> None:
    data = json.loads((folder / "config.json").read_text())
    change(data)
    (folder / "config.json").write_text(json.dumps(data))


# ---- round trip -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(tied_embeddings=False),
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, tied_embeddings=False),
        dict(pos_encoding="sinusoidal", norm_placement="post", activation="relu"),
    ],
    ids=["gpt2-like", "untied", "llama-like", "2017-like"],
)
def test_tfm_folder_round_trip(overrides, tmp_path, make_model):
    model = make_model("tiny", **overrides)
    folder = save_model(tmp_path / "m", model, bytes_tokenizer(), meta={"steps": 3})
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.tiktoken"]
    cfg_json = json.loads((folder / "config.json").read_text())
    assert cfg_json["format"] == "tfm" and cfg_json["version"] == 1 and cfg_json["meta"] == {"steps": 3}
    lm = tfm.load(folder, device="cpu")
    assert lm.config == model.config and lm.meta == {"steps": 3} and lm.source == str(folder)
    assert not lm.model.training and lm.device == torch.device("cpu")
    want, got = model.state_dict(), lm.model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    with torch.no_grad():
        assert torch.equal(lm.model(ids()).logits, model(ids()).logits)
    tied = model.config.tied_embeddings
    assert (lm.model.unembed.weight is lm.model.tok_emb.weight) == tied
    assert lm.tokenizer.encode("héllo") == bytes_tokenizer().encode("héllo") == list("héllo".encode())


def test_loading_never_mutates_or_aliases_the_callers_model(saved):
    folder, model = saved
    before = {k: v.clone() for k, v in model.state_dict().items()}
    lm1, lm2 = tfm.load(folder, device="cpu"), tfm.load(folder, device="cpu")
    with torch.no_grad():
        for p in lm1.model.parameters():
            p.add_(1.0)
    after = model.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert all(torch.equal(v, before[k]) for k, v in lm2.model.state_dict().items())
    assert not model.training  # save_model left the mode alone too
    # load_state_checked copies out of the given dict and leaves the dict itself as it was
    state = {k: v.clone() for k, v in before.items()}
    keys = list(state)
    target = tfm.GPT(model.config)
    load_state_checked(target, state, "test")
    assert list(state) == keys and "unembed.weight" in state
    with torch.no_grad():
        target.tok_emb.weight.add_(1.0)
    assert torch.equal(state["tok_emb.weight"], before["tok_emb.weight"])


# ---- broken folders: each error names the file and, where there is one, the key -----------


def test_missing_config_json(saved):
    folder, _ = saved
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match=f"^{folder.name} is not a model folder"):
        tfm.load(folder, device="cpu")
    with pytest.raises(FileNotFoundError, match="^config.json is missing") as e:  # by its name, never a server path
        load_tfm_folder(folder)
    assert str(folder) not in str(e.value)


def test_config_json_that_is_not_json(saved):
    folder, _ = saved
    (folder / "config.json").write_text('{"format": "tfm", ')
    with pytest.raises(ValueError, match=r"^config.json is not valid JSON \(.* column 19\); re-export") as e:
        tfm.load(folder, device="cpu")
    assert str(folder) not in str(e.value)
    (folder / "config.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="^config.json is not UTF-8 text \\(byte 0xff at offset 0\\)"):
        tfm.load(folder, device="cpu")


def test_unknown_or_bad_config_values_name_the_file_and_key(saved):
    folder, _ = saved
    rewrite_config(folder, lambda d: d["model"].update(n_embd=16))
    with pytest.raises(ValueError, match=r"^config.json.*unknown config keys \['n_embd'\]; allowed keys are"):
        tfm.load(folder, device="cpu")
    rewrite_config(folder, lambda d: (d["model"].pop("n_embd"), d["model"].update(activation="gelu_fast")))
    with pytest.raises(ValueError, match="config.json.*activation='gelu_fast' is not allowed; choose one of"):
        tfm.load(folder, device="cpu")
    rewrite_config(folder, lambda d: d["model"].update(activation="gelu", version=2))
    with pytest.raises(ValueError, match="unknown config keys \\['version'\\]"):
        tfm.load(folder, device="cpu")
    rewrite_config(folder, lambda d: (d["model"].pop("version"), d.update(version=9)))
    with pytest.raises(ValueError, match="tfm format version 9; this tfm reads version 1"):
        tfm.load(folder, device="cpu")
    rewrite_config(folder, lambda d: (d.update(version=1), d.pop("tokenizer")))
    with pytest.raises(ValueError, match='config.json has no "tokenizer" section'):
        tfm.load(folder, device="cpu")


def test_missing_weights_file(saved):
    folder, _ = saved
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="^model.safetensors is missing"):
        tfm.load(folder, device="cpu")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_or_truncated_weights_file(damage, saved):
    folder, _ = saved
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes({"garbage": bytes(range(256)) * 8, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(ValueError, match=r"^model.safetensors is corrupt or truncated .*re-export or re-copy it") as e:
        tfm.load(folder, device="cpu")
    assert str(folder) not in str(e.value)


def test_weight_with_the_wrong_shape_names_key_and_both_shapes(saved):
    folder, _ = saved
    rewrite_weights(folder, lambda s: s.update({"blocks.1.mlp.fc.weight": torch.zeros(33, 16)}))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "model.safetensors: weight 'blocks.1.mlp.fc.weight' has shape (33, 16), the config expects (32, 16)"
        ),
    ):
        tfm.load(folder, device="cpu")


def test_missing_and_unexpected_weights_are_named(saved):
    folder, _ = saved
    rewrite_weights(folder, lambda s: s.pop("blocks.0.ln2.bias"))
    with pytest.raises(ValueError, match=re.escape("model.safetensors: missing weights ['blocks.0.ln2.bias']")):
        tfm.load(folder, device="cpu")
    rewrite_weights(
        folder, lambda s: s.update({"blocks.0.ln2.bias": torch.zeros(16), "blocks.0.attn.gate.weight": torch.zeros(2)})
    )
    with pytest.raises(ValueError, match=re.escape("unexpected weights ['blocks.0.attn.gate.weight'] for this config")):
        tfm.load(folder, device="cpu")


def test_tokenizer_bigger_than_the_model_vocabulary(tmp_path, gpt2_vocab_folder):
    big = Tokenizer.from_hf_gpt2_folder(gpt2_vocab_folder)
    assert big.vocab_size > 257
    folder = save_model(tmp_path / "m", tfm.GPT(ModelConfig.preset("tiny")), big)
    with pytest.raises(ValueError, match=f"the tokenizer has {big.vocab_size} ids but the model only 257 embeddings"):
        tfm.load(folder, device="cpu")


class _Touch:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_pickled_objects_are_refused_not_executed(tmp_path, gpt2_vocab_folder):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    transformers = pytest.importorskip("transformers")
    transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=16, vocab_size=300).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((gpt2_vocab_folder / name).read_bytes())
    marker = tmp_path / "code-ran"
    torch.save({"transformer.wte.weight": torch.zeros(300, 16), "evil": _Touch(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError) as err:
        tfm.load(folder, device="cpu")
    assert not marker.exists()
    message = str(err.value)
    assert message.startswith("pytorch_model.bin holds pickled objects, not only tensors")
    assert "refuses to execute pickled code" in message
    assert "weights_only` set to `False`" not in message and "\x1b" not in message  # no advice to unpickle
    # a truncated or garbage .bin is reported as such
    torch.save({"transformer.wte.weight": torch.zeros(300, 16)}, folder / "pytorch_model.bin")
    data = (folder / "pytorch_model.bin").read_bytes()
    for bad in (data[: len(data) // 2], b"not a zip or pickle" * 10):
        (folder / "pytorch_model.bin").write_bytes(bad)
        with pytest.raises(
            ValueError, match=r"^pytorch_model.bin could not be read as plain tensors .*corrupt or truncated"
        ):
            tfm.load(folder, device="cpu")
    # the same for a nanoGPT checkpoint
    torch.save({"model": {}, "model_args": _Touch(marker)}, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match="refuses to execute"):
        tfm.load(tmp_path / "ckpt.pt", device="cpu")
    assert not marker.exists()
    # and a folder with no weights at all
    (folder / "pytorch_model.bin").unlink()
    with pytest.raises(FileNotFoundError, match="has no model.safetensors or pytorch_model.bin"):
        tfm.load(folder, device="cpu")


def test_things_that_are_not_models(tmp_path):
    with pytest.raises(
        ValueError, match=re.escape(f"{tmp_path.name} is not a model folder") + ".*tfm folder.*Hugging Face.*nanoGPT"
    ) as e:
        tfm.load(tmp_path, device="cpu")
    assert str(tmp_path.parent) not in str(e.value)  # by its name, never the server's path
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="is not a model folder"):
        tfm.load(tmp_path, device="cpu")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tfm.load(tmp_path / "nowhere", device="cpu")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="is a file; give a model folder, a .gguf file, or a nanoGPT ckpt.pt"):
        tfm.load(tmp_path / "notes.txt", device="cpu")
    (tmp_path / "config.json").write_text(json.dumps({"format": "tfm", "version": 1, "model": {}}))
    with pytest.raises(ValueError, match=r"missing required keys"):
        tfm.load(tmp_path, device="cpu")


def test_default_model_missing_says_where_to_get_it(tmp_path, monkeypatch):
    from tfm.loaders import loading

    monkeypatch.setitem(loading.REGISTRY, "default", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="the bundled model 'default' is not at .*python -m tfm.train"):
        tfm.load("default", device="cpu")


# ---- random models and devices ----------------------------------------------------------------


def test_random_tiny():
    a, b = tfm.load("random:tiny", device="cpu"), tfm.load("random:tiny", device="cpu")
    assert a.config == ModelConfig.preset("tiny") and a.source == "random:tiny"
    assert a.meta == {"seed": 0, "random": True} and not a.model.training
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    other = tfm.random_model("tiny", seed=1)
    assert not torch.equal(other.model.tok_emb.weight, a.model.tok_emb.weight)
    assert a.tokenizer.vocab_size <= 257
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        tfm.load("random:huge", device="cpu")
    with pytest.raises(ValueError, match="too small for any tokenizer"):
        tfm.random_model(ModelConfig.preset("tiny", vocab_size=100))


def test_pick_device():
    if torch.cuda.is_available() or (torch.backends.mps.is_available()):
        pytest.skip("this test describes a CPU-only machine")
    assert tfm.available_devices() == ["cpu"]
    assert pick_device("auto") == pick_device(None) == pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"device 'cuda' is not available on this machine \(available: cpu\)"):
        pick_device("cuda")
    with pytest.raises(ValueError, match="device 'mps' is not available"):
        pick_device("mps")
    with pytest.raises(ValueError, match="device 'tpu' is not known; choose one of auto, cpu, cuda, mps"):
        pick_device("tpu")
    with pytest.raises(ValueError, match="not available"):
        tfm.load("random:tiny", device="cuda")


def _saved_encdec(folder):
    """A tiny toy encoder-decoder saved to `folder`, and the size of its weights file."""
    from tfm.teach.encdec import EncDecConfig, EncoderDecoder, save_encdec

    ed = EncoderDecoder(
        EncDecConfig(
            src_vocab_size=16,
            tgt_vocab_size=16,
            src_context_length=8,
            tgt_context_length=8,
            d_model=16,
            n_enc_layer=1,
            n_dec_layer=1,
            n_head=2,
            d_ff=32,
        )
    )
    save_encdec(folder, ed, {"toy_task": "reverse", "min_len": 2, "max_len": 5})
    return ed, (folder / "model.safetensors").stat().st_size


def test_one_folder_reader_bounds_sizes_before_reading_for_gpt_and_encoder_decoder(saved, tmp_path, monkeypatch):
    import tfm.loaders.weights as W
    from tfm.teach import toy
    from tfm.teach.encdec import load_encdec

    folder, model = saved
    size = (folder / "model.safetensors").stat().st_size
    read = []
    monkeypatch.setattr(W, "read_safetensors", lambda path: read.append(path) or load_file(str(path)))
    with pytest.raises(ValueError, match=f"holds {size:,} bytes, over the limit of {size - 1:,}"):
        load_tfm_folder(folder, max_weight_bytes=size - 1)
    assert read == []  # refused before reading the weights
    got, _, _ = load_tfm_folder(folder, max_weight_bytes=size)
    assert read and all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), model.state_dict().values()))

    ed, ed_size = _saved_encdec(tmp_path / "ed")
    with pytest.raises(ValueError, match="over the limit"):
        toy.load_folder(tmp_path / "ed", max_weight_bytes=ed_size - 1)
    loaded, meta = load_encdec(tmp_path / "ed", max_weight_bytes=ed_size)
    assert meta["toy_task"] == "reverse" and loaded.config == ed.config
    with pytest.raises(ValueError, match="is not a tfm config"):  # each format reads only its own
        load_tfm_folder(tmp_path / "ed")
    with pytest.raises(ValueError, match="is not an encoder-decoder config"):
        load_encdec(folder)
    (folder / "config.json").write_text(" " * (W.MAX_CONFIG_BYTES + 1))
    with pytest.raises(
        ValueError, match=f"config.json holds {W.MAX_CONFIG_BYTES + 1:,} bytes; tfm reads such a file up to"
    ):
        load_tfm_folder(folder)
