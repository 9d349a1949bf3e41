"""Checks of what a tokenizer's files say, before a tokenizer is built from them: token ids
in range (a file's id of 10**30 made tiktoken overflow; one of 10**9 would size arrays of a
billion entries), and the files a saved tokenizer spec (config.json's "tokenizer") names, which
must be bare names inside the model folder (a spec naming "../../x" would read any file)."""

from __future__ import annotations

from pathlib import Path

MAX_TOKEN_ID = 1_000_000  # ModelConfig's largest vocabulary: a larger id could never be embedded


def token_ids(values, source: str) -> list[int]:
    """Token ids read from a file: whole numbers in 0..MAX_TOKEN_ID-1, else one ValueError."""
    values = list(values) if not isinstance(values, list) else values
    bad = next((v for v in values if type(v) is not int or not 0 <= v < MAX_TOKEN_ID), None)
    if bad is not None:
        raise ValueError(
            f"{source} holds the token id {str(bad)[:40]}; ids are whole numbers in 0..{MAX_TOKEN_ID - 1:,}"
        )
    return values


def spec_file(spec: dict, key: str) -> str:
    """A file a tokenizer spec (config.json's "tokenizer") names: a bare name in the model folder."""
    name = spec.get(key)
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(
            f"config.json's tokenizer {key} is {str(name)[:60]!r}; it must name a file inside the model folder"
        )
    return name


def checked_spec(spec, patterns) -> tuple[str, dict[str, int], str, str | None]:
    """(file, special tokens, pattern name, name) of a saved tokenizer spec, each checked."""
    if not isinstance(spec, dict):
        raise ValueError("config.json's tokenizer section is not a JSON object")
    specials, pattern, name = spec.get("special_tokens", {}), spec.get("pattern", "gpt2"), spec.get("name")
    if not isinstance(specials, dict) or not all(isinstance(t, str) and t for t in specials):
        raise ValueError("config.json's tokenizer special_tokens must map token texts to ids")
    token_ids(specials.values(), "config.json's tokenizer special_tokens")
    if not isinstance(pattern, str) or pattern not in patterns:
        raise ValueError(
            f"config.json's tokenizer pattern {str(pattern)[:40]!r} is not known; tfm reads {', '.join(patterns)}"
        )
    if name is not None and not isinstance(name, str):
        raise ValueError("config.json's tokenizer name must be text")
    return spec_file(spec, "file"), specials, pattern, name
