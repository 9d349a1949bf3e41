"""Quantization: requantize (a model re-quantized to a coarser GGUF type and what that does to its
predictions and attention), blocks (how a GGUF file stores its weights: one block's integers, scale
and minimum), kblocks (llama.cpp's K-quant super-blocks, decoded byte by byte)."""
