"""The student's side of the Class page (a phone, 390 px wide): join with the code, answer the
open question (one answer, which a later one replaces), and after the reveal see privately how
close the answer was, and the class's histogram (counts only)."""

from __future__ import annotations

import streamlit as st

from tfm.teach import questions
from tfm.viz import classroom as classroom_figs

from ui import charts
from ui.rooms import identity, live
from services.rooms import rules
from ui.rooms.answers import NO_TOOLBAR, answers_chart, show_prompt
from ui.text import head_label
from ui.text import message, plain


def join_form() -> None:
    ss = st.session_state
    if "room.join_code" not in ss and isinstance(st.query_params.get("room"), str):
        ss["room.join_code"] = st.query_params["room"][:20]  # the join link's code, typed in for them
    with st.form("room.join", border=True):
        # No max_chars: Streamlit would cut a longer value without a word; the store refuses it, saying why.
        st.text_input("Join code", key="room.join_code", placeholder="ABCDE-FGHJK")
        st.text_input(
            f"Nickname (optional, up to {rules.NICK_MAX} characters: only your teacher sees it)", key="room.nick"
        )
        pressed = st.form_submit_button("Join the class", type="primary", key="room.join_go")
    if not pressed:
        return
    try:
        code, sid = live.store().join(ss.get("room.join_code", ""), identity.screen(), ss.get("room.nick", ""))
    except ValueError as e:
        st.error(f"Not joined: {message(e)}")
        return
    live.leave()
    ss.pop("room.left", None)
    ss["room.code"], ss["room.sid"] = code, sid
    st.query_params["room"] = code  # (who this is stays in the browser's cookie: identity.py)
    st.rerun()


def _answer_widget(question, qid: int) -> str | None:
    """The answer as typed or picked (None: nothing yet)."""
    key = f"room.answer.{qid}"
    if isinstance(question, questions.NextToken) and question.options:
        st.html(BIG_RADIOS)
        return st.radio("Your answer", question.options, key=key, index=None, format_func=plain)
    if isinstance(question, questions.WhichHead):
        return _head_picker(question, key)
    hint = {"next_token": "the next token, e.g. Paris", "sampling": "a number", "estimate": "0.3 or 30%"}[question.kind]
    return st.text_input(f"Your answer (up to {rules.ANSWER_MAX} characters)", key=key, placeholder=hint) or None


def _pick_from_grid(key: str) -> None:
    points = st.session_state.get(f"{key}.grid", {}).get("selection", {}).get("points", [])
    if points:
        st.session_state[f"{key}.layer"], st.session_state[f"{key}.head"] = int(points[0]["y"]), int(points[0]["x"])


def _head_picker(question, key: str) -> str | None:
    """The grid (nothing picked at first: red means the model's answer elsewhere), then the
    picked layer and head side by side, right above Send (a phone scrolls once)."""
    ss = st.session_state
    chosen = (ss.get(f"{key}.layer"), ss.get(f"{key}.head"))
    chosen = None if None in chosen else chosen
    charts.show(
        classroom_figs.head_grid(question.n_layer, question.n_head, chosen),
        "heads",
        key=f"{key}.grid",
        on_select=lambda: _pick_from_grid(key),
        selection_mode="points",
        config=NO_TOOLBAR,
    )
    with st.container(horizontal=True):
        layer = st.number_input("Layer", 0, question.n_layer - 1, value=None, key=f"{key}.layer", placeholder="pick")
        head = st.number_input("Head", 0, question.n_head - 1, value=None, key=f"{key}.head", placeholder="pick")
    return None if layer is None or head is None else head_label(layer, head)


# Radio options a thumb can hit on a phone (Streamlit draws them ~22 px tall).
BIG_RADIOS = """<style>[data-testid="stRadio"] [data-testid="stRadioOption"] { min-height: 44px; display: flex;
  align-items: center; width: 100%; font-size: 1.1rem; } [data-testid="stRadioGroup"] > div { width: 100%; }</style>"""


def _answer_to_send(question, qid: int) -> str | None:
    """The answer's widgets and Send: the answer when Send was pressed with one, else None.
    A picked or typed answer travels in a form, with the press that sends it: one message from the
    phone, no run of the page per tap, and no pick that a run in between could leave unsent. The
    head grid cannot sit in a form (a chart's selection reruns), so it keeps a button of its own."""
    send = {"label": "Send my answer", "type": "primary", "key": f"room.send.{qid}"}
    if isinstance(question, questions.WhichHead):
        given = _answer_widget(question, qid)
        pressed = st.button(**send, disabled=given is None)
    else:
        with st.form(f"room.form.{qid}", border=False, enter_to_submit=True):
            given = _answer_widget(question, qid)
            pressed = st.form_submit_button(**send)
    if pressed and given is None:
        st.warning("Pick or type an answer first, then press Send.")
    return given if pressed else None


def _send(code: str, qid: int, question, given: str) -> None:
    try:
        live.store().answer(code, st.session_state["room.sid"], qid, questions.parse_answer(question, given))
    except (ValueError, PermissionError) as e:
        st.error(f"Not sent: {message(e)}")
        return
    st.session_state[f"room.sent.{qid}"] = True


def _reveal(room, q, question, mine: str | None) -> None:
    truth = questions.truth_from_json(q.truth)
    if mine is None:
        st.info(f"You did not answer. **The model:** {plain(truth.summary, 300)}")
    else:
        g = questions.grade(question, truth, mine)
        (st.success if g.correct else st.warning)(("✅ Right! " if g.correct else "Not quite. ") + plain(g.text, 300))
    answers_chart(question, q, live.store().counts(room.code, q.qid), room.students, f"room.result.{q.qid}")


def panel() -> None:
    ss = st.session_state
    room = live.store().room(ss["room.code"])
    if room is None:
        live.leave("The class room has ended.")
        st.rerun()
    nick = live.store().nickname(room.code, ss["room.sid"])  # (the join form's own value goes with the form)
    if nick:
        st.caption(f"You are {plain(nick, 30)}")
    q = room.question
    if q is None:
        st.info("Waiting for your teacher's first question…")
        return
    question = questions.from_json(q.spec)
    st.markdown(f"#### Question {q.qid}: {plain(question.text, 200)}")
    show_prompt(q)
    mine = live.store().my_answer(room.code, ss["room.sid"], q.qid)
    if q.state != "open":
        _reveal(room, q, question, mine)
        return
    given = _answer_to_send(question, q.qid)
    if given is not None:
        _send(room.code, q.qid, question, given)
        mine = live.store().my_answer(room.code, ss["room.sid"], q.qid)
    if mine is not None:
        st.success(f"Your answer: **{plain(mine, 80)}**. You can change it until your teacher reveals the model's.")
