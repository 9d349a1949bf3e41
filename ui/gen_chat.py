"""The generation page's chat mode: system and user messages through the model's own chat
template (tfm.text.chat), the rendered prompt as tokens with the special tokens marked, and the
tokens that end the assistant's turn (generation stops at them)."""

from __future__ import annotations

import streamlit as st

import tfm
from tfm.text.chat import ChatMessage, ChatPrompt, chat_prompt, has_chat
from tfm.viz.chat import chat_chips
from ui import links
from services import server
from ui.text import message

MODES = ("Chat", "Plain text")
KEYS = ("gen.mode", "gen.system", "gen.user")
DEFAULTS = dict(zip(KEYS, ("Chat", "You are a helpful assistant.", "What is the capital of France?")))


def chat_controls(lm: tfm.LM) -> ChatPrompt | None:
    """The mode switch (only for a tokenizer with a chat template) and, in chat mode, the two
    messages and their rendered tokens. None in plain-text mode (the sidebar's prompt is used)."""
    if not has_chat(lm.tokenizer):
        return None
    ss = st.session_state
    links.restore(*KEYS)
    for key, value in DEFAULTS.items():
        ss.setdefault(key, value)
    mode = st.radio(
        "Prompt",
        MODES,
        horizontal=True,
        **links.keep("gen.mode"),
        help="Chat: your messages go through the model's chat template, as a chat app sends them. "
        "Plain text: the sidebar's prompt, continued as it is.",
    )
    if mode != "Chat":
        return None
    cap = server.limits().max_prompt_chars
    c = st.columns([2, 3])
    links.cap_text("gen.system", "system message", cap)  # a paste is cut with a word, not dropped
    links.cap_text("gen.user", "user message", cap)
    system = c[0].text_area("System message (empty: none)", height=110, **links.keep("gen.system"))
    user = c[1].text_area("User message", height=110, **links.keep("gen.user"))
    messages = ([ChatMessage("system", system)] if system.strip() else []) + [ChatMessage("user", user)]
    try:  # not cached: a real template renders in about a millisecond, and a byte-bounded cache would
        # keep every conversation typed (they hold no tensors, so they would never be dropped)
        prompt = chat_prompt(lm.tokenizer, messages, cap)
    except ValueError as e:
        st.error(f"This chat cannot be sent to the model: {message(e)}")
        st.stop()
    show_prompt(lm, prompt)
    return prompt


def show_prompt(lm: tfm.LM, prompt: ChatPrompt) -> None:
    tok = lm.tokenizer
    stops = ", ".join(f"`{tok.display_piece(i)}`" for i in sorted(prompt.stop_ids)) or "none"
    with st.expander(
        f"What the model reads: {len(prompt.ids)} tokens, {sum(prompt.special)} of them special", expanded=True
    ):
        st.html(chat_chips(tok.display_pieces(prompt.ids), list(prompt.ids), list(prompt.special)))
        st.caption(
            "Dark chips are special tokens, the template's turn markers. Text you type that spells one "
            "(say `<|im_end|>`) becomes that special token too, as with Hugging Face's apply_chat_template: "
            f"this is how typed turn markers can fool a chat model. Generation stops when the model writes "
            f"{stops}: the end of its turn."
        )
