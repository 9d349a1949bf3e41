"""BERT-style encoders: Hugging Face BertModel and BertForMaskedLM -> GPT with causal=False.

Learned absolute positions, token-type (segment) embeddings and a LayerNorm over their sum,
post-norm blocks (LayerNorm after each residual sum), separate query/key/value projections
(fused here as [q | k | v] rows), exact GELU. BertModel's pooler (a tanh layer on [CLS] for
next-sentence prediction) is not part of the hidden states and is not loaded; BertForMaskedLM's
`cls.predictions` head becomes `tfm.core.encoder.MaskedLMHead` (its decoder is the tied embedding).
The [SEP] id that starts segment 1 comes from the folder's WordPiece tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from ...core.files import read_json, reading
from ..weights import HF_ACTIVATIONS
from .common import Weights, build, hf_shape, make_config, read_weights, tokenizer_for

HEADS = {"BertModel": "none", "BertForMaskedLM": "masked"}


def fields(data: dict, source: str, arch: str, sep_id: int | None) -> tuple[dict, dict]:
    shape = hf_shape(data, source)
    act = data.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in HF_ACTIVATIONS:
        raise ValueError(
            f"{source}: hidden_act {str(act)[:40]!r} is not supported; expected one of {sorted(HF_ACTIVATIONS)}"
        )
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"{source}: position_embedding_type {str(data['position_embedding_type'])[:40]!r} is not "
            "supported; tfm reads BERT's learned absolute positions"
        )
    if data.get("is_decoder") or data.get("add_cross_attention"):
        raise ValueError(
            f"{source}: a BERT decoder (is_decoder / add_cross_attention) is not supported; tfm reads encoders"
        )
    if data.get("tie_word_embeddings", True) is not True:
        raise ValueError(
            f"{source}: tie_word_embeddings=false is not supported for BERT (its head reads the embedding)"
        )
    types = data.get("type_vocab_size", 2)
    kwargs = dict(
        **shape,
        activation=HF_ACTIVATIONS[act],
        norm_eps=data.get("layer_norm_eps", 1e-12),
        norm_placement="post",
        causal=False,
        embed_norm=True,
        type_vocab_size=types,
        sep_token_id=sep_id if types else None,
        lm_head=HEADS[arch],
        tied_embeddings=True,
    )
    return kwargs, {"source_format": "huggingface-bert", "architecture": arch}


def convert(w: Weights, cfg: ModelConfig, prefix: str) -> dict[str, torch.Tensor]:
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    emb = prefix + "embeddings."
    out = {
        "tok_emb.weight": w.take(emb + "word_embeddings.weight", v, d),
        "pos_emb.weight": w.take(emb + "position_embeddings.weight", cfg.context_length, d),
        "ln_embed.weight": w.take(emb + "LayerNorm.weight", d),
        "ln_embed.bias": w.take(emb + "LayerNorm.bias", d),
    }
    if cfg.type_vocab_size:
        out["type_emb.weight"] = w.take(emb + "token_type_embeddings.weight", cfg.type_vocab_size, d)
    for i in range(cfg.n_layer):
        hf, ours = f"{prefix}encoder.layer.{i}.", f"blocks.{i}."
        qkv = [hf + f"attention.self.{n}" for n in ("query", "key", "value")]
        out[ours + "attn.qkv.weight"] = torch.cat([w.take(k + ".weight", d, d) for k in qkv])
        out[ours + "attn.qkv.bias"] = torch.cat([w.take(k + ".bias", d) for k in qkv])
        for hf_name, name, shape in (
            ("attention.output.dense", "attn.proj", (d, d)),
            ("intermediate.dense", "mlp.fc", (f, d)),
            ("output.dense", "mlp.proj", (d, f)),
            ("attention.output.LayerNorm", "ln1", (d,)),
            ("output.LayerNorm", "ln2", (d,)),
        ):
            out[ours + name + ".weight"] = w.take(hf + hf_name + ".weight", *shape)
            out[ours + name + ".bias"] = w.take(hf + hf_name + ".bias", shape[0])
    if cfg.lm_head == "masked":
        head = "cls.predictions."
        out |= {
            "mlm.dense.weight": w.take(head + "transform.dense.weight", d, d),
            "mlm.dense.bias": w.take(head + "transform.dense.bias", d),
            "mlm.norm.weight": w.take(head + "transform.LayerNorm.weight", d),
            "mlm.norm.bias": w.take(head + "transform.LayerNorm.bias", d),
            "mlm.bias": w.take(head + "bias", v),
        }
    return out


def ignore(cfg: ModelConfig, key: str) -> bool:
    """Buffers (position_ids), the pooler and next-sentence head (not in the hidden states), the
    tied decoder's copies of the embedding and of the bias."""
    return (
        key.endswith(("embeddings.position_ids", "embeddings.token_type_ids"))
        or ".pooler." in f".{key}"
        or key.startswith(("cls.seq_relationship.", "cls.predictions.decoder."))
    )


def _prefix(state: dict) -> str:
    """BertForMaskedLM nests the encoder under "bert."; some BertModel files do too."""
    return "bert." if "bert.embeddings.word_embeddings.weight" in state else ""


def load(folder: Path, dtype: str, arch: str = "BertModel"):
    """Model, tokenizer and meta of a BERT folder; the weights are checked before the model is built."""
    source = "config.json"
    data = read_json(folder / source)
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a JSON object")
    tokenizer = tokenizer_for(folder)
    sep_id = getattr(tokenizer, "sep_id", None)
    with reading(source):
        kwargs, meta = fields(data, source, arch, sep_id)
        cfg = make_config(source, **kwargs)
    if cfg.type_vocab_size and sep_id is None:
        raise ValueError(f"{folder.name}: the tokenizer has no [SEP] token, which splits a BERT pair's segments")
    state = read_weights(folder)
    weights = Weights(state, folder.name, lambda key: ignore(cfg, key))
    converted = convert(weights, cfg, _prefix(state))
    weights.finish()
    model = build(cfg, converted, tokenizer, folder.name, dtype)
    return model, tokenizer, {**meta, "dtype": dtype}


def load_model(folder: Path, dtype: str):
    return load(folder, dtype, "BertModel")


def load_masked_lm(folder: Path, dtype: str):
    return load(folder, dtype, "BertForMaskedLM")
