"""Training: the command line (`python -m tfm.train`, cli), the Trainer, training data, BPE
vocabularies (`python -m tfm.train.bpe`) and model cards (`python -m tfm.train.model_card`).

Layer 6: may import every layer below.
"""
