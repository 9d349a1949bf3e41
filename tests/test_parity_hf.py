"""Parity with the reference implementations: a random Hugging Face GPT2LMHeadModel saved as a
folder (safetensors and pytorch_model.bin) and a nanoGPT-style ckpt.pt load into tfm and give
the same logits, attention patterns and token ids."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tfm
from tfm.core.config import ModelConfig
from tfm.text.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread

TEXTS = [
    "The cat sat on the mat.",
    "hello there, world! 123",
    "café — “quotes” 你好 👍",
    "  leading spaces\n\nand new lines\t tabs",
    "it's what they've done",
]


def vocab_size_of(folder: Path) -> int:
    return len(json.loads((folder / "vocab.json").read_text(encoding="utf-8")))


def hf_model(vocab_size: int, seed: int = 0, **config) -> GPT2LMHeadModel:
    """A small GPT-2 with every weight perturbed well away from its N(0, 0.02) init, so attention
    patterns are far from uniform and mistakes in any weight would show."""
    torch.manual_seed(seed)
    cfg = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        n_positions=64,
        vocab_size=vocab_size,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
        **config,
    )
    model = GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.2 * noise if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.25 * noise)
    return model


def save_hf_folder(model: GPT2LMHeadModel, folder: Path, vocab_folder: Path, safetensors: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if safetensors:
        model.save_pretrained(folder)
        assert (folder / "model.safetensors").is_file()
    else:
        # What save_pretrained(safe_serialization=False) wrote (transformers 5 only writes safetensors):
        # config.json plus a pickled state dict with the tied lm_head sharing wte's storage.
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((vocab_folder / name).read_bytes())
    return folder


def ids_for(lm, text="The cat sat on the mat. hello there, world!"):
    ids = lm.tokenizer.encode(text)
    assert 8 < len(ids) < 64
    return torch.tensor([ids])


@pytest.mark.usefixtures("every_product_onednn")
@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_hf_gpt2_folder_gives_the_same_logits_and_patterns(safetensors, gpt2_vocab_folder, tmp_path):
    hf = hf_model(vocab_size_of(gpt2_vocab_folder))
    folder = save_hf_folder(hf, tmp_path / "gpt2", gpt2_vocab_folder, safetensors)
    lm = tfm.load(folder, device="cpu")
    assert lm.meta == {"source_format": "huggingface-gpt2"}
    cfg = lm.config
    assert (cfg.d_model, cfg.n_layer, cfg.n_head, cfg.d_ff, cfg.context_length) == (64, 2, 4, 256, 64)
    assert cfg.activation == "gelu_tanh" and cfg.tied_embeddings and cfg.pos_encoding == "learned"
    idx = ids_for(lm)
    with torch.no_grad():
        want = hf(idx, output_attentions=True)
        got = lm.model(idx, trace=True)
    assert want.logits.abs().max() > 1.0
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=0)
    assert len(want.attentions) == 2
    for i, attn in enumerate(want.attentions):
        assert attn.std() > 0.05  # far from uniform
        torch.testing.assert_close(got.trace[f"blocks.{i}.attn.pattern"], attn, atol=1e-5, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(lm.model(idx).logits, want.logits, atol=1e-5, rtol=0)


def test_token_ids_match_gpt2_tokenizer_fast(gpt2_vocab_folder):
    hf_tok = GPT2TokenizerFast(str(gpt2_vocab_folder / "vocab.json"), str(gpt2_vocab_folder / "merges.txt"))
    tok = Tokenizer.from_hf_gpt2_folder(gpt2_vocab_folder)
    assert tok.vocab_size == len(hf_tok)
    for text in TEXTS:
        ids = hf_tok.encode(text)
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == hf_tok.decode(ids) == text
    assert tok.eot_id == hf_tok.convert_tokens_to_ids("<|endoftext|>") == 0


@pytest.mark.usefixtures("every_product_onednn")
@pytest.mark.parametrize(
    "hf_config, activation",
    [
        (dict(activation_function="gelu"), "gelu"),
        (dict(activation_function="relu"), "relu"),
        (dict(tie_word_embeddings=False), "gelu_tanh"),
        (dict(n_inner=96, layer_norm_epsilon=1e-3), "gelu_tanh"),
    ],
)
def test_hf_config_variants_load_with_parity(hf_config, activation, gpt2_vocab_folder, tmp_path):
    hf = hf_model(vocab_size_of(gpt2_vocab_folder), seed=1, **hf_config)
    lm = tfm.load(save_hf_folder(hf, tmp_path / "gpt2", gpt2_vocab_folder), device="cpu")
    assert lm.config.activation == activation
    assert lm.config.tied_embeddings == hf_config.get("tie_word_embeddings", True)
    assert lm.config.d_ff == hf_config.get("n_inner", 256)
    assert lm.config.norm_eps == hf_config.get("layer_norm_epsilon", 1e-5)
    if not lm.config.tied_embeddings:
        assert lm.model.unembed.weight is not lm.model.tok_emb.weight
    idx = ids_for(lm)
    with torch.no_grad():
        torch.testing.assert_close(lm.model(idx, trace=True).logits, hf(idx).logits, atol=1e-5, rtol=0)


def test_hf_attention_variants_tfm_cannot_compute_are_refused(gpt2_vocab_folder, tmp_path):
    hf = hf_model(vocab_size_of(gpt2_vocab_folder), scale_attn_by_inverse_layer_idx=True)
    folder = save_hf_folder(hf, tmp_path / "scaled", gpt2_vocab_folder)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        tfm.load(folder, device="cpu")
    data = json.loads((folder / "config.json").read_text())
    data.update(scale_attn_by_inverse_layer_idx=False, activation_function="swish")
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="activation_function 'swish' is not supported; expected one of"):
        tfm.load(folder, device="cpu")
    data.update(activation_function="gelu_new")
    del data["n_embd"]
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"lacks the GPT-2 keys \['n_embd'\]"):
        tfm.load(folder, device="cpu")


# ---- nanoGPT ------------------------------------------------------------------------------


def nanogpt_state(model, prefix: str = "", mask_buffers: bool = False) -> dict[str, torch.Tensor]:
    """tfm weights under nanoGPT's names (nn.Linear layout, lm_head tied to wte)."""
    sd = model.state_dict()
    out = {"transformer.wte.weight": sd["tok_emb.weight"], "transformer.wpe.weight": sd["pos_emb.weight"]}
    parts = {
        "ln1": "ln_1",
        "ln2": "ln_2",
        "attn.qkv": "attn.c_attn",
        "attn.proj": "attn.c_proj",
        "mlp.fc": "mlp.c_fc",
        "mlp.proj": "mlp.c_proj",
    }
    t = model.config.context_length
    for i in range(model.config.n_layer):
        for ours, theirs in parts.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                if key in sd:
                    out[f"transformer.h.{i}.{theirs}.{kind}"] = sd[key]
        if mask_buffers:  # nanoGPT without flash attention keeps a causal-mask buffer named "bias"
            out[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
    out["transformer.ln_f.weight"] = sd["ln_final.weight"]
    if "ln_final.bias" in sd:
        out["transformer.ln_f.bias"] = sd["ln_final.bias"]
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return {prefix + k: v.clone() for k, v in out.items()}


def nanogpt_forward(sd: dict[str, torch.Tensor], args: dict, idx: torch.Tensor) -> torch.Tensor:
    """nanoGPT's GPT.forward (model.py), written out functionally from its state dict."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in sd.items()}
    n_head, d = args["n_head"], args["n_embd"]
    b, t = idx.shape
    get = sd.get

    def ln(x, name):
        return F.layer_norm(x, (d,), sd[name + ".weight"], get(name + ".bias"), 1e-5)

    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:t]
    for i in range(args["n_layer"]):
        h = f"transformer.h.{i}."
        q, k, v = F.linear(ln(x, h + "ln_1"), sd[h + "attn.c_attn.weight"], get(h + "attn.c_attn.bias")).split(d, dim=2)
        q, k, v = (z.view(b, t, n_head, d // n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.tril(torch.ones(t, t)) == 0, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + F.linear(y, sd[h + "attn.c_proj.weight"], get(h + "attn.c_proj.bias"))
        m = F.gelu(F.linear(ln(x, h + "ln_2"), sd[h + "mlp.c_fc.weight"], get(h + "mlp.c_fc.bias")))
        x = x + F.linear(m, sd[h + "mlp.c_proj.weight"], get(h + "mlp.c_proj.bias"))
    return F.linear(ln(x, "transformer.ln_f"), sd["lm_head.weight"])


@pytest.mark.parametrize(
    "bias, prefix, mask_buffers",
    [(True, "", False), (False, "", False), (True, "_orig_mod.", True), (False, "_orig_mod.", False)],
)
def test_nanogpt_checkpoint_loads_exactly(bias, prefix, mask_buffers, gpt2_vocab_folder, tmp_path, make_model):
    vocab = vocab_size_of(gpt2_vocab_folder)
    cfg = ModelConfig(
        vocab_size=vocab, context_length=64, d_model=64, n_layer=2, n_head=4, d_ff=256, activation="gelu", bias=bias
    )
    source = make_model(cfg, scale=0.25)
    args = dict(n_layer=2, n_head=4, n_embd=64, block_size=64, bias=bias, vocab_size=vocab, dropout=0.0)
    sd = nanogpt_state(source, prefix, mask_buffers)
    torch.save(
        {
            "model": sd,
            "model_args": args,
            "iter_num": 5,
            "best_val_loss": torch.tensor(3.2),
            "config": {"dataset": "shakespeare"},
        },
        tmp_path / "ckpt.pt",
    )
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((gpt2_vocab_folder / name).read_bytes())
    for where in (tmp_path / "ckpt.pt", tmp_path):  # the file or its folder
        lm = tfm.load(where, device="cpu")
        assert lm.meta == {"source_format": "nanogpt", "iter_num": 5}
        assert lm.config == cfg
        idx = ids_for(lm)
        with torch.no_grad():
            got = lm.model(idx).logits
            assert torch.equal(got, source(idx).logits)
            assert torch.equal(lm.model(idx, trace=True).logits, source(idx, trace=True).logits)
            torch.testing.assert_close(got, nanogpt_forward(sd, args, idx), atol=1e-5, rtol=0)
        assert lm.model.unembed.weight is lm.model.tok_emb.weight


def test_nanogpt_checkpoint_with_meta_pkl_and_no_vocab_says_pickle(tmp_path):
    cfg = ModelConfig(vocab_size=65, context_length=32, d_model=32, n_layer=1, n_head=2, d_ff=128, activation="gelu")
    model = tfm.GPT(cfg)
    args = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, bias=True, vocab_size=65, dropout=0.0)
    torch.save({"model": nanogpt_state(model), "model_args": args, "iter_num": 0}, tmp_path / "ckpt.pt")
    marker = tmp_path / "unpickled"
    # If tfm ever unpickled meta.pkl, this would create the marker file.
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(_Touch(marker)))
    with pytest.raises(
        FileNotFoundError, match=r"meta\.pkl is a pickle, which tfm never loads.*vocab\.json and merges\.txt"
    ):
        tfm.load(tmp_path / "ckpt.pt", device="cpu")
    assert not marker.exists()
    (tmp_path / "meta.pkl").unlink()
    with pytest.raises(FileNotFoundError, match="carries no tokenizer"):
        tfm.load(tmp_path, device="cpu")


def test_nanogpt_checkpoint_with_wrong_contents_is_refused(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match="is not a nanoGPT checkpoint .*'model' and 'model_args'"):
        tfm.load(tmp_path / "ckpt.pt", device="cpu")
    torch.save({"model": {}, "model_args": {"n_layer": 1}}, tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match=r"model_args lacks \['vocab_size', 'block_size', 'n_embd', 'n_head'\]"):
        tfm.load(tmp_path / "ckpt.pt", device="cpu")


class _Touch:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))
