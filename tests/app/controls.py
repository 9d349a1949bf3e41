"""A page's keyed controls as AppTest sees them, and how to set one as a browser would: shared by
test_widget_extremes.py (every control at its extremes) and fuzz.py (random walks over them)."""

from __future__ import annotations

from ui.st_private import take_label_as_sent

KINDS = (
    "slider",
    "select_slider",
    "number_input",
    "selectbox",
    "radio",
    "multiselect",
    "text_input",
    "text_area",
    "checkbox",
    "toggle",
)
SKIP_PREFIXES = ("sidebar.",)  # except the ones below: the model config is the matrix's job
KEEP = ("sidebar.prompt", "sidebar.seed")


def keyed(at) -> list[tuple[str, str]]:
    """(kind, key) of every keyed control on the page, but the sidebar's model config."""
    out = []
    for kind in KINDS:
        for el in at.get(kind):
            key = getattr(el, "key", None)
            if key and (not key.startswith(SKIP_PREFIXES) or key in KEEP):
                out.append((kind, key))
    return out


def control(at, kind: str, key: str):
    return getattr(at, kind)(key=key)


def choose(el, value):
    """Set a control; a select's options are its displayed labels (AppTest knows no other), so the
    label is sent as the browser sends it: the page's format_func is not applied to it again."""
    if isinstance(value, (str, list)) and hasattr(el, "options") and not hasattr(el, "max_chars"):
        take_label_as_sent(el)
    return el.set_value(value)
