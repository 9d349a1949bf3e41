"""A room's results as CSV for its teacher: one row per answer, graded against the model's own
answer as the students saw it at the reveal (tfm.teach.questions.grade)."""

from __future__ import annotations

import csv
import io
import time

from tfm.teach import questions

from services.rooms.protocol import Results

COLUMNS = (
    "question",
    "kind",
    "asked",
    "nickname",
    "student",
    "answer",
    "correct",
    "closeness",
    "model's answer",
    "answered",
)


def cell(value) -> str:
    """A cell a spreadsheet shows as text: a value starting with = + - @ (or a tab / return)
    would run as a formula in Excel or LibreOffice, so it gets a leading apostrophe."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def results_csv(results: Results) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(COLUMNS)
    asked = {q.qid: q for q in results.questions}
    for qid, sid, nick, text, at in results.answers:
        q = asked[qid]
        question, truth = questions.from_json(q.spec), questions.truth_from_json(q.truth)
        try:
            g = questions.grade(question, truth, text)
            correct, closeness = ("yes" if g.correct else "no"), f"{g.closeness:.3f}"
        except (ValueError, IndexError):
            correct, closeness = "?", ""
        w.writerow(
            [
                cell(v)
                for v in (
                    f"{qid}: {question.text}",
                    question.kind,
                    _when(q.asked),
                    nick,
                    sid[:6],
                    text,
                    correct,
                    closeness,
                    truth.summary,
                    _when(at),
                )
            ]
        )
    return out.getvalue()
