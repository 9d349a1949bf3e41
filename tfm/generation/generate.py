"""Token-by-token generation that reports every step, for the app's timeline and the CLI.

    gen = tfm.generate(lm, "The cat", max_new_tokens=20, temperature=0.8, top_p=0.9, seed=1)
    gen.prompt.notice          # set when the prompt was cut or replaced; ready before any step
    for step in gen:
        print(step.new_text, end="", flush=True)
    step.stop_reason           # "max_new_tokens", "eot" or "context_full" on the last Step

Behaviour, decided once here:

* Prompt. Text is encoded as user text (`Tokenizer.encode`: "<|endoftext|>" typed by a user
  stays plain characters). A list of ids is used as given. An empty prompt starts from the
  end-of-text token (how GPT-2 begins a fresh document); a tokenizer without one raises
  ValueError. A prompt longer than `context_length - 1` tokens keeps its LAST
  `context_length - 1` tokens, so there is room for at least one new token; `PromptInfo`
  says so in `notice`. `prepare_prompt` decides this for the app's pages too (with
  `room=0`: a view of the prompt alone keeps the full context).
* Context limit. Prompt plus generated tokens never exceed `context_length`: when the
  sequence fills the context, the step that filled it is the last one, with stop_reason
  "context_full". There is no sliding window: with learned positions, sliding would
  silently re-read every token at a different position, i.e. a different computation.
* Stop reasons, checked in this order on each step: "eot" (the end-of-text token was drawn
  and `stop_at_eot`; that token is the last Step), "stop_token" (a token of the per-call
  `stop_ids` was drawn, e.g. a chat model's end of turn, `tfm.text.chat.ChatPrompt.stop_ids`;
  it is the last Step), "max_new_tokens" (the requested count
  was reached), "context_full". Every other Step has stop_reason None.
* max_new_tokens: an int from 1 to the model's context length (more could never fit);
  None (the default) means DEFAULT_NEW_TOKENS = 64, or the context length if smaller.
* Randomness. One CPU `torch.Generator` seeded with `seed` per call; the global RNG is never
  used. The same seed and settings give the same tokens with or without the KV cache and
  with or without tracing, on any device (the draw is on the CPU generator, as in
  `tfm.sampling.sample`). Greedy (temperature 0) never touches the generator. A model
  in training mode with dropout is refused (dropout would draw from the global RNG).
* KV cache. `use_cache=True` creates a `KVCache` for this call only: the prompt is run in
  one forward (prefill), then one token per step. With `trace=True` the first Step's trace
  covers the whole prompt and every later Step's trace covers ONLY the new position
  (queries = 1, keys = all positions so far): exactly the new token's attention row.
  `use_cache=False` re-runs the whole prefix each step (traces then cover every position).
* Padded vocabularies. When the model has more output rows than the tokenizer has ids
  (nanoGPT rounds 50257 up to 50304; a random model may pair a big vocabulary with the
  bytes tokenizer), those rows are set to -inf in `Step.logits` before the breakdown and
  the draw: they are not tokens and could not be shown. `tfm.sampling.next_token` does it,
  for this loop and for the app's next-token page alike.
* Edits. `edits=[...]` (tfm.core.edits, e.g. `Steer`) apply to every forward of the call, the
  prefill and each cached step; edits with absolute positions (Steer's start/stop) find their
  positions in each forward's window, so steering can cover the prompt, the generated tokens
  or both. The model itself is never changed.
* Stopping. `should_stop` (`tfm.core.cancel`) is asked before each step's forward; once it says
  yes, the next `next()` raises `Cancelled` (the steps already yielded stand).
* Thread safety. The model is only read (no hooks, no state stored on it), all per-call
  state lives in the returned iterator, so many threads may generate from one cached model.
* Memory. A Step holds `logits` and its `breakdown` (about five vocabulary-sized tensors,
  ~1 MB at GPT-2's 50k vocabulary) and, when traced, a Trace. A long timeline should keep
  `step.summary()` (plain numbers and text) and drop the tensors it no longer shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ..core import cancel
from ..core.edits import Edits
from ..loaders.loading import LM
from .decode import Forward, TextStream, choose, stop_reason
from .sampling import Breakdown, SamplingSettings
from ..core.trace import Trace
from ..core.validate import check_int

__all__ = ["Generation", "PromptInfo", "STOP_REASONS", "Step", "generate", "n_words", "prepare_prompt"]

STOP_REASONS = ("eot", "stop_token", "max_new_tokens", "context_full")
DEFAULT_NEW_TOKENS = 64


@dataclass(frozen=True)
class PromptInfo:
    """The token ids the model will actually see, and why they may differ from the input."""

    ids: tuple[int, ...]  # the kept prompt ids, in order
    original_length: int  # tokens in the prompt as given (0 for an empty prompt)
    truncated_from: int | None  # original_length when the left part was cut, else None
    from_eot: bool  # True when an empty prompt was replaced by end-of-text
    notice: str | None  # one line for the user when the prompt was changed

    @property
    def dropped(self) -> int:
        """Tokens cut from the left (0 when nothing was cut)."""
        return 0 if self.truncated_from is None else self.truncated_from - len(self.ids)


@dataclass(frozen=True)
class Step:
    """One generated token and everything the timeline shows about how it was chosen."""

    index: int  # 0 for the first generated token
    position: int  # its position in the sequence: len(prompt ids) + index
    token_id: int
    text: str  # the token's own text (a partial UTF-8 character shows U+FFFD)
    display: str  # readable piece for tables (Tokenizer.display_piece)
    new_text: str  # text completed by this token, for streaming: joining all
    # new_text gives the final text_so_far, multi-byte safe
    text_so_far: str  # decode of all generated ids (errors="replace")
    prob: float  # chosen token's probability under the final (sampled) distribution
    rank: int  # its rank there: 0 = most likely (number of kept tokens above it;
    # equals rank_original but for ties, as the filters keep a top set)
    prob_original: float  # under the model's own softmax (T = 1, no top-k / top-p)
    rank_original: int  # its rank there (number of tokens with a higher logit)
    n_kept: int  # tokens left after top-k and top-p
    logits: torch.Tensor  # (V,) float32 last-position logits this token was drawn from
    # (-inf on rows the tokenizer cannot decode; see module doc)
    breakdown: Breakdown  # tfm.sampling.next_token(raw logits, settings, n_words(lm))
    trace: Trace | None  # this step's forward trace when trace=True (see module doc)
    elapsed_s: float  # seconds spent generating so far, prefill included (the sum
    # of step_s: time the consumer spends between steps is not counted)
    step_s: float  # seconds this step took (forward, sampling, record)
    stop_reason: str | None  # None, or one of STOP_REASONS on the last Step

    def summary(self) -> dict:
        """Plain numbers and text (no tensors): what a long timeline should keep."""
        keep = (
            "index",
            "position",
            "token_id",
            "text",
            "display",
            "prob",
            "rank",
            "prob_original",
            "rank_original",
            "n_kept",
            "elapsed_s",
            "stop_reason",
        )
        return {name: getattr(self, name) for name in keep}


class Generation:
    """Iterator of Steps returned by `generate`. `prompt` is known before the first step;
    nothing runs until the first `next()`."""

    def __init__(self, prompt: PromptInfo, settings: SamplingSettings, steps: Iterator[Step]):
        self.prompt = prompt
        self.settings = settings
        self._steps = steps

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Step:
        return next(self._steps)

    def close(self) -> None:
        self._steps.close()


def n_words(lm: LM) -> int:
    """Token ids a model can produce and show: its tokenizer's, or fewer output rows if it has them."""
    return min(lm.tokenizer.vocab_size, lm.config.vocab_size)


# --------------------------------------------------------------------------- #
# Validation and the prompt
# --------------------------------------------------------------------------- #


def _prompt_ids(lm: LM, prompt) -> list[int]:
    """Token ids of a str (encoded as user text, after the model's start token if it has one) or
    of a sequence of ids (checked)."""
    if isinstance(prompt, str):
        return lm.tokenizer.prompt_ids(prompt)
    if isinstance(prompt, torch.Tensor):
        prompt = prompt.flatten().tolist()
    if not isinstance(prompt, Sequence):
        raise TypeError(f"prompt must be text or a list of token ids, got {type(prompt).__name__}")
    vocab = lm.config.vocab_size
    return [check_int("prompt token id", i, 0, vocab - 1, " (the model's vocabulary)") for i in prompt]


def prepare_prompt(lm: LM, prompt: str | Sequence[int], *, room: int = 1, max_tokens: int | None = None) -> PromptInfo:
    """The ids the model will see for `prompt`, and the one notice saying how they were changed:
    empty -> end-of-text; longer than the context less `room` positions (1 for generation, so one
    new token fits; 0 for a view of the prompt alone), or than `max_tokens`, -> its last tokens.
    Generation, the command line and every page of the app prepare prompts here."""
    ctx = lm.config.context_length
    if isinstance(room, int) and room > ctx - 1 >= 0:  # in the user's words, not the parameter's
        raise ValueError(
            f"this model's context holds {ctx:,} token{'s' if ctx > 1 else ''}: no room for a new "
            "token after the prompt; use a model with a longer context_length"
        )
    room = check_int("room", room, 0, ctx - 1)
    limit = ctx - room if max_tokens is None else min(ctx - room, check_int("max_tokens", max_tokens, 1))
    ids = _prompt_ids(lm, prompt)
    n, notice = len(ids), None
    if n == 0:
        eot = lm.tokenizer.eot_id
        if eot is None:
            raise ValueError(
                "the prompt is empty and this tokenizer has no end-of-text token "
                "to start from; give at least one token of text"
            )
        ids, notice = [eot], "the prompt is empty: starting from the end-of-text token"
    elif n > limit:
        ids = ids[-limit:]
        why = (
            f"this view shows at most {limit}"
            if limit < ctx - room
            else f"the context holds {ctx}" + (" and a new token needs room" if room else "")
        )
        notice = (
            f"the prompt has {n} tokens but {why}: kept its last {limit} tokens "
            f"(the first {n - limit} were cut from the left)"
        )
    return PromptInfo(tuple(ids), n, n if n > limit else None, n == 0, notice)


# --------------------------------------------------------------------------- #
# The decode loop
# --------------------------------------------------------------------------- #


def _steps(
    lm: LM,
    info: PromptInfo,
    settings: SamplingSettings,
    max_new: int,
    seed: int,
    use_cache: bool,
    trace: bool,
    stop_at_eot: bool,
    stop_ids: frozenset[int],
    edits: tuple = (),
    should_stop: cancel.ShouldStop = None,
) -> Iterator[Step]:
    tokens = list(info.ids)
    forward = Forward(lm, len(tokens), max_new, use_cache, trace, edits)
    gen, text, words = torch.Generator().manual_seed(seed), TextStream(), n_words(lm)
    elapsed = 0.0
    for index in range(max_new):
        cancel.check(should_stop, "the generation")
        t0 = time.perf_counter()
        logits, tr = forward(tokens)
        bd, token, numbers = choose(logits, settings, words, gen)
        tokens.append(token)
        reason = stop_reason(token, index + 1, len(tokens), lm, max_new, stop_at_eot, stop_ids)
        piece = lm.tokenizer.piece_bytes(token)
        texts = text.add(piece, final=reason is not None)
        took = time.perf_counter() - t0
        elapsed += took
        yield make_step(lm, index, len(tokens) - 1, token, piece, texts, numbers, bd, tr, (elapsed, took), reason)
        if reason is not None:
            return


def make_step(
    lm: LM,
    index: int,
    position: int,
    token: int,
    piece: bytes,
    texts: tuple[str, str],
    numbers: list,
    bd: Breakdown,
    tr: Trace | None,
    times: tuple[float, float],
    reason: str | None,
) -> Step:
    """One step's record: `texts` (new stable text, all so far) from the text stream, `numbers`
    (prob, rank, original prob, original rank, kept) from `decode.choose`, `times` (elapsed, took)."""
    prob, rank, prob0, rank0, kept = numbers
    return Step(
        index,
        position,
        token,
        piece.decode("utf-8", errors="replace"),
        lm.tokenizer.display_piece(token),
        *texts,
        prob,
        int(rank),
        prob0,
        int(rank0),
        int(kept),
        bd.logits,
        bd,
        tr,
        *times,
        reason,
    )


def generate(
    lm: LM,
    prompt: str | Sequence[int],
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    use_cache: bool = True,
    trace: bool = False,
    stop_at_eot: bool = True,
    stop_ids: Iterable[int] = (),
    edits=(),
    should_stop: cancel.ShouldStop = None,
) -> Generation:
    """Generate up to `max_new_tokens` tokens after `prompt`, one `Step` per token.

    `max_new_tokens=None` means DEFAULT_NEW_TOKENS, or the context length if that is
    smaller. `stop_ids`: more token ids that end the text (a chat model's end of turn).
    Arguments are checked now (ValueError), and `.prompt` is ready at once; the
    model runs lazily as the returned iterator is advanced. `edits`: per-call interventions
    applied at every step (tfm.core.edits; see the module docstring). `should_stop`: asked
    before each step; yes raises `tfm.core.cancel.Cancelled` from the iterator.
    """
    settings = SamplingSettings(temperature, top_k, top_p)
    max_new, seed, stops = _checked(lm, max_new_tokens, seed, stop_ids)
    info = prepare_prompt(lm, prompt)
    edits = tuple(edits)
    Edits.of(edits, lm.config, (1, len(info.ids)))  # bad edits raise now, before any step
    steps = _steps(
        lm, info, settings, max_new, seed, bool(use_cache), bool(trace), bool(stop_at_eot), stops, edits, should_stop
    )
    return Generation(info, settings, steps)


def _checked(lm: LM, max_new_tokens: int | None, seed: int, stop_ids: Iterable[int]) -> tuple[int, int, frozenset]:
    """`generate`'s model and counts checked: a decoder in eval mode (an encoder, or dropout in training
    mode, is refused); (max_new, seed, stop ids) in range."""
    if lm.config.lm_head != "next":
        raise ValueError(
            "this model has no next-token head (an encoder reads the whole text at once): it cannot "
            "generate; use a causal language model"
        )
    if lm.model.training and lm.config.dropout > 0:  # dropout would draw from the global RNG
        raise ValueError(
            "the model is in training mode, so dropout would make generation random; "
            "generate from an eval-mode model (tfm.load returns one)"
        )
    ctx = lm.config.context_length
    if max_new_tokens is None:
        max_new_tokens = min(DEFAULT_NEW_TOKENS, ctx)
    max_new = check_int(
        "max_new_tokens", max_new_tokens, 1, ctx, f" (the context length of this model; at most {ctx} tokens can fit)"
    )
    seed = check_int("seed", seed, 0, 2**64 - 1)
    stops = frozenset(check_int("stop token id", i, 0, lm.config.vocab_size - 1) for i in stop_ids)
    return max_new, seed, stops


generate.prepare_prompt = prepare_prompt  # `tfm.generate` is this function once tfm/__init__ imports it
