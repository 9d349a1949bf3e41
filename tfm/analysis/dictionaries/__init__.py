"""Sparse dictionaries: topk (the TopK dictionary SAEs and transcoders share), sae (sparse
autoencoders on one layer's stream), transcoder (per-layer TopK transcoders, the graph's
features), features (a shipped SAE's features: top activations, steering), labels (their
labels.json), transcoder_features (a transcoder set's shipped top contexts and labels)."""
