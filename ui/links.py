"""Widget and link state: values that survive page switches, settings read from a shared link
(checked and put in range, saying so) and written back into it."""

from __future__ import annotations

import streamlit as st

from ui.text import plain

LINK_VALUE_CHARS = 200  # a link's setting other than a prompt: longer is refused unread


def url_init(
    widget_key: str,
    param: str,
    cast=str,
    max_chars: int | None = LINK_VALUE_CHARS,
    bounds: tuple[int, int] | None = None,
) -> None:
    """Seed a widget from the URL once per session, so shared links open the same view. A value
    longer than `max_chars` (None: no cap, the caller bounds it) is refused before it is read;
    one outside `bounds` (low, high), when given, is ignored with the same word as one that is
    not a number (`clamp_int` instead moves a value into range, saying to what)."""
    done = st.session_state.setdefault("app.url_loaded", set())
    if widget_key in done:
        return
    done.add(widget_key)
    if param not in st.query_params:
        return
    raw = st.query_params[param]
    if max_chars is not None and len(raw) > max_chars:
        st.warning(
            f"Ignored the link's {plain(param)}: it has {len(raw):,} characters; this setting takes at "
            f"most {max_chars:,}."
        )
        return
    try:
        value = cast(raw)
    except (TypeError, ValueError, OverflowError):
        st.warning(f"Ignored the link's {plain(param)}={plain(raw)}: not a valid value.")
        return
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        st.warning(f"Ignored the link's {plain(param)}={plain(raw)}: it goes from {bounds[0]:,} to {bounds[1]:,}.")
        return
    st.session_state[widget_key] = value


def cap_text(key: str, what: str, limit: int) -> None:
    """A text field's value (typed, pasted or from a link) cut to `limit` characters before any
    work, saying so in the sidebar prompt's words."""
    text = st.session_state.get(key)
    if isinstance(text, str) and len(text) > limit:
        st.warning(
            f"The {what} had {len(text):,} characters; this server takes at most {limit:,}: kept the first {limit:,}."
        )
        st.session_state[key] = text[:limit]


def clamp_int(key: str, low: int, high: int, default: int, what: str) -> int:
    """An integer setting (a link's, or one remembered from another model) put inside [low, high];
    a value outside, or not a whole number, is changed with a word saying to what."""
    value = st.session_state.get(key, default)
    try:
        n = int(value) if not isinstance(value, bool) else default
    except (TypeError, ValueError, OverflowError):  # NaN, inf, text
        n = default
    clamped = min(max(n, low), high)
    if clamped != value:
        st.info(f"{what} {plain(value)} is not available here (it goes from {low:,} to {high:,}): showing {clamped:,}.")
    put(key, clamped)
    return clamped


def url_set(defaults: dict | None = None, **params) -> None:
    """Write the current settings into the URL (only the ones that changed), in one update:
    each assignment sends the browser a message of its own (up to 7 a run on the Tour).
    A setting the address leaves out and whose value is its default (`defaults`: what the page
    shows when the link lacks it) stays out: every change to the address makes the browser push
    a history entry (Streamlit's frontend calls history.pushState for a query string the script
    sets), so writing the defaults a link left out made Back need two presses to leave a page.
    Every value, default or not, is noted per page (`shown_settings`): a class room's push
    carries them all (ui/rooms/live.py), so a student sees the teacher's view, not their own."""
    defaults = {name: str(value) for name, value in (defaults or {}).items()}
    shown = st.session_state.setdefault("links.shown", {})  # every setting this screen shows, defaults too
    shown.setdefault(st.session_state.get("app.page"), {}).update({name: str(v) for name, v in params.items()})
    changed = {
        name: str(value)
        for name, value in params.items()
        if st.query_params.get(name) != str(value) and (name in st.query_params or defaults.get(name) != str(value))
    }
    if changed:
        st.query_params.update(changed)


def shown_settings(page: str | None) -> dict[str, str]:
    """Every link setting `page` showed on this screen's last runs (defaults included)."""
    return dict(st.session_state.get("links.shown", {}).get(page, {}))


def put(key: str, value) -> None:
    """st.session_state[key] = value, written only when it changes it. Each write to a widget's key
    tells the browser to show the script's value when the run ends, replacing whatever the person
    typed, picked or pressed while the run was going (a second arrow key on a slider, a word typed
    into the prompt): a write of the same value every run would lose that input. A page's first run
    since another page writes it anyway: there the key may still hold the old page's value while
    the new page's widget starts from its default (app.py sets "app.arrived")."""
    ss = st.session_state
    if ss.get("app.arrived", True) or key not in ss or not _same(ss[key], value):
        ss[key] = value


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):  # (an array's == is not one truth value)
        return False


def restore(*widget_keys: str) -> None:
    """Streamlit drops a widget's value when the page changes; put back the remembered one."""
    for key in widget_keys:
        shadow = "keep." + key
        if shadow in st.session_state:
            put(key, st.session_state[shadow])


def remember(*widget_keys: str) -> None:
    """Save widget values (as an on_change callback, so a user's edit wins over the old copy)."""
    for key in widget_keys:
        if key in st.session_state:
            st.session_state["keep." + key] = st.session_state[key]


def keep(key: str, *shape) -> dict:
    """Widget kwargs for a value that survives page changes: `st.slider(..., **keep("x.y"))`.
    A slider's range is part of its identity in Streamlit: where it follows the model or prompt,
    give what it follows as `shape`, and a new range hands the value to the new slider (which would
    start at its low end: `put` leaves a value it already holds unwritten)."""
    ss = st.session_state
    if shape:
        shapes = ss.setdefault("links.shapes", {})
        if shapes.get(key) != shape and key in ss:
            ss[key] = ss[key]
        shapes[key] = shape
    return {"key": key, "on_change": remember, "args": (key,)}
