"""The prompt each student of a load test types: different per student (so no page is served from
another's cache), of similar lengths (~30 tokens). Shared by bench_load.py (the app) and
bench_batcher.py (the batcher alone, which must also run where the app's packages are not)."""

from __future__ import annotations

ANIMALS = ("fox", "owl", "cat", "dog", "bee", "elk", "yak", "emu", "ant", "bat")


def prompt_for(i: int) -> str:
    return (
        f"Student {i} wrote: once upon a time a little {ANIMALS[i % 10]} named Pip {i} found "
        f"{i % 7 + 2} shiny stones by the river, and"
    )
