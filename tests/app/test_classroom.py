"""The Class page (issue #43) as its users drive it: a teacher session and student sessions
(separate AppTests sharing this process's room store, a SQLite file of the test run). The
question's answer and each student's result are checked against the engine; hostile cases: a
student with a forged teacher key, guessed codes, a 1 MB nickname, markup in answers, an
answer flood, a forged teacher link."""

from __future__ import annotations

import csv
import io
import re

import pytest
import torch
from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP, as_shown, charts, decode, open_page
from tfm.viz import classroom as classroom_figs
from ui import models
from services import server
from services.rooms import DB_ENV, export, rules
from ui.rooms import live


@pytest.fixture(autouse=True)
def own_rooms(tmp_path, monkeypatch):
    """Each test its own room file: AppTest sessions are all one client ("test session id"), so
    one test's spent rate limits would refuse the next test's joins."""
    monkeypatch.setenv(DB_ENV, str(tmp_path / "rooms.sqlite3"))
    server.configure(None)


def teacher_room() -> tuple[AppTest, str, str]:
    at = open_page("classroom")
    at.button(key="room.open").click().run()
    assert not at.exception, at.exception
    return at, at.session_state["room.code"], at.session_state["room.key"]


def student(code: str, nick: str = "", timeout: float = 120) -> AppTest:
    """A student who opened the join link (`?room=CODE`) and joined."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params["room"] = code
    at.run()
    at.switch_page("pages/classroom.py").run()
    assert at.text_input(key="room.join_code").value == code
    at.text_input(key="room.nick").set_value(nick)
    at.button[[b.label for b in at.button].index("Join the class")].click().run()
    assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    return "\n".join(
        as_shown(e.value)
        for kind in ("markdown", "success", "warning", "info", "error", "caption")
        for e in at.get(kind)
        if isinstance(getattr(e, "value", None), str)
    )


def ask(at: AppTest, kind: str, **settings) -> None:
    at.selectbox(key="room.kind").set_value(kind).run()
    for key, value in settings.items():
        at.session_state[key] = value
    at.button(key="room.ask").click().run()
    assert not at.exception, at.exception


def histogram(at: AppTest) -> dict[str, int]:
    fig = next(f for f in charts(at) if " answered" in str(f["layout"]["title"]))
    bar = fig["data"][0]
    return dict(zip(bar["y"], (int(v) for v in decode(bar["x"]))))


def engine_top(prompt: str) -> tuple[str, float, list[str]]:
    lm = models.load_lm(models.bundled_model_spec(), "cpu")
    ids = lm.tokenizer.prompt_ids(prompt)
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0, -1]
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    probs = logits[:n].double().softmax(-1)
    order = torch.argsort(probs, descending=True)
    return (
        lm.tokenizer.display_piece(int(order[0])),
        float(probs[order[0]]),
        [lm.tokenizer.display_piece(int(i)) for i in order[:3]],
    )


def test_predict_then_reveal_counts_every_answer_and_grades_each_student_against_the_engine():
    teacher, code, key = teacher_room()
    ask(teacher, "next_options")
    prompt = teacher.session_state["sidebar.prompt"]
    top, p, top3 = engine_top(prompt)
    ada, bob = student(code, "Ada"), student(code, "Bob")
    for at in (ada, bob):  # joined, then followed the teacher's moment: the Class page, the same prompt
        assert at.session_state["app.page"] == "classroom" and at.session_state["sidebar.prompt"] == prompt
        assert set(top3) <= set(at.radio(key="room.answer.1").options)
    wrong = next(o for o in ada.radio(key="room.answer.1").options if o != top)
    for at, pick in ((ada, top), (bob, wrong)):
        at.radio(key="room.answer.1").set_value(pick)  # (in a form: sent with the press)
        at.button(key="room.send.1").click().run()
        assert "Your answer" in texts(at)
    teacher.run()
    assert histogram(teacher) == {top: 1, wrong: 1}
    assert "Ada" not in texts(bob) and top not in texts(bob).replace(wrong, "")  # no names, no truth yet
    teacher.button(key="room.reveal").click().run()
    assert f"{p:.3f}" in texts(teacher)
    ada.run(), bob.run()
    assert "Right!" in texts(ada) and f"{p:.3f}" in texts(ada)
    assert "Not quite" in texts(bob) and f"its top is {top!r} at {p:.3f}" in texts(bob)
    teacher.button(key="room.export").click().run()  # the CSV is built at the click, from the store
    assert [b.label for b in teacher.get("download_button") if b.label.startswith(f"Download class-{code}.csv")]
    assert teacher.session_state["room.csv"][0] == export.results_csv(live.store().results(code, key))
    rows = list(csv.DictReader(io.StringIO(teacher.session_state["room.csv"][0])))
    assert sorted((r["nickname"], r["answer"], r["correct"]) for r in rows) == [
        ("Ada", top, "yes"),
        ("Bob", wrong, "no"),
    ]
    assert all(f"{p:.3f}" in r["model's answer"] for r in rows)


def test_send_with_nothing_picked_says_so_and_sends_nothing():
    """The answer travels in a form with its Send (one message from a phone): Send before a pick
    is not an answer."""
    teacher, code, _ = teacher_room()
    ask(teacher, "next_options")
    bob = student(code, "Bob")
    bob.button(key="room.send.1").click().run()
    assert "Pick or type an answer first" in texts(bob) and "Your answer" not in texts(bob)
    assert sum(live.store().counts(code, 1).values()) == 0
    pick = bob.radio(key="room.answer.1").options[1]
    bob.radio(key="room.answer.1").set_value(pick)
    bob.button(key="room.send.1").click().run()  # the pick and the press in one run, as a form sends them
    assert f"Your answer: **{pick}**" in texts(bob).replace("\\", "")
    assert sum(live.store().counts(code, 1).values()) == 1


def test_after_the_reveal_the_models_answer_has_its_bar_even_when_nobody_gave_it():
    teacher, code, _ = teacher_room()
    ask(teacher, "next_options")
    top, _, _ = engine_top(teacher.session_state["sidebar.prompt"])
    bob = student(code, "Bob")
    wrong = next(o for o in bob.radio(key="room.answer.1").options if o != top)
    bob.radio(key="room.answer.1").set_value(wrong)  # (in a form: sent with the press)
    bob.button(key="room.send.1").click().run()
    teacher.button(key="room.reveal").click().run()
    bob.run()
    for at in (teacher, bob):
        fig = next(f for f in charts(at) if " answered" in str(f["layout"]["title"]))
        assert histogram(at) == {wrong: 1, top: 0}
        assert fig["layout"]["title"]["text"].endswith(f"red: the model's, {top}")
        assert fig["data"][0]["marker"]["color"][1] == classroom_figs.MODEL


def test_a_joined_student_sees_the_pages_title():
    _, code, _ = teacher_room()
    at = student(code, "Ada")
    assert at.session_state["room.code"] == code and [t.value for t in at.title] == ["Class"]


def test_a_students_nickname_stays_on_their_screen_past_the_join():
    _, code, _ = teacher_room()
    at = student(code, "Ada")
    for _ in range(3):  # the join form (whose field held it) is gone after the first run
        assert "You are Ada" in texts(at)
        at.run()
        assert not at.exception, at.exception
    quiet = student(code)
    quiet.run()
    assert "You are" not in texts(quiet)


def test_the_export_cannot_run_formulas_in_a_spreadsheet():
    teacher, code, key = teacher_room()
    ask(teacher, "next_typed")
    sid = live.store().join(code, "x", '=HYPERLINK("http://x")')[1]
    live.store().answer(code, sid, 1, "@SUM(1)")
    row = next(csv.DictReader(io.StringIO(export.results_csv(live.store().results(code, key)))))
    assert row["nickname"] == '\'=HYPERLINK("http://x")' and row["answer"] == "'@SUM(1)"


def test_a_student_with_a_forged_teacher_key_gets_no_teacher_controls():
    teacher, code, key = teacher_room()
    ada = student(code)
    sid = ada.session_state["room.sid"]
    for forged in ("guess", sid, key[:-2]):
        ada.session_state["room.code"], ada.session_state["room.key"] = code, forged  # (a refusal leaves the room)
        ada.run()
        assert not ada.exception and "teacher key is not the room's" in texts(ada)
        assert not [b for b in ada.button if b.key in ("room.push", "room.ask", "room.reveal", "room.close")]
    assert live.store().room(code).moment is None  # nothing was pushed


def test_guessed_codes_and_a_1mb_nickname_are_refused_with_a_message():
    teacher_room()
    at = open_page("classroom")
    join = [b.label for b in at.button].index("Join the class")
    at.text_input(key="room.nick").set_value("n" * 1_048_576)
    at.text_input(key="room.join_code").set_value(rules.new_code())
    at.button[join].click().run()
    assert "1,048,576 characters" in texts(at) and not at.exception
    at.text_input(key="room.nick").set_value("")
    for _ in range(rules.RATES["join_fail"][0] + 1):
        at.text_input(key="room.join_code").set_value(rules.new_code())
        at.button[join].click().run()
    assert "too many wrong tries" in texts(at) and "room.code" not in at.session_state


def test_markup_in_answers_shows_as_text_and_a_flood_counts_once():
    teacher, code, _ = teacher_room()
    ask(teacher, "next_typed")
    eve = student(code, "<b>Eve</b>")
    hostile = "<img src=x onerror=alert(1)> **b** [l](http://x)"
    eve.text_input(key="room.answer.1").set_value(hostile)  # (in a form: sent with the press)
    for _ in range(rules.RATES["answer"][0] + 3):
        eve.button(key="room.send.1").click().run()
    assert "too many tries" in texts(eve) and not eve.exception
    assert f"Your answer: **{hostile}**" in texts(eve)  # escaped: shown as typed, no image, no link
    echoed = [m.value for m in [*eve.markdown, *eve.success] if hostile[:4] in as_shown(m.value)]
    assert echoed and not any(re.search(r"(?<!\\)[<\[]", v) for v in echoed)
    teacher.run()
    labels = histogram(teacher)
    assert labels == {"&lt;img src=x onerror=alert(1)&gt; **b** [l](http://x)": 1}


def test_typed_tokens_count_together_and_show_as_most_students_typed_them():
    teacher, code, _ = teacher_room()
    ask(teacher, "next_typed")
    for nick, typed in (("a", " Paris"), ("b", "Paris"), ("c", "paris"), ("d", "Lyon")):
        at = student(code, nick)
        at.text_input(key="room.answer.1").set_value(typed)  # (in a form: sent with the press)
        at.button(key="room.send.1").click().run()
    teacher.run()
    assert histogram(teacher) == {"Paris": 3, "Lyon": 1}  # not lowercased "paris"


def test_a_teacher_link_takes_the_room_up_on_another_screen_and_a_forged_one_does_not():
    _, code, key = teacher_room()
    other = AppTest.from_file(APP, default_timeout=120)
    other.query_params.update({"room": code, "teacher": key})
    other.run()
    other.switch_page("pages/classroom.py").run()
    assert other.session_state["room.key"] == key and "teacher" not in other.query_params
    forged = AppTest.from_file(APP, default_timeout=120)
    forged.query_params.update({"room": code, "teacher": "x" * 50})
    forged.run()
    forged.switch_page("pages/classroom.py").run()
    assert "did not open its room" in texts(forged) and "room.key" not in forged.session_state


def browse(at: AppTest) -> AppTest:
    """A run as the browser sees it: a page the script switched to (following the teacher) is
    the page the next run opens. (AppTest keeps its own page until told; a browser does not.)"""
    at.run()
    at.switch_page(f"pages/{at.session_state['app.page']}.py")
    return at


def test_students_follow_each_pushed_view_and_one_who_steps_away_comes_back_on_request():
    teacher, code, _ = teacher_room()
    ada = student(code)
    teacher.switch_page("pages/next_token.py").run()
    teacher.text_area(key="sidebar.prompt").set_value("The cat sat on the").run()
    teacher.button(key="room.push").click().run()
    assert not teacher.exception
    browse(ada)
    assert ada.session_state["app.page"] == "next_token" and ada.session_state["sidebar.prompt"] == "The cat sat on the"
    assert ada.query_params["room"] == code and "me" not in ada.query_params  # who this is: a cookie, never the address
    assert ada.session_state["room.cookies"]["tfm_student"] == f"{code}.{ada.session_state['room.sid']}"
    teacher.switch_page("pages/tour.py").run()
    teacher.text_area(key="sidebar.prompt").set_value("Once upon a time").run()
    teacher.button(key="room.push").click().run()
    browse(ada)
    assert ada.session_state["app.page"] == "tour" and ada.session_state["sidebar.prompt"] == "Once upon a time"
    ada.text_area(key="sidebar.prompt").set_value("My own prompt").run()  # stepping away to explore
    browse(ada)
    assert [b for b in ada.button if b.key == "room.back"]
    teacher.text_area(key="sidebar.prompt").set_value("The dog ran to the").run()
    teacher.button(key="room.push").click().run()
    browse(ada)
    assert ada.session_state["sidebar.prompt"] == "My own prompt"  # not pulled back while away
    ada.button(key="room.back").click()
    browse(ada)
    assert ada.session_state["app.page"] == "tour" and ada.session_state["sidebar.prompt"] == "The dog ran to the"
    assert not ada.exception and not [b for b in ada.button if b.key == "room.back"]


def send_and_reveal(teacher, pupil, n: int) -> None:
    """The student sends answer n, the teacher's screen draws it and reveals; the student looks."""
    pupil.button(key=f"room.send.{n}").click().run()
    teacher.run()  # (the run that asked drew the answers before asking)
    teacher.button(key="room.reveal").click().run()
    browse(pupil)


def test_head_sampling_and_estimate_questions_are_graded_by_the_engine():
    from tfm.analysis import head_table
    from tfm.generation.sampling import SamplingSettings, next_token

    teacher, code, _ = teacher_room()
    ada = student(code)
    lm = models.load_lm(models.bundled_model_spec(), "cpu")
    ids = lm.tokenizer.prompt_ids(teacher.session_state["sidebar.prompt"])
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]), trace=True)
    scores = head_table(lm, out.trace, ids).scores["previous_token"]
    best = divmod(int(scores.argmax()), scores.shape[1])
    ask(teacher, "head", **{"room.score": "previous_token"})
    browse(ada)
    ada.number_input(key="room.answer.1.layer").set_value(best[0])
    ada.number_input(key="room.answer.1.head").set_value(best[1]).run()
    send_and_reveal(teacher, ada, 1)
    assert "Right!" in texts(ada) and f"Layer {best[0]} head {best[1]} scores {float(scores.max()):.3f}" in texts(ada)
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    kept = int(next_token(out.logits[0, -1], SamplingSettings(1.0, 0, 0.5), n).n_kept)
    ask(teacher, "sampling", **{"room.t": 1.0, "room.top_p": 0.5, "room.measure": "kept"})
    browse(ada)
    ada.text_input(key="room.answer.2").set_value(str(kept * 4 + 4))  # (in a form: sent with the press)
    send_and_reveal(teacher, ada, 2)
    assert "Not quite" in texts(ada) and f"the model keeps {kept:,}" in texts(ada)
    probs = out.logits[0, -1, :n].double().softmax(-1)
    token = int(probs.argmax())
    ask(teacher, "estimate", **{"room.token": token})
    browse(ada)
    ada.text_input(key="room.answer.3").set_value(
        f"{100 * float(probs[token]) + 2:.1f}%"
    )  # (in a form: sent with the press)
    send_and_reveal(teacher, ada, 3)
    assert "Right!" in texts(ada) and f"the model: {float(probs[token]):.3f}" in texts(ada)
    assert not ada.exception and not teacher.exception


def test_a_teacher_projecting_the_tour_pushes_and_reveals_from_the_page_itself():
    """Presentation mode hides the sidebar (its CSS), where the push button lives: on a projected
    Tour the teacher's push, the open question's reveal and the way to the Class page are above
    the page instead."""
    teacher, code, _ = teacher_room()
    ask(teacher, "next_options")
    top, p, _ = engine_top(teacher.session_state["sidebar.prompt"])
    ada = student(code)
    teacher.switch_page("pages/tour.py").run()
    assert [b.key for b in teacher.sidebar.button if b.key == "room.push"] == ["room.push"]
    teacher.toggle(key="tour.present").set_value(True).run()
    assert not teacher.exception and any("stSidebar" in md.value for md in teacher.markdown)  # projecting
    assert not [b for b in teacher.sidebar.button if b.key.startswith("room.")]
    assert {b.key for b in teacher.main.button if b.key.startswith("room.")} == {"room.push", "room.reveal_here"}
    teacher.selectbox(key="tour.step").set_value(teacher.selectbox(key="tour.step").options[3]).run()
    teacher.button(key="room.push").click().run()
    assert not teacher.exception
    moment = dict(live.store().room(code).moment.params)
    assert live.store().room(code).moment.page == "tour" and "present" not in moment
    browse(ada)
    assert ada.session_state["app.page"] == "tour" and ada.selectbox(key="tour.step").value == moment["step"]
    assert not ada.toggle(key="tour.present").value  # a phone is not put into presentation mode
    teacher.button(key="room.reveal_here").click()
    browse(teacher)
    assert live.store().room(code).question.state == "revealed"
    assert teacher.session_state["app.page"] == "classroom" and f"{p:.3f}" in texts(teacher)
    assert not teacher.exception and not ada.exception


def test_a_link_that_opens_the_tour_projected_shows_the_teachers_controls_on_its_first_run():
    teacher, code, key = teacher_room()
    teacher.query_params["present"] = "1"
    teacher.session_state["app.url_loaded"] = set()  # (as a freshly opened link reads it)
    teacher.switch_page("pages/tour.py").run()
    assert not teacher.exception and teacher.toggle(key="tour.present").value is True
    assert [b.key for b in teacher.main.button if b.key == "room.push"] == ["room.push"]
