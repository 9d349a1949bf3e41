"""The sidebar's model as one typed object. `ModelRun` owns the cache keys of everything derived
from the model alone (its strongest heads, its SAE, its GGUF file, steering directions (ui/steer_run.py), ...): a
page asks `run.strongest_heads()` and never builds a key or a closure. `ui.run.PromptRun` adds
a prompt's trace and what is derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

import tfm
from tfm import analysis
from tfm.analysis.dictionaries import features as feature_sets
from tfm.analysis.encoders import bert_heads, similarity
from tfm.analysis import attribution, heads, norms, patching, positions
from tfm.analysis.lens import tuned as tuned_lens
from tfm.analysis.graph.view import folder_stamp
from tfm.analysis.quant.requantize import gguf_path
from tfm.core import window
from tfm.loaders.gguf_file import GGUFFile, read_gguf
from tfm.teach import examples as page_examples
from ui import cache, models
from ui.progress import with_status
from ui.steer_run import SteerResults
from ui.text import message, plain


@dataclass(frozen=True)
class HeadScore:
    layer: int
    head: int
    score: float  # the head's probe score (the share of its attention the pattern predicts)


@dataclass(frozen=True)
class StrongestHeads:
    """The strongest previous-token and induction heads on the probe (`tfm.analysis.strongest_heads`)."""

    previous_token: HeadScore
    induction: HeadScore


@dataclass(frozen=True)
class ModelRun(SteerResults):
    """A loaded model (shared by every session, never mutated) and what is derived from it."""

    lm: tfm.LM
    spec: str
    device: str

    def _derived(self, name: str, fn, *args, status: str | None = None, **options):
        """`ui.cache.derived(name, fn, spec, device, *args)`: `fn(lm, *args)` cached for this model;
        `status`: a status line while it computes."""
        if status is None:
            return cache.derived(name, fn, self.spec, self.device, *args, **options)
        return cache.derived_status(status, name, fn, self.spec, self.device, *args, **options)

    def _ready(self, name: str, *args) -> bool:
        return cache.is_cached("derived", self.spec, self.device, name, *args)

    def sentence_embeddings(self, texts: tuple[str, ...]) -> similarity.Embeddings:
        """`tfm.analysis.encoders.similarity.sentence_embeddings` of these texts (an encoder's)."""
        return self._derived(
            "similarity",
            lambda lm, t: similarity.sentence_embeddings(lm.model, lm.tokenizer, list(t)),
            tuple(texts),
            status="Embedding the sentences…",
        )

    def look_at(self, texts: tuple[str, ...], progress=None) -> bert_heads.LookAt:
        """Clark et al.'s averages over `texts` (`tfm.analysis.encoders.bert_heads.look_at`), one text at a time."""
        return self._derived(
            "look_at",
            lambda lm, t: bert_heads.look_at(lm.model, lm.tokenizer, list(t), progress=progress),
            tuple(texts),
        )

    def probe_settings(self) -> analysis.ProbeSettings | None:
        """The repeated-random-tokens probe `head_table` runs here; None when the context is too short."""
        return analysis.probe_settings(self.lm)

    def strongest_heads(self) -> StrongestHeads:
        """`tfm.analysis.strongest_heads`: needs `analysis.probe_settings(lm)`."""
        top = self._derived("strongest_heads", analysis.strongest_heads)
        return StrongestHeads(HeadScore(*top["previous_token"]), HeadScore(*top["induction"]))

    def opening_head(self) -> tuple[int, int] | None:
        """The head an attention view opens on (`tfm.analysis.heads.opening_head`), or None."""
        return heads.opening_head(self.lm, lambda lm: self._derived("strongest_heads", analysis.strongest_heads))

    def sae(self) -> feature_sets.FeatureSet:
        """The sparse autoencoder shipped for this model; ValueError when none ships."""
        return self._derived("sae.features", feature_sets.bundled, self.spec)

    def tuned_lens(self) -> tuned_lens.TunedLens | None:
        """The tuned lens this model ships (None when it ships none, or one still training); ValueError
        for a broken set."""
        folder = tuned_lens.shipped_folder(self.spec)
        if folder is None:
            return None
        return self._derived(
            "lens.tuned", lambda lm, path, _stamp: tuned_lens.finished_lens(path, lm), str(folder), folder_stamp(folder)
        )

    def examples(self, page: str) -> page_examples.Offer:
        """`page`'s example prompts measured on this model (`tfm.teach.examples`; the Features
        page's with its SAE), once per model and page, with a status line while they are measured."""
        try:
            fs = self.sae() if page == "features" else None
        except ValueError:  # no SAE ships for this model: the Features page says so
            fs = None
        return self._derived(
            "examples",
            lambda lm, page, _has_sae, should_stop=None: page_examples.for_page(lm, page, fs, should_stop),
            page,
            fs is not None,
            stoppable=True,
            status="Measuring example prompts on this model…",
        )

    def gguf_file(self) -> GGUFFile | None:
        """The GGUF file the model was loaded from, read again (header and tensor table); None
        when it was not loaded from one."""
        path = gguf_path(self.lm)
        return None if path is None else self._derived("quant.file", lambda _lm, p: read_gguf(p), str(path))

    def induction_check(self, probe: analysis.ProbeSettings) -> patching.InductionCheck:
        """`patching.induction_check` on `probe` (`probe_settings()`: the head table's probe)."""
        return self._derived("why.induction", patching.induction_check, probe.seq_len, probe.seed, probe.bos)

    def opening_pair(self) -> patching.PromptPair:
        """The patching example this model knows (`tfm.analysis.patching.opening_pair`)."""
        return self._derived("why.opening_pair", patching.opening_pair)

    def patch_prompts(
        self, clean: tuple[int, ...], corrupt: tuple[int, ...], metric: patching.Metric
    ) -> patching.Patching:
        cfg = self.lm.config
        return self._derived(
            "why.patch",
            lambda lm, c, x, m, should_stop: patching.patch_prompts(lm, c, x, m, should_stop=should_stop),
            clean,
            corrupt,
            metric,
            stoppable=True,
            status=f"Patching {cfg.n_layer * cfg.n_head} head outputs and {cfg.n_layer * len(clean)} layer × "
            "position streams from the clean run, one per row…",
        )

    def depth_norms(self, placement: str, norm: str, n_layer: int, ids: tuple[int, ...], seed: int) -> norms.DepthNorms:
        """A fresh model of this size with another placement, norm and depth, run forward and
        backward on `ids` (`tfm.analysis.norms.depth_norms`), with a status line."""
        return self._derived(
            "norms.depth",
            _depth,
            placement,
            norm,
            n_layer,
            ids,
            seed,
            status=f"Forward and backward pass of a fresh {n_layer}-layer {placement}-norm model…",
        )

    def depth_norms_ready(self, placement: str, norm: str, n_layer: int, ids: tuple[int, ...], seed: int) -> bool:
        return self._ready("norms.depth", placement, norm, n_layer, ids, seed)

    def norm_parameters(self, layer: int, which: str) -> tuple[norms.NormParameter, ...]:
        """A norm's gain and bias beside every norm's (`tfm.analysis.norms.norm_parameters`)."""
        return norms.norm_parameters(self.lm.model, layer, which)

    def layer_note(self, layer: int) -> str:
        """Whether `layer` is local or global, in words ("" when every layer is global: `tfm.core.window`)."""
        return window.layer_note(self.lm.config, layer)

    def layer_window(self, layer: int) -> int | None:
        return window.layer_window(self.lm.config, layer)

    def position_table(self, n: int) -> positions.PositionTable:
        """Positions 0..n-1's added vectors (`tfm.analysis.positions.position_table`)."""
        return positions.position_table(self.lm.model, n)

    def rope_table(self, n: int) -> positions.RopeTable:
        return positions.rope_table(self.lm.model, n)

    @staticmethod
    def sinusoid_demo(length: int, d_model: int) -> positions.SinusoidDemo:
        """The sinusoidal formula at any size, no model needed (`tfm.analysis.positions.sinusoid_demo`)."""
        return positions.sinusoid_demo(length, d_model)

    def token_id(self, text: str) -> int | None:
        """The id of `text` if it is one token of the model (None for ""); ValueError saying how it splits."""
        return attribution.token_id(self.lm.tokenizer, text, attribution.n_words(self.lm)) if text else None

    def norm_choices(self) -> tuple[str, ...]:
        return norms.norm_choices(self.lm.model)

    def fresh_parameters(self, n_layer: int) -> int:
        """About how many parameters part 4's fresh model has (`tfm.analysis.norms.fresh_parameters`)."""
        return norms.fresh_parameters(self.lm.config, n_layer)


def _depth(lm, placement: str, norm: str, n_layer: int, ids: tuple[int, ...], seed: int) -> norms.DepthNorms:
    return norms.depth_norms(norms.depth_config(lm.config, placement, norm, n_layer), ids, seed)


def active_model() -> ModelRun | None:
    """The model the sidebar chose; on failure the previous good one, with the error shown
    (None when there is none)."""
    spec = st.session_state.get("app.model_spec", models.default_model_spec())
    device = st.session_state.get("sidebar.device", "cpu")
    try:
        checked = models.checked_spec(spec)  # limits and allowed folders, before anything is loaded; a folder
        # resolved, so every page and cache keys it the same way
        lm = with_status("Loading the model…", (checked, device) in models.MODELS, models.load_lm, checked, device)
        st.session_state["app.good_model"] = (checked, device)
        return ModelRun(lm, checked, device)
    except (ValueError, FileNotFoundError, OSError, KeyError) as e:
        st.error(f"Could not load {plain(models.describe_spec(spec), 160)}: {message(e)}")
        good = st.session_state.get("app.good_model")
        if good and good != (spec, device):
            st.info(f"Still showing the previous model: {plain(models.describe_spec(good[0]), 160)}.")
            return ModelRun(models.load_lm(*good), good[0], good[1])
        return None
