"""Tokenizers of Hugging Face model folders (Llama, Qwen2, Mistral, GPT-NeoX/Pythia, SmolLM,
TinyLlama, GPT-2): `tokenizer_from_folder(folder)`.

Byte-level BPE (GPT-2, Pythia, Qwen2, Llama 3, SmolLM) is served by tiktoken
(`tfm.text.hf_bytelevel`). What tiktoken cannot reproduce exactly, SentencePiece-style BPE with
byte fallback and the ▁ metaspace (Llama 2, TinyLlama, Mistral v0.1) above all, is served by
the `tokenizers` library (`tfm.text.hf_libtokenizer`); `.backend` and `.backend_note` say which
and why. Only tokenizer.json / tokenizer_config.json / vocab.json / merges.txt are read, as
JSON or text: nothing in the folder is executed.
"""

from __future__ import annotations

from pathlib import Path

from ..core.files import reading
from .hf_bytelevel import HFByteLevelTokenizer, plan_bytelevel
from .hf_libtokenizer import LibTokenizer
from .hf_tokenizer_file import TOKENIZER_FILE, TokenizerFile, Unexpressible, read_tokenizer_file
from .tokenizer import Tokenizer
from .wordpiece import WordPieceTokenizer, is_wordpiece


def tokenizer_from_spec(folder, spec: dict) -> Tokenizer | LibTokenizer:
    """A saved model's tokenizer from the dict `save()` returned (stored in its config.json):
    our tiktoken files, or a copied Hugging Face tokenizer.json."""
    if isinstance(spec, dict) and spec.get("format") == "hf-tokenizer.json":
        name = spec.get("name")
        return tokenizer_from_folder(folder, name if isinstance(name, str) else None)
    return Tokenizer.from_spec(folder, spec)


def tokenizer_from_folder(folder, name: str | None = None) -> Tokenizer | LibTokenizer:
    """The tokenizer of a Hugging Face folder; ids equal HF's fast tokenizer's (without the
    bos/eos it may add: see `.bos_id` / `.add_bos`). Raises FileNotFoundError / ValueError."""
    folder = Path(folder)
    name = name or folder.name or "hf"
    if not (folder / TOKENIZER_FILE).is_file() and (folder / "merges.txt").is_file():
        return Tokenizer.from_hf_gpt2_folder(folder, name)  # older GPT-2 folders
    file = read_tokenizer_file(folder)
    with reading(TOKENIZER_FILE):
        return serve(file, name)


def serve(file: TokenizerFile, name: str, bytelevel=HFByteLevelTokenizer, library=LibTokenizer, origin: str = ""):
    """A tokenizer.json's tokenizer on tiktoken when it reproduces the vocabulary exactly, else on
    the tokenizers library; `.backend_note` says which and why (`origin` says where it came from).
    WordPiece (BERT) files are the library's too (`tfm.text.wordpiece`)."""
    if is_wordpiece(file):
        return WordPieceTokenizer(file, name, f"WordPiece {origin}served by the tokenizers library")
    try:
        plan = plan_bytelevel(file)
    except Unexpressible as e:
        return library(file, name, f"{origin}served by the tokenizers library: {e}")
    tok = bytelevel(file, plan, name)
    tok.backend_note = f"byte-level BPE {origin}served by tiktoken"
    return tok
