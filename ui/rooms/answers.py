"""What teacher and student both see of a question: the prompt it is about and the histogram of
the class's answers (after the reveal, with the model's answer marked)."""

from __future__ import annotations

import streamlit as st

from tfm.teach import questions
from tfm.viz import classroom as classroom_figs
from tfm.viz.attention import plotly_text
from ui import charts
from ui.text import plain


def show_prompt(q) -> None:
    """The prompt (and model) the question is about and is graded on, the same on every screen."""
    params = dict(q.moment.params) if q.moment else {}
    if params.get("prompt"):
        st.caption(f"About this prompt (model {plain(params.get('model', ''), 60)}), ending:")
        st.code(params["prompt"][-300:], language=None, wrap_lines=True)


NO_TOOLBAR = {"displayModeBar": False}  # (on a phone plotly's toolbar covered the histogram's title)


def answers_chart(question, q, counts: dict[str, int], students: int, key: str) -> None:
    """The histogram of answers (and after the reveal, the model's answer in red). Typed tokens
    count together whatever their case and spaces (questions.bucket), and each bar shows the
    spelling most students typed, not a lowercased one."""
    binned: dict[str, int] = {}
    spelled: dict[str, dict[str, int]] = {}
    for text, n in counts.items():
        try:
            label = questions.bucket(question, text)
        except ValueError:
            label = "?"
        binned[label] = binned.get(label, 0) + n
        forms = spelled.setdefault(label, {})
        forms[text.strip() or text] = forms.get(text.strip() or text, 0) + n
    truth = questions.truth_from_json(q.truth) if q.truth else None
    mark = questions.model_bucket(question, truth) if truth else None
    order = questions.bucket_order(question, binned)
    if order is None and isinstance(question, questions.NextToken) and not question.options:
        shown = {label: max(sorted(forms), key=forms.get) for label, forms in spelled.items()}
        if truth and mark not in shown:
            shown[mark] = truth.top[0][1].strip() or mark
        binned = {shown[label]: n for label, n in binned.items()}
        mark = shown.get(mark, mark)
    n = sum(counts.values())
    # (named too: a bar nobody chose has no width to be red in)
    title = f"{n} of {students} answered" + (f" · red: the model's, {plotly_text(mark)}" if mark else "")
    charts.show(classroom_figs.answer_bars(binned, title, mark, order), "class answers", key=key, config=NO_TOOLBAR)
    if truth:
        st.success(f"**The model:** {plain(truth.summary, 300)}")
