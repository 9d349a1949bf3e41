"""Sampling and generation: sampling (Hugging Face's temperature, top-k, top-p and the sampling
breakdown), generate (streamed generation with a KV cache), timeline (per-step records),
batcher (continuous batching: concurrent generations as rows of one decode step), prefill
(several prompts in one forward, for the batcher) and choice (how a batch's rows draw their
tokens, the random part made while the batch's forward runs).

Layer 3: may import tfm.core, tfm.text and tfm.loaders.
"""
