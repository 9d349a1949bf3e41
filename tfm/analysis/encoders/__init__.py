"""Encoders (BERT-style models): similarity (sentence embeddings and their similarities), bert_heads
(Clark et al.'s per-head attention averages)."""
