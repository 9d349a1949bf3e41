"""Text: every tokenizer and the readers of its files.

tokenizer (tiktoken-based) and bpe_files (its files: our `.tiktoken` ranks, GPT-2 vocab.json +
merges.txt), hf_tokenizer_file / hf_bytelevel / hf_libtokenizer / hf_tokenizer (Hugging Face
tokenizer.json, on tiktoken or on the `tokenizers` library), token_files (checks of the ids
and file names those files give), token_view (the Tokens page).

Layer 1: may import tfm.core.
"""
