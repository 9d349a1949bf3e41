"""Reading a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`) as plain JSON.

Nothing from the folder is executed: no `auto_map`, no Python tokenizer classes. What both
tokenizer back ends need (added tokens, which token ends/starts a text) is parsed here once.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.files import parse_json, read_bytes
from .token_files import MAX_TOKEN_ID

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
MAX_FILE_BYTES = 128 << 20  # Qwen2's tokenizer.json is ~7 MB, Gemma's ~34 MB: bound before reading
HF_FORMAT = "hf-tokenizer.json"  # the "format" of a tfm config's tokenizer spec for these files


class Unexpressible(ValueError):
    """tokenizer.json holds something the tiktoken back end cannot reproduce exactly."""


@dataclass(frozen=True)
class AddedToken:
    """One entry of tokenizer.json's `added_tokens`: matched in the text before the BPE."""

    id: int
    content: str
    special: bool
    normalized: bool
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


@dataclass(frozen=True)
class TokenizerFile:
    """The parsed files of one folder. `data` is tokenizer.json; `digest` its sha256."""

    folder: Path
    data: dict
    config: dict
    added: tuple[AddedToken, ...]
    digest: str

    @property
    def specials(self) -> dict[str, int]:
        return {a.content: a.id for a in self.added if a.special}

    def role_id(self, role: str) -> int | None:
        """Id of tokenizer_config's `eos_token` / `bos_token` (a string or {"content": ...})."""
        value = self.config.get(role)
        if isinstance(value, dict):
            value = value.get("content")
        if not isinstance(value, str):
            return None
        for a in self.added:
            if a.content == value:
                return a.id
        vocab = self.data["model"].get("vocab")
        return vocab.get(value) if isinstance(vocab, dict) else None

    @property
    def eot_id(self) -> int | None:
        """The end-of-text id: tokenizer_config's eos_token, else a `<|endoftext|>` added token."""
        eos = self.role_id("eos_token")
        return eos if eos is not None else self.specials.get("<|endoftext|>")

    @property
    def add_bos(self) -> bool:
        """Whether Hugging Face puts the bos token before a text (add_special_tokens=True)."""
        flag = self.config.get("add_bos_token")
        if isinstance(flag, bool):
            return flag and self.role_id("bos_token") is not None
        bos = self.role_id("bos_token")
        return bos is not None and _template_starts_with(self.data.get("post_processor"), bos)

    @property
    def chat_template(self) -> str | None:
        """tokenizer_config's `chat_template`: a string, or the one named "default" in a list."""
        value = self.config.get("chat_template")
        if isinstance(value, list):
            value = next((t.get("template") for t in value if isinstance(t, dict) and t.get("name") == "default"), None)
        return value if isinstance(value, str) and value else None

    @property
    def template_tokens(self) -> dict[str, str]:
        """The special tokens' texts HF gives a chat template (its `special_tokens_map`)."""
        out = {}
        for role in TEMPLATE_TOKEN_ROLES:
            value = self.config.get(role)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                out[role] = value
        return out


TEMPLATE_TOKEN_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _template_starts_with(post, token_id: int) -> bool:
    """Does a TemplateProcessing post-processor (maybe inside a Sequence) start with token_id?"""
    if not isinstance(post, dict):
        return False
    if post.get("type") == "Sequence":
        return any(_template_starts_with(p, token_id) for p in post.get("processors", []))
    if post.get("type") != "TemplateProcessing" or not post.get("single"):
        return False
    first = post["single"][0].get("SpecialToken", {}).get("id")
    return token_id in post.get("special_tokens", {}).get(first, {}).get("ids", [])


def read_tokenizer_file(folder) -> TokenizerFile:
    """Parse folder/tokenizer.json and (if there) tokenizer_config.json; clear errors."""
    folder = Path(folder)
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{TOKENIZER_FILE} not found: a Hugging Face tokenizer folder needs tokenizer.json "
            "(GPT-2 folders with only vocab.json + merges.txt are read too)"
        )
    raw = read_bytes(path, MAX_FILE_BYTES)
    data = parse_json(raw, TOKENIZER_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ValueError(f'{TOKENIZER_FILE} has no "model" section; is it a Hugging Face tokenizer.json?')
    config = {}
    if (folder / CONFIG_FILE).is_file():
        config = parse_json(read_bytes(folder / CONFIG_FILE, MAX_FILE_BYTES), CONFIG_FILE)
        if not isinstance(config, dict):
            raise ValueError(f"{CONFIG_FILE} is not a JSON object")
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise ValueError(f"{TOKENIZER_FILE}'s added_tokens is not a list")
    added = tuple(_added_token(entry) for entry in added)
    return TokenizerFile(folder, data, config, added, hashlib.sha256(raw).hexdigest())


def _added_token(entry) -> AddedToken:
    try:
        tok = AddedToken(
            int(entry["id"]),
            str(entry["content"]),
            bool(entry.get("special", False)),
            bool(entry.get("normalized", not entry.get("special", False))),
            bool(entry.get("lstrip")),
            bool(entry.get("rstrip")),
            bool(entry.get("single_word")),
        )
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        raise ValueError(f"{TOKENIZER_FILE}: bad added_tokens entry {str(entry)[:80]!r}") from None
    if not 0 <= tok.id < MAX_TOKEN_ID or not tok.content:
        raise ValueError(
            f"{TOKENIZER_FILE}: added token {tok.content[:40]!r} has id {tok.id}; ids must be in "
            f"0..{MAX_TOKEN_ID - 1:,}, text non-empty"
        )
    return tok


class FromTokenizerFile:
    """What both Hugging Face tokenizer classes take from the files: special tokens, the
    end/start-of-text ids, and `save` (which copies the files)."""

    def _use_file(self, file: TokenizerFile) -> None:
        self._file, self._specials = file, file.specials
        self.bos_id, self.add_bos = file.role_id("bos_token"), file.add_bos
        self.chat_template, self.template_tokens = file.chat_template, file.template_tokens

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._specials)

    @property
    def eot_id(self) -> int | None:
        return self._file.eot_id

    def save(self, folder) -> dict:
        return save_tokenizer_files(self._file, folder, self.name)


def save_tokenizer_files(source: TokenizerFile, folder, name: str) -> dict:
    """Copy the source folder's tokenizer files into `folder`; return the tfm spec naming them.
    Refuses if tokenizer.json changed since it was read (the copy would not be this tokenizer)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = source.folder / TOKENIZER_FILE
    if hashlib.sha256(read_bytes(src, MAX_FILE_BYTES)).hexdigest() != source.digest:
        raise ValueError(f"{TOKENIZER_FILE} changed since this tokenizer was read; load the folder again before saving")
    for file in (TOKENIZER_FILE, CONFIG_FILE):
        if (source.folder / file).is_file() and (source.folder / file).resolve() != (folder / file).resolve():
            shutil.copyfile(source.folder / file, folder / file)
    return {"format": HF_FORMAT, "file": TOKENIZER_FILE, "name": name}
