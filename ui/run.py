"""One typed run per page: `PromptRun` is the sidebar's model on the sidebar's prompt (its ids,
labels and shared read-only trace) and owns the cache keys of everything derived from it:
`run.pattern_rows(layer, a, b)`, `run.head_table()`, `run.lens(start, stop, tuned)`,
`run.attribution(pos, token, versus)` and `run.sae_features(n)` (ui/why_run.py), ... Each is computed once per
process for the same model, prompt and arguments (`ui.cache`, bounded by bytes), with a progress
bar or status line where it takes seconds. What needs no prompt is `ModelRun`'s (ui/model_run.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st
import torch

from tfm import analysis
from tfm.analysis import norms, positions
from tfm.analysis.lens import compare as lens_compare
from tfm.analysis.attention_rows import pattern_rows
from tfm.analysis.neuron_view import NeuronView, neuron_view
from tfm.analysis.quant.requantize import QuantComparison, requantized_effects
from tfm.analysis.lens.tuned import TunedLens
from tfm.core.trace import Trace
from tfm.generation.generate import prepare_prompt
from tfm.loaders import limits as tfm_limits
from tfm.text.token_view import TokenView, token_labels, token_view
from tfm.viz import attention as attention_figs
from ui import cache, heavy
from services import server
from ui.model_run import ModelRun, active_model
from ui.why_run import FeatureResults, WhyResults
from ui.progress import progress_bar, with_status
from ui.text import message


@dataclass(frozen=True)
class PromptRun(ModelRun, WhyResults, FeatureResults):
    """The model, the prompt's tokens and the traced forward, and what is derived from them."""

    ids: tuple[int, ...]
    labels: list[str]  # display pieces, made unique per position for chart axes
    dropped: int  # tokens cut from the left to fit the context
    trace: Trace  # CPU float32, lazy entries computed on first read

    def _traced(self, name: str, fn, *args, **options):
        """`fn(lm, trace, *args)` cached for this model, this prompt's ids and `args`."""
        return self._derived(
            name, lambda lm, _ids, *rest, **kw: fn(lm, self.trace, *rest, **kw), self.ids, *args, **options
        )

    def token_view(self, text: str) -> TokenView:
        """The prompt `text` as these tokens: pieces, ids, bytes (`tfm.text.token_view.token_view`)."""
        return token_view(self.lm.tokenizer, self.ids, text, self.dropped)

    def pattern_rows(self, layer: int, a: int, b: int) -> torch.Tensor:
        """Layer's attention rows a..b over keys 0..b, (H, b - a + 1, b + 1): computed for the
        window only, so a layer change on a long prompt does not recompute the whole block."""
        return self._traced("attn.rows", lambda lm, tr, l, a, b: pattern_rows(lm.model, tr, l, a, b + 1), layer, a, b)

    def neuron_view(self, layer: int, head: int, query: int, key: int) -> NeuronView:
        """How head `head` of `layer` scores `key` for `query` (`tfm.analysis.neuron_view`)."""
        return self._traced("attn.neuron", lambda lm, tr, *a: neuron_view(tr, lm.config, *a), layer, head, query, key)

    def all_heads(self, a: int, b: int, hide_first: bool, show_progress: bool = True) -> np.ndarray:
        """(L, H, w, w): the window a..b of every head (`tfm.viz.attention.window_rows`), one layer
        at a time; `show_progress=False` where no page is drawn (a download's data)."""

        def compute(lm, _trace, a, b, hide_first):
            n_layer, out = self.trace.n_layers(), []
            bar = progress_bar(f"Reading the attention of all {n_layer} layers") if show_progress else None
            for layer in range(n_layer):
                out.append(
                    attention_figs.window_rows(
                        self.pattern_rows(layer, a, b), a, b, hide_first, causal=self.lm.config.causal
                    )
                )
                if bar is not None:
                    bar(layer + 1, n_layer)
            return np.stack(out)

        return self._traced("attn.all_heads", compute, a, b, hide_first)

    def rollout(self) -> torch.Tensor:
        """(L, T, T): attention rollout through layers 0..l (`tfm.analysis.rollout`)."""
        return self._traced(
            "attn.rollout",
            lambda lm, tr: analysis.rollout(tr, progress=progress_bar("Multiplying the layers' attention")),
        )

    def head_table(self) -> analysis.HeadTable:
        """Every head's scores on this prompt and on the repeat probe, stopped once no page waits."""
        bar = f"Scoring every head on {len(self.ids)} tokens and on the repeat probe"
        return self._derived(
            "attn.head_table",
            lambda lm, ids, should_stop: analysis.head_table(lm, self.trace, ids, progress_bar(bar), should_stop),
            self.ids,
            stoppable=True,
        )

    def lens(
        self, start: int, stop: int, tuned: TunedLens | None = None
    ) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        """The logit lens (or, given `tuned`, the tuned lens) on positions start..stop-1, top 5
        only: (row labels, top ids (L+1, w, 5), their probabilities), with a status line; full
        distributions would be large."""

        def window(lm, tr, start, stop, _lens_identity, should_stop=None):
            lens = lens_compare.lens_grid(
                lm.model,
                tr,
                tuned,
                k=5,
                positions=slice(start, stop),
                keep_probs=False,
                n_words=min(lm.tokenizer.vocab_size, lm.config.vocab_size),
                should_stop=should_stop,
            )
            return lens.labels, lens.top_ids.cpu(), lens.top_probs.float().cpu()

        return self._traced(
            "logit_lens.window",
            window,
            start,
            stop,
            tuned.identity if tuned else None,
            stoppable=True,
            status=f"Decoding positions {start}–{stop - 1} after every layer…",
        )

    def lens_fits(self, tuned: TunedLens | None) -> dict[str, lens_compare.LensFit]:
        """Per-layer KL to the final distribution and top-1 agreement of the logit lens (and the
        tuned one, given) on this prompt (`tfm.analysis.lens.compare.prompt_fits`)."""

        def fits(lm, tr, _lens_identity, should_stop=None):
            return lens_compare.prompt_fits(
                lm.model, tr, tuned, min(lm.tokenizer.vocab_size, lm.config.vocab_size), should_stop
            )

        return self._traced(
            "logit_lens.fits",
            fits,
            tuned.identity if tuned else None,
            stoppable=True,
            status="Comparing every layer's reading with the final prediction…",
        )

    def layer_summaries(self) -> norms.Summaries:
        """Every block's norm statistics and the stream's norms (`tfm.analysis.norms.summaries`)."""
        return self._traced(
            "norms.summaries",
            lambda lm, tr: norms.summaries(
                tr, progress=progress_bar(f"Reading every block's norms on {len(self.ids)} tokens")
            ),
        )

    def worked_norm(self, layer: int, token: int, which: str) -> norms.NormExample:
        """One norm call on `token` redone step by step (`tfm.analysis.norms.layernorm_worked_example`)."""
        return norms.layernorm_worked_example(self.lm.model, self.trace, layer, token, which)

    def permutation_check(self, seed: int) -> positions.PermutationCheck:
        """Block 0 on the prompt and a shuffled copy; ValueError under two tokens."""
        return self._derived(
            "pos.permutation",
            lambda lm, ids, s: positions.permutation_check(lm.model, ids, s),
            self.ids,
            seed,
            status="Running block 0 on the prompt and a shuffled copy…",
        )

    def requantized(self, qtype: str) -> QuantComparison:
        """The model re-quantized to `qtype` against itself on this prompt, every layer and head
        (the copy dropped before it returns; one such copy in the process at a time)."""
        return self._derived(
            "quant.effects",
            requantized_effects,
            qtype,
            self.ids,
            alone=True,
            status=f"Re-quantizing every matrix to {qtype} and running both models…",
        )

    def requantized_ready(self, qtype: str) -> bool:
        return self._ready("quant.effects", qtype, self.ids)


def current_run(max_tokens: int | None = None, refuse_over: int | None = None) -> PromptRun:
    """The traced prompt for the page, or a clear message and a stopped script. `refuse_over`: a
    prompt of more tokens is refused with one message (nothing traced), not cut."""
    model = active_model()
    if model is None:
        st.stop()
    lm, spec, device = model.lm, model.spec, model.device
    info = _prompt(lm, max_tokens, refuse_over)
    ids = info.ids
    try:
        tfm_limits.check_trace(lm.config, server.limits(), len(ids))
    except ValueError as e:
        st.error(f"This prompt is too long to trace here: {message(e)}.")
        st.stop()
    notice = st.empty()
    if heavy.gate().busy():
        notice.info("⏳ The server is busy with other students' heavy work: this page starts when a slot frees up…")
    trace = with_status(
        f"Running the model on {len(ids)} tokens…",
        cache.is_cached("trace", spec, device, ids),
        cache.run_traced,
        spec,
        device,
        ids,
    )
    notice.empty()
    return PromptRun(lm, spec, device, ids, token_labels(lm.tokenizer, ids), info.dropped, trace)


def _prompt(lm, max_tokens: int | None, refuse_over: int | None):
    """The sidebar's prompt as this model's ids (`prepare_prompt`), or a message and a stopped script."""
    text = st.session_state.get("sidebar.prompt", "")
    if not text.strip():
        st.info("The prompt is empty: type some text in the sidebar's **Prompt** box.")
        st.stop()
    info = prepare_prompt(lm, text[: server.limits().max_prompt_chars], room=0, max_tokens=max_tokens)
    if refuse_over is not None and info.original_length > refuse_over:
        st.warning(
            f"The prompt has {info.original_length:,} tokens; this page takes at most {refuse_over:,}: "
            "shorten it in the sidebar."
        )
        st.stop()
    if info.notice:
        st.warning(f"Prompt: {message(info.notice)}.")
    return info
