"""Tests for tfm.generate's stop rules (end of text, stop ids, max_new_tokens, a full context), its
prompts (cut from the left, empty, special-token text) and its streamed text (split characters)."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm import random_model
from tfm.generation.decode import TextStream
from tfm.generation.generate import PromptInfo, prepare_prompt
from tfm.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def lm():
    return random_model("tiny", seed=0)


def run(lm, prompt="Hello", **kw):
    return list(tfm.generate(lm, prompt, **kw))


def ids(steps):
    return [s.token_id for s in steps]


def eot_model():
    """A tiny model whose every prediction puts logit 10 on end-of-text, ~0 elsewhere."""
    lm = random_model("tiny", seed=3)
    eot = lm.tokenizer.eot_id
    with torch.no_grad():
        lm.model.ln_final.weight.zero_()  # final norm output = its bias
        lm.model.ln_final.bias.zero_()
        lm.model.ln_final.bias[0] = 1.0  # h = e_0, so logits = W[:, 0]
        lm.model.tok_emb.weight[eot, 0] = 10.0  # tied unembedding row of end-of-text
    return lm


# ---- stop reasons ----------------------------------------------------------------------


def test_stop_max_new_tokens(lm):
    steps = run(lm, max_new_tokens=5, stop_at_eot=False)
    assert len(steps) == 5 and [s.index for s in steps] == [0, 1, 2, 3, 4]
    assert [s.stop_reason for s in steps] == [None] * 4 + ["max_new_tokens"]
    assert [s.position for s in steps] == [5, 6, 7, 8, 9]


def test_stop_context_full(lm):
    ctx = lm.config.context_length
    prompt = list(range(65, 65 + ctx - 3))  # room for 3 tokens
    steps = run(lm, prompt, max_new_tokens=ctx, stop_at_eot=False)
    assert len(steps) == 3 and steps[-1].stop_reason == "context_full"
    assert steps[-1].position == ctx - 1
    # exactly enough room: the requested count wins
    assert run(lm, prompt, max_new_tokens=3, stop_at_eot=False)[-1].stop_reason == "max_new_tokens"


def test_stop_at_eot():
    lm = eot_model()
    eot = lm.tokenizer.eot_id
    steps = run(lm, "abc", temperature=1.0, top_k=1, max_new_tokens=10)
    assert ids(steps) == [eot] and steps[0].stop_reason == "eot"
    assert steps[0].text == "<|endoftext|>" and steps[0].text_so_far == "<|endoftext|>"
    assert run(lm, "abc", temperature=0, max_new_tokens=10)[-1].stop_reason == "eot"
    go_on = run(lm, "abc", top_k=1, max_new_tokens=4, stop_at_eot=False)
    assert ids(go_on) == [eot] * 4 and go_on[-1].stop_reason == "max_new_tokens"


def test_stop_ids_end_the_text_at_the_first_one_drawn(lm):
    free = run(lm, max_new_tokens=8, stop_at_eot=False, temperature=0)  # greedy: the same tokens below
    stop = ids(free)[3]
    first = ids(free).index(stop)
    steps = run(lm, max_new_tokens=8, stop_at_eot=False, temperature=0, stop_ids=[stop])
    assert ids(steps) == ids(free)[: first + 1] and steps[-1].stop_reason == "stop_token"
    assert [s.stop_reason for s in steps[:-1]] == [None] * first
    assert ids(run(lm, max_new_tokens=8, stop_at_eot=False, temperature=0, stop_ids=[])) == ids(free)
    with pytest.raises(ValueError, match="stop token id"):
        tfm.generate(lm, "Hello", 4, stop_ids=[lm.config.vocab_size])


# ---- prompts ----------------------------------------------------------------------------


def test_long_prompt_is_cut_from_the_left(lm):
    ctx = lm.config.context_length
    prompt = [65 + i % 26 for i in range(ctx + 10)]
    gen = tfm.generate(lm, prompt, max_new_tokens=5)
    info = gen.prompt
    assert info.ids == tuple(prompt[-(ctx - 1) :]) and info.truncated_from == ctx + 10
    assert info.original_length == ctx + 10 and "cut" in info.notice and str(ctx - 1) in info.notice
    steps = list(gen)
    assert len(steps) == 1 and steps[0].stop_reason == "context_full"
    text = "x" * (ctx + 5)
    assert prepare_prompt(lm, text).ids == tuple(lm.tokenizer.encode(text)[-(ctx - 1) :])
    assert tfm.generate.prepare_prompt is prepare_prompt


def test_a_view_of_the_prompt_keeps_the_full_context_or_its_own_limit(lm):
    ctx = lm.config.context_length
    prompt = [65 + i % 26 for i in range(ctx + 10)]
    full = prepare_prompt(lm, prompt, room=0)
    assert full.ids == tuple(prompt[-ctx:]) and f"context holds {ctx}:" in full.notice
    assert "the first 10 were cut from the left" in full.notice
    short = prepare_prompt(lm, prompt, room=0, max_tokens=8)
    assert short.ids == tuple(prompt[-8:]) and "this view shows at most 8" in short.notice
    assert prepare_prompt(lm, prompt[:ctx], room=0).notice is None
    assert "new token needs room" in prepare_prompt(lm, prompt[:ctx]).notice
    with pytest.raises(ValueError, match="max_tokens"):
        prepare_prompt(lm, prompt, max_tokens=0)


def test_short_prompt_is_kept_unchanged(lm):
    info = prepare_prompt(lm, "Hello")
    assert info == PromptInfo(tuple(lm.tokenizer.encode("Hello")), 5, None, False, None)


def test_empty_prompt_starts_from_eot(lm):
    for empty in ("", []):
        gen = tfm.generate(lm, empty, max_new_tokens=3, stop_at_eot=False)
        assert gen.prompt.ids == (lm.tokenizer.eot_id,) and gen.prompt.from_eot
        assert gen.prompt.original_length == 0 and "empty" in gen.prompt.notice
        assert len(list(gen)) == 3


def test_empty_prompt_without_eot_token_is_an_error():
    tok = Tokenizer({bytes([b]): b for b in range(256)}, {}, name="bytes-no-eot")
    lm = random_model("tiny", tokenizer=tok)
    with pytest.raises(ValueError, match="empty"):
        tfm.generate(lm, "")


def test_special_token_text_in_prompt_stays_plain_text(lm):
    info = prepare_prompt(lm, "a<|endoftext|>b")
    assert lm.tokenizer.eot_id not in info.ids
    assert info.ids == tuple(lm.tokenizer.encode("a<|endoftext|>b")) and len(info.ids) == 15
    assert len(run(lm, "a<|endoftext|>b", max_new_tokens=2, stop_at_eot=False)) == 2


def test_bad_arguments_raise_at_call_time(lm):
    for bad in (0, -1, 1.5, True, "3", lm.config.context_length + 1):
        with pytest.raises(ValueError, match="max_new_tokens"):
            tfm.generate(lm, "hi", max_new_tokens=bad)
    with pytest.raises(ValueError, match="temperature"):
        tfm.generate(lm, "hi", temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        tfm.generate(lm, "hi", top_p=2)
    with pytest.raises(ValueError, match="seed"):
        tfm.generate(lm, "hi", seed=-1)
    with pytest.raises(ValueError, match="token id"):
        tfm.generate(lm, [1, lm.config.vocab_size])
    with pytest.raises(TypeError):
        tfm.generate(lm, 42)
    assert len(run(lm, max_new_tokens=None, stop_at_eot=False)) == lm.config.context_length - 5


# ---- text -------------------------------------------------------------------------------


def test_text_stream_handles_split_characters():
    stream = TextStream()
    data = "é€😀".encode()
    outs = [stream.add(data[i : i + 1], final=False) for i in range(len(data))]
    assert "".join(new for new, _ in outs) == "é€😀"
    assert [new for new, _ in outs[:2]] == ["", "é"]
    assert outs[0][1] == "\ufffd" and outs[-1][1] == "é€😀"
    tail = TextStream()
    assert tail.add(b"ok\xe2\x82", final=False)[0] == "ok" and tail.add(b"", final=True)[0] == "\ufffd"


def test_streamed_text_equals_decode_of_generated_ids(lm):
    steps = run(lm, "x", seed=11, max_new_tokens=25, stop_at_eot=False)  # random bytes: broken UTF-8
    final = lm.tokenizer.decode(ids(steps))
    assert steps[-1].text_so_far == final
    assert "".join(s.new_text for s in steps) == final
    assert all(s.text == lm.tokenizer.piece(s.token_id) for s in steps)
    assert all(s.display == lm.tokenizer.display_piece(s.token_id) for s in steps)
