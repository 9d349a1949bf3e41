"""Example prompts on a page: buttons that put a prompt measured on the running model
(`tfm.teach.examples`, cached per model by `ModelRun.examples`) into the sidebar and open the
page on what was measured.

    examples.offer("attention", run)      # one line, after the page's `run = current_run()`
"""

from __future__ import annotations

import streamlit as st

from tfm.teach.examples import Example
from ui.text import plain

# A setting of an example (tfm.teach.examples.Example.settings) -> the page's widget it goes to.
WIDGETS = {
    "attention": {"layer": "attn.layer", "head": "attn.head"},
    "why": {"position": "why.pos", "token": "why.token", "versus": "why.versus"},
    "logit_lens": {},
    "features": {"feature": "features.feature"},
}
# What the page shows the example with: the one head's pattern; the attribution tab.
SHOWN = {"attention": {"attn.mode": "head", "attn.view": "Pattern"}, "why": {"why.tab": "Attribution"}}
# Settings an example forgets so the page opens on its default: the lens window at the prompt's
# end, where the example's position is.
FORGOTTEN = {"logit_lens": ("lens.start",)}


def _apply(page: str, example: Example) -> None:
    """The button's callback (before the page runs): the prompt and the page's settings, with
    the copies pages restore after a page switch (`ui.links.keep`)."""
    ss = st.session_state
    widgets = WIDGETS[page]
    values = {
        "sidebar.prompt": example.prompt,
        **SHOWN.get(page, {}),
        **{widgets[name]: value for name, value in example.settings.items() if name in widgets},
    }
    for key, value in values.items():
        ss[key] = ss["keep." + key] = value
    for key in FORGOTTEN.get(page, ()):
        ss.pop(key, None)
        ss.pop("keep." + key, None)


def offer(page: str, run) -> None:
    """`page`'s example buttons (`Try: …`, what was measured on hover); the loaded example's line
    under them. A model where no candidate reaches the bar gets one line saying so."""
    found = run.examples(page)
    if found.examples:
        with st.container(horizontal=True):
            for i, example in enumerate(found.examples):
                st.button(
                    f"Try: {plain(example.label, 100)}",
                    key=f"{page}.example.{i}",
                    help=plain(example.why, 300),
                    on_click=_apply,
                    args=(page, example),
                )
        loaded = [e for e in found.examples if e.prompt == st.session_state.get("sidebar.prompt")]
        if loaded:
            st.caption(f"Example: {plain(loaded[0].why, 300)}")
    elif found.measured:
        st.caption(
            f"No example prompt here for this model: none of the candidates shows {plain(found.bar, 200)}. "
            f"The best: {plain(found.measured[0].why, 300)}"
        )
