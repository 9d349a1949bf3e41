"""Sampling and generation: sampling (Hugging Face's temperature, top-k, top-p and the sampling
breakdown), generate (streamed generation with a KV cache), timeline (per-step records).

Layer 3: may import tfm.core, tfm.text and tfm.loaders.
"""
