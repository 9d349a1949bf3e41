"""The "Why this token?" page's patching panel: a clean and a corrupted prompt (the example this
model knows, or typed), each head's output and the residual stream patched from the clean run into
the corrupted one (`run.patch_prompts`), drawn with `tfm.viz.why`.
"""

from __future__ import annotations

from dataclasses import asdict, astuple

import streamlit as st

from tfm.analysis import attribution, patching
from tfm.core.escape import escape_markdown
from tfm.text.token_view import token_labels
from tfm.viz import why as why_figs
from ui import charts, links
from ui.text import message

PATCH_MAX_TOKENS = 128  # patching runs 1 + L*H + L*T rows: bound T before paying for them
PAIR_KEYS = ("why.clean", "why.corrupt", "why.answer", "why.wrong")  # a tfm.analysis.patching.PromptPair's fields
PATCH_MAX_CHARS = 2_000  # characters of a patching prompt, checked before tokenizing (128 tokens fit)


def opening_pair(run) -> dict:
    """The patching panel's opening prompts (by `PAIR_KEYS`): the example this model knows."""
    return dict(zip(PAIR_KEYS, astuple(run.opening_pair())))


def patch_panel(run, n_layer: int) -> dict:
    st.caption(
        "Run the **clean** prompt and the **corrupted** one; then, one at a time, copy a head's output "
        "or the residual stream at one layer and position from the clean run into the corrupted run. "
        "1 = that patch alone restores the clean answer, 0 = it changes nothing."
    )
    clean, corrupt, answer, wrong = _pair_inputs(run)
    try:
        c_ids, res = _patched(run, clean, corrupt, answer, wrong)
    except ValueError as e:
        _refused(e)
        return {}
    st.markdown(
        f"logit({escape_markdown(repr(answer))}) − logit({escape_markdown(repr(wrong))}): clean "
        f"**{res.clean:.3f}**, corrupted **{res.corrupt:.3f}**."
    )
    charts.show(
        why_figs.head_heatmap(res.heads.numpy(), "Patching each head's output (all positions)", "restored"),
        key="why.patch_heads",
    )
    _resid_chart(run, c_ids, res, n_layer)
    return {
        "patching": {
            "clean": clean,
            "corrupt": corrupt,
            "answer": answer,
            "wrong": wrong,
            "clean_metric": res.clean,
            "corrupt_metric": res.corrupt,
            "heads": res.heads.tolist(),
            "resid": res.resid.tolist(),
        }
    }


def _pair_inputs(run) -> tuple[str, str, str, str]:
    """The clean and corrupted prompts and their answer tokens, as typed (or from a link, cut first)."""
    for key, what, limit in (
        ("why.clean", "clean prompt", PATCH_MAX_CHARS),
        ("why.corrupt", "corrupted prompt", PATCH_MAX_CHARS),
        ("why.answer", "answer token", links.LINK_VALUE_CHARS),
        ("why.wrong", "corrupted answer token", links.LINK_VALUE_CHARS),
    ):
        links.cap_text(key, what, limit)  # before any tokenizing
    c1, c2 = st.columns(2)
    clean = c1.text_input("Clean prompt", key="why.clean")
    corrupt = c2.text_input("Corrupted prompt (same number of tokens)", key="why.corrupt")
    answer = c1.text_input("Answer token (clean)", key="why.answer")
    wrong = c2.text_input("Answer token (corrupted)", key="why.wrong")
    links.url_set(
        clean=clean, corrupt=corrupt, answer=answer, wrong=wrong, defaults=asdict(run.opening_pair())
    )  # a PromptPair's fields are the link's names
    return clean, corrupt, answer, wrong


def _patched(run, clean: str, corrupt: str, answer: str, wrong: str):
    """(the clean ids, the patching result); a ValueError saying what to change when the pair
    cannot be patched (lengths differ or out of bounds, an answer not one token, both the same)."""
    lm, tok = run.lm, run.lm.tokenizer
    a_id = attribution.token_id(tok, answer, attribution.n_words(lm))
    w_id = attribution.token_id(tok, wrong, attribution.n_words(lm))
    c_ids, x_ids = tuple(tok.encode(clean)), tuple(tok.encode(corrupt))
    patching.same_length(tok, c_ids, x_ids)
    most = min(PATCH_MAX_TOKENS, lm.config.context_length)
    if not c_ids or len(c_ids) > most:
        raise ValueError(f"patching takes prompts of 1 to {most} tokens; these have {len(c_ids)}")
    if a_id == w_id:
        raise ValueError("the two answer tokens are the same: the metric is their logit difference")
    return c_ids, run.patch_prompts(c_ids, x_ids, patching.Metric(len(c_ids) - 1, a_id, w_id))


def _refused(e: ValueError) -> None:
    """Why the pair was not patched: the untouched example not fitting this model says what to type."""
    if tuple(st.session_state.get(k) for k in PAIR_KEYS) in {astuple(p) for p in patching.EXAMPLES}:
        st.info(
            f"The example does not fit this model's vocabulary ({message(e)}). Type a clean and a "
            "corrupted prompt whose answers are single tokens of this model."
        )
    else:
        st.error(message(e))


def _resid_chart(run, c_ids, res, n_layer: int) -> None:
    labels = token_labels(run.lm.tokenizer, c_ids)
    charts.show(
        why_figs.heatmap(
            res.resid.numpy(),
            labels,
            [f"L{l}" for l in range(n_layer)],
            "Patching the residual stream entering each layer, one position at a time",
            "position (clean token)",
            "layer",
            "restored",
        ),
        key="why.patch_resid",
    )
