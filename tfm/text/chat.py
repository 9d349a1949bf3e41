"""Chat prompts: a model's chat template turned into the text and token ids it was trained on.

Equal to Hugging Face's `tokenizer.apply_chat_template(messages, tokenize=False,
add_generation_prompt=True)` (the text) and `tokenize=True` (the ids: the text encoded with
special-token text recognised, no bos added: templates write their own). The template is
untrusted and runs in `tfm.text.chat_sandbox` (bounded time and memory, one ValueError).

A tokenizer offers chat when it has `chat_template` (text) and `template_tokens` (the special
tokens' texts a template may use: `bos_token`, `eos_token`, ...; HF passes its
`special_tokens_map`). `end_of_turn_ids` says which tokens end the assistant's turn: the
tokenizer's end-of-text token plus the special token the template writes right after an
assistant message (`<|im_end|>` for ChatML, `<|eot_id|>` for Llama 3, `</s>` for Mistral).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.validate import check_int
from .chat_sandbox import render_template

__all__ = [
    "ROLES",
    "MAX_MESSAGES",
    "ChatMessage",
    "ChatPrompt",
    "has_chat",
    "render_chat",
    "chat_prompt",
    "end_of_turn_ids",
]

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")
MAX_MESSAGES = 64
_PROBE_REPLY = "tfm-probe-reply-7f3a"  # text no template writes by itself


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"a chat message's role is one of {', '.join(ROLES)}; got {str(self.role)[:40]!r}")
        if not isinstance(self.content, str):
            raise ValueError(f"a chat message's content is text, got {type(self.content).__name__}")


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered conversation: its text, its ids, which ids are special tokens (the view marks
    them), and the ids that end the assistant's turn (generation stops at them)."""

    text: str
    ids: tuple[int, ...]
    special: tuple[bool, ...]
    stop_ids: frozenset[int]


def has_chat(tokenizer) -> bool:
    """Whether this tokenizer carries a chat template."""
    return isinstance(getattr(tokenizer, "chat_template", None), str) and bool(tokenizer.chat_template)


def _template_of(tokenizer) -> str:
    if not has_chat(tokenizer):
        raise ValueError(
            "this model's tokenizer has no chat template: use plain text, or open a chat model "
            "(an instruct model's folder or GGUF file carries one)"
        )
    return tokenizer.chat_template


def render_chat(
    template: str, messages, *, add_generation_prompt: bool = True, template_tokens: dict[str, str] | None = None
) -> str:
    """The template's text for `messages` (ChatMessages or {"role", "content"} dicts), as HF's
    `apply_chat_template(..., tokenize=False)` renders it."""
    msgs = [m if isinstance(m, ChatMessage) else ChatMessage(m["role"], m["content"]) for m in messages]
    check_int("number of chat messages", len(msgs), 1, MAX_MESSAGES)
    return render_template(
        template,
        **dict(template_tokens or {}),
        messages=[{"role": m.role, "content": m.content} for m in msgs],
        tools=None,
        documents=None,
        add_generation_prompt=bool(add_generation_prompt),
    )


def chat_prompt(tokenizer, messages, max_message_chars: int) -> ChatPrompt:
    """Render `messages` with the tokenizer's template (generation prompt added) and encode it.
    Each message is at most `max_message_chars` characters (the server's prompt cap)."""
    cap = check_int("max_message_chars", max_message_chars, 1)
    msgs = [m if isinstance(m, ChatMessage) else ChatMessage(m["role"], m["content"]) for m in messages]
    for m in msgs:
        if len(m.content) > cap:
            raise ValueError(f"the {m.role} message has {len(m.content):,} characters; at most {cap:,} here")
    text = render_chat(_template_of(tokenizer), msgs, template_tokens=tokenizer.template_tokens)
    ids = tokenizer.encode(text, allow_special=True)
    specials = set(tokenizer.special_tokens.values())
    return ChatPrompt(text, tuple(ids), tuple(i in specials for i in ids), end_of_turn_ids(tokenizer))


def end_of_turn_ids(tokenizer) -> frozenset[int]:
    """The end-of-text id and the first special token the template writes after an assistant's
    message (found by rendering a one-exchange probe conversation)."""
    found = set() if tokenizer.eot_id is None else {tokenizer.eot_id}
    probe = [ChatMessage("user", "hello"), ChatMessage("assistant", _PROBE_REPLY)]
    try:
        text = render_chat(
            _template_of(tokenizer), probe, add_generation_prompt=False, template_tokens=tokenizer.template_tokens
        )
    except ValueError:  # a template that refuses the probe: the end-of-text token alone
        return frozenset(found)
    at = text.find(_PROBE_REPLY)
    if at >= 0:
        specials = set(tokenizer.special_tokens.values())
        after = tokenizer.encode(text[at + len(_PROBE_REPLY) :], allow_special=True)
        found.update(i for i in after[:1] if i in specials)
    if not found:
        raise ValueError(
            "this chat template ends an assistant's turn with no special token and the tokenizer "
            "has no end-of-text token: generation could not tell where the answer ends"
        )
    return frozenset(found)
