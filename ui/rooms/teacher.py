"""The teacher's side of the Class page: open or take up a room, show its code, link and QR
code, ask a question about the prompt on screen, watch the answers' histogram fill, reveal the
model's answer, export the results, close the room."""

from __future__ import annotations

import io
import time

import segno
import streamlit as st

from tfm.teach import questions

from ui.run import current_run
from services.rooms import export, rules
from ui.rooms import identity, live
from ui.rooms.answers import answers_chart, show_prompt
from ui.text import message, plain

KINDS = {
    "next_options": "Next token: pick one of four",
    "next_typed": "Next token: type it",
    "head": "Which head does it?",
    "sampling": "What temperature / top-p does",
    "estimate": "Estimate a token's probability",
}
SCORES = ("repeat_induction", "repeat_previous_token", "previous_token", "induction", "first_token", "duplicate_token")
LIVE_SECONDS = 1.0  # the projected histogram's refresh while a question is open


def class_url(code: str, **extra: str) -> str:
    """The Class page's address as this browser reached the app, with `room=` (and `extra`)."""
    here = (st.context.url or "").split("?")[0]
    base = here.rsplit("/", 1)[0] if here.count("/") > 2 else here.rstrip("/")
    query = "&".join(f"{k}={v}" for k, v in {"room": code, **extra}.items())
    return f"{base}/classroom?{query}"


def qr_png(url: str) -> bytes:
    buf = io.BytesIO()
    segno.make(url, error="m").save(buf, kind="png", scale=8, border=2)
    return buf.getvalue()


def open_room() -> None:
    try:
        made = live.store().create(identity.client())
    except ValueError as e:
        st.error(f"No room was opened: {message(e)}")
        return
    live.leave()
    st.session_state["room.code"], st.session_state["room.key"] = made.code, made.teacher_key
    st.rerun()


def take_up() -> None:
    """A private teacher link (`?room=CODE&teacher=KEY`): the key moves into this session and
    out of the address bar, so a projected screen never shows it."""
    qp = st.query_params
    key, code = qp.get("teacher"), qp.get("room", "")
    del qp["teacher"]
    try:
        code = live.store().take_up(code, key, identity.screen())
    except (ValueError, PermissionError) as e:
        st.error(f"This teacher link did not open its room: {message(e)}")
        return
    live.leave()
    st.session_state["room.code"], st.session_state["room.key"] = code, key


def header(room) -> None:
    url = class_url(room.code)
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"## Join with code **{rules.shown_code(room.code)}**")
        st.code(url, language=None, wrap_lines=True)
    right.image(qr_png(url), caption="Scan to join", width=240)
    with st.expander("Your teacher link (private: do not project it)"):
        st.caption("Opens this room as its teacher on another screen, until the room ends.")
        st.code(class_url(room.code, teacher=st.session_state["room.key"]), language=None, wrap_lines=True)


def _question(run, kind: str):
    """A question about the prompt on screen, with the model's answer, from this screen's trace."""
    logits = run.trace.logits_at(-1)
    if kind in ("next_options", "next_typed"):
        return questions.ask_next_token(run.lm, logits, typed=kind == "next_typed")
    if kind == "head":
        table = run.head_table()
        score = st.session_state.get("room.score", SCORES[0])
        return questions.ask_head(table, score)
    if kind == "sampling":
        ss = st.session_state
        return questions.ask_sampling(
            run.lm, logits, ss.get("room.t", 0.5), ss.get("room.top_p", 1.0), ss.get("room.measure", "top_prob")
        )
    return questions.ask_estimate(run.lm, logits, st.session_state.get("room.token", int(logits.argmax())))


def ask_form(run) -> None:
    st.subheader("Ask the class")
    st.caption("About the prompt and model in the sidebar: every student's screen opens this page with them.")
    kind = st.selectbox("Question", list(KINDS), format_func=KINDS.get, key="room.kind")
    if kind == "head":
        st.selectbox("Highest score of", SCORES, key="room.score", format_func=lambda s: s.replace("_", " "))
    elif kind == "sampling":
        c1, c2, c3 = st.columns(3)
        c1.select_slider("Temperature", [0.1, 0.25, 0.5, 0.7, 1.0, 1.5, 2.0], value=0.5, key="room.t")
        c2.select_slider("Top-p", [0.5, 0.8, 0.9, 0.95, 1.0], value=1.0, key="room.top_p")
        c3.radio(
            "Ask for",
            ["top_prob", "kept"],
            key="room.measure",
            format_func={"top_prob": "top token's probability", "kept": "tokens kept"}.get,
        )
    elif kind == "estimate":
        top = run.trace.logits_at(-1).topk(10).indices.tolist()
        st.selectbox("Token", top, key="room.token", format_func=lambda i: plain(run.lm.tokenizer.display_piece(i)))
    if st.button("Ask the class", type="primary", key="room.ask", icon="❓"):
        ss = st.session_state
        try:
            q, truth = _question(run, kind)  # on this screen's prompt, which the push carries
            moment = live.push()
            if moment is None:
                return
            live.store().ask(
                ss["room.code"], ss["room.key"], questions.to_json(q), questions.truth_to_json(truth), moment
            )
        except (ValueError, PermissionError) as e:
            st.error(f"Not asked: {message(e)}")
            return
        st.rerun()  # the answers' panel above shows the new question now


@st.fragment(run_every=LIVE_SECONDS)
def live_answers() -> None:
    """The open question and its answers' histogram (counts only), refreshed every second."""
    ss = st.session_state
    if live.role() != "teacher":
        return
    room = live.store().room(ss["room.code"])
    if room is None:
        return
    st.metric("Students in the room", room.students)
    if room.question is None:
        st.info("No question yet: ask one below.")
        return
    q = room.question
    question = questions.from_json(q.spec)
    counts = live.store().counts(room.code, q.qid)
    st.markdown(f"### Question {q.qid}: {plain(question.text, 200)}")
    show_prompt(q)
    answers_chart(question, q, counts, room.students, "room.live")
    if q.state == "open":
        st.button(
            "Reveal the model's answer",
            type="primary",
            key="room.reveal",
            icon="🎯",
            on_click=_reveal,
            args=(room.code, q.qid),
        )
    if ss.get("room.error"):
        st.error(ss.pop("room.error"))


def _reveal(code: str, qid: int) -> None:
    """(A button's callback: it runs before the fragment draws again, which then shows the reveal.)"""
    try:
        live.store().reveal(code, st.session_state["room.key"], qid)
    except (ValueError, PermissionError) as e:
        st.session_state["room.error"] = f"Not revealed: {message(e)}"


def panel() -> None:
    ss = st.session_state
    room = live.store().room(ss["room.code"])
    if room is None:
        live.leave("The room has ended.")
        st.rerun()
    header(room)
    live_answers()
    run = current_run()
    ask_form(run)
    st.divider()
    c1, c2 = st.columns(2)
    with c1:
        export_button(room.code)
    with c2.popover("Close the room…", icon="🗑️"):
        st.warning("Closing ends the room for every student and deletes all its answers. Export them first.")
        if st.button("Yes: close it and delete its answers", key="room.close", type="primary"):
            live.store().close(room.code, ss["room.key"])
            live.leave("The room is closed and its data deleted.")
            st.rerun()


def export_button(code: str) -> None:
    """The CSV as the store holds it at the moment of the click, then its download. (Streamlit's
    deferred download data keeps the file it makes unreferenced until the browser fetches it, and
    sessions ending meanwhile delete it: the download failed in a class whose phones came and went.)"""
    ss = st.session_state
    if st.button("Export the results (CSV)", key="room.export", icon="📥"):
        try:
            ss["room.csv"] = (export.results_csv(live.store().results(code, ss["room.key"])), time.strftime("%H:%M:%S"))
        except (ValueError, PermissionError) as e:
            st.error(f"No export: {message(e)}")
    if ss.get("room.csv"):
        text, when = ss["room.csv"]
        st.download_button(
            f"Download class-{code}.csv (as of {when})",
            text,
            file_name=f"class-{code}.csv",
            mime="text/csv",
            key="room.csv_file",
            on_click="ignore",
            icon="💾",
        )
