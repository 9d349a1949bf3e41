"""The oracle for per-head numbers: what a Hugging Face Llama-family model (Llama, Qwen2, Mistral;
SmolLM2 is a Llama) computes inside each attention layer, per QUERY head, read with hooks on the
test's own HF model and Hugging Face's own functions (`apply_rotary_pos_emb`, `repeat_kv`):

    q (H, T, hd)        q_proj's output, split into heads, rotated by HF's RoPE
    k, v (H, T, hd)     k_proj / v_proj's, rotated (k), then repeated for the query heads that read
                        them with `repeat_kv`: row h is what query head h attends with
    k_kv, v_kv          the same before `repeat_kv`, (Hkv, T, hd)
    pattern (H, T, T)   `output_attentions=True` (eager attention)
    z (H, T, hd)        o_proj's input, split into heads: each head's weighted sum of values

Nothing here knows tfm: tfm's numbers are compared against these.
"""

from __future__ import annotations

import importlib

import torch


def _modeling(hf):
    """The HF module that defines the model's own `apply_rotary_pos_emb` and `repeat_kv`."""
    return importlib.import_module(type(hf).__module__)


@torch.inference_mode()
def hf_heads(hf, idx: torch.Tensor) -> dict[int, dict[str, torch.Tensor]]:
    """Per layer, per query head: q, k, v, pattern and z of batch row 0 (see the module doc)."""
    mod, cfg = _modeling(hf), hf.config
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    got: dict[str, torch.Tensor] = {}
    hooks = [hf.model.rotary_emb.register_forward_hook(lambda m, a, out: got.__setitem__("cos_sin", out))]
    for i, layer in enumerate(hf.model.layers):
        att = layer.self_attn
        for part in ("q_proj", "k_proj", "v_proj"):
            hooks.append(
                getattr(att, part).register_forward_hook(lambda m, a, out, key=f"{i}.{part}": got.__setitem__(key, out))
            )
        hooks.append(att.o_proj.register_forward_pre_hook(lambda m, a, key=f"{i}.z": got.__setitem__(key, a[0])))
    try:
        out = hf(idx, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    cos, sin = got["cos_sin"]
    t = idx.shape[1]
    split = lambda x: x.view(1, t, -1, hd).transpose(1, 2)  # noqa: E731  (B, heads, T, hd), as HF does
    layers = {}
    for i in range(cfg.num_hidden_layers):
        q, k = mod.apply_rotary_pos_emb(split(got[f"{i}.q_proj"]), split(got[f"{i}.k_proj"]), cos, sin)
        v = split(got[f"{i}.v_proj"])
        assert q.shape[1] == n_head and k.shape[1] == v.shape[1] == n_kv
        layers[i] = {
            "q": q[0],
            "k": mod.repeat_kv(k, n_head // n_kv)[0],
            "v": mod.repeat_kv(v, n_head // n_kv)[0],
            "k_kv": k[0],
            "v_kv": v[0],
            "pattern": out.attentions[i][0],
            "z": split(got[f"{i}.z"])[0],
        }
    return layers
