"""Each page's settings as one typed, frozen view (issue #52): a page builds its view in one
function, from the link (`ui.links`) and its widgets, then only reads it. `PageView` gives every
view its link: the fields named in `LINK` travel in the address under those names, and
`View.from_link(view.link(), **rest) == view` (tests/test_page_views.py). `Sidebar` is what the
sidebar hands every page: the model's spec, the prompt, the seed, the device.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, Literal, get_args, get_origin, get_type_hints

TRUE = ("1", "true", "True")  # how a link spells a switched-on flag (present=1)


def _text(value) -> str:
    """A value as the link spells it: a flag as 1/0, everything else as str()."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def _parse(kind, text: str):
    """The link's text as the field's type (int, float, bool, str, a Literal of str, or X | None)."""
    if get_origin(kind) in (typing.Union, types.UnionType):
        kind = next(k for k in get_args(kind) if k is not type(None))
    if get_origin(kind) is Literal:
        kind = type(get_args(kind)[0])
    if kind is bool:
        return text in TRUE
    return kind(text)


@dataclass(frozen=True)
class PageView:
    """A page's settings; `LINK` maps a field to the link parameter it travels as."""

    LINK: ClassVar[Mapping[str, str]] = {}

    def link(self) -> dict[str, str]:
        """The link parameters of this view (a field that is None is left out)."""
        return {
            param: _text(getattr(self, name)) for name, param in self.LINK.items() if getattr(self, name) is not None
        }

    def unlinked(self) -> dict:
        """The fields the link does not carry (widget state kept by the session)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.LINK}

    @classmethod
    def from_link(cls, query: Mapping[str, str], **rest):
        """The view a link opens: its parameters parsed by type, the other fields from `rest`."""
        hints = get_type_hints(cls)
        linked = {name: _parse(hints[name], query[param]) for name, param in cls.LINK.items() if param in query}
        return cls(**linked, **rest)


@dataclass(frozen=True)
class Sidebar(PageView):
    """What the sidebar hands a page: the model (its spec text), the prompt, the sampling seed, the device."""

    LINK: ClassVar[Mapping[str, str]] = {"spec": "model", "prompt": "prompt", "seed": "seed", "device": "device"}
    spec: str
    prompt: str
    seed: int
    device: str
