"""A class room in real Chromium (issue #43): a teacher and three students, each in a browser
context of their own (one a 390 px phone). The teacher opens a room and asks for the next
token; the students join by the link, follow the teacher to the question and answer; the
projected histogram counts them; the reveal shows the engine's top token and probability, and
each student sees their own result."""
from __future__ import annotations

import re

import torch
from playwright.sync_api import expect

from ui import models, sidebar

from tests.e2e.conftest import shot
from tests.e2e.conftest import wait_idle as _wait_idle

SLOW = 240_000
PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'
PHONE = {"width": 390, "height": 844}


def wait_idle(page) -> None:
    _wait_idle(page, SLOW)


def engine_top() -> tuple[str, float]:
    lm = models.load_lm(models.default_model_spec(), "cpu")
    with torch.inference_mode():
        logits = lm.model(torch.tensor([lm.tokenizer.prompt_ids(sidebar.DEFAULT_PROMPT)])).logits[0, -1]
    probs = logits[:min(lm.tokenizer.vocab_size, lm.config.vocab_size)].double().softmax(-1)
    best = int(probs.argmax())
    return lm.tokenizer.display_piece(best), float(probs[best])


def histogram(page) -> dict[str, int]:
    plot = page.locator(PLOT).filter(has=page.locator(".gtitle", has_text=" answered")).first
    bars = plot.evaluate("el => ({y: Array.from(el._fullData[0].y), x: Array.from(el._fullData[0].x)})")
    return dict(zip(bars["y"], bars["x"]))


def test_a_teacher_and_three_students_predict_then_reveal(browser, app_url):
    top, p = engine_top()
    contexts = [browser.new_context(viewport=v) for v in ({"width": 1400, "height": 1000}, PHONE,
                                                          {"width": 1000, "height": 900}, {"width": 1000, "height": 900})]
    teacher, *students = [c.new_page() for c in contexts]
    try:
        teacher.goto(f"{app_url}/classroom")
        wait_idle(teacher)
        teacher.get_by_role("button", name="Open a room").click()
        heading = teacher.get_by_role("heading", name=re.compile("Join with code"))
        expect(heading).to_be_visible(timeout=SLOW)
        code = re.search(r"([2-9A-Z]{4}-[2-9A-Z]{4})", heading.inner_text()).group(1)
        expect(teacher.locator('[data-testid="stImage"] img').first).to_be_visible()   # the QR code
        teacher.get_by_role("button", name="Ask the class").click()
        expect(teacher.get_by_text(re.compile(r"Question 1: What token"))).to_be_visible(timeout=SLOW)

        for i, page in enumerate(students):
            page.goto(f"{app_url}/classroom?room={code.replace('-', '')}")
            wait_idle(page)
            page.get_by_label(re.compile("Nickname")).fill(f"student {i}")
            page.get_by_role("button", name="Join the class").click()
        picks = {}
        for i, page in enumerate(students):
            radio = page.get_by_role("radiogroup", name="Your answer")
            expect(radio).to_be_visible(timeout=SLOW)    # followed the teacher to the question
            options = [o.strip() for o in radio.locator("label").all_inner_texts()]
            assert top in options, (top, options)
            picks[i] = top if i == 0 else next(o for o in options if o != top)
            radio.get_by_text(picks[i], exact=True).click()
            page.get_by_role("button", name="Send my answer").click()
            expect(page.get_by_text("Your answer:")).to_be_visible(timeout=SLOW)
        phone = students[0]
        assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1   # no sideways scroll
        shot(phone, "classroom_phone_answered")

        expect(teacher.locator(".gtitle", has_text="3 of 3 answered")).to_be_visible(timeout=SLOW)
        counts = histogram(teacher)
        want: dict[str, int] = {}
        for pick in picks.values():
            want[pick] = want.get(pick, 0) + 1
        assert {k.replace("&lt;", "<").replace("&gt;", ">"): v for k, v in counts.items()} == want
        shot(teacher, "classroom_teacher_histogram")
        teacher.get_by_role("button", name="Reveal the model's answer").click()
        expect(teacher.get_by_text(re.compile(rf"The model:.*{p:.3f}"))).to_be_visible(timeout=SLOW)
        shot(teacher, "classroom_teacher_reveal")

        for i, page in enumerate(students):
            verdict = "Right!" if picks[i] == top else "Not quite."
            expect(page.get_by_text(re.compile(re.escape(verdict)))).to_be_visible(timeout=SLOW)
            expect(page.get_by_text(re.compile(rf"{p:.3f}")).first).to_be_visible()
            others = [f"student {j}" for j in range(len(students)) if j != i]
            assert not any(name in page.inner_text("body") for name in others)   # never another's name
        shot(phone, "classroom_phone_reveal")
    finally:
        for c in contexts:
            c.close()
