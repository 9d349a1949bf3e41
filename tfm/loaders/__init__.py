"""Loading: which model (spec), from where (paths: the allowed folders), at what cost (limits),
in which file format (weights: tfm folders, safetensors, nanoGPT; convert/: Hugging Face
families), and `loading.load` / `LM` / `random_model`, behind `tfm.load`.

Layer 2: may import tfm.core and tfm.text.
"""
