"""The Why and Features pages' results as `ui.run.PromptRun` methods (mixins: `PromptRun` supplies the model,
the prompt's ids and trace, and the cache through `_derived` / `_traced`): direct logit attribution,
the ablation sweep beside it, ablated probabilities, the strongest neurons, flow between positions
and SAE feature attribution; an SAE's features on each token.
"""

from __future__ import annotations

import torch

from tfm.analysis import attribution, patching
from tfm.analysis.dictionaries import features as feature_sets


DENSE_SHARE = feature_sets.DENSE_SHARE  # the Features page's word for a dense feature


class WhyResults:
    """Mixed into `PromptRun`; cached per model, prompt and arguments like the rest of it."""

    def attribution(self, pos: int, token: int | None, versus: int | None) -> attribution.Attribution:
        """Direct logit attribution of `token` (None: the top prediction) after `pos`."""
        return self._traced(
            "why.direct", lambda lm, tr, p, t, v: attribution.direct(lm, self.ids, p, t, v, tr), pos, token, versus
        )

    def ablation_sweep(self, pos: int, token: int, versus: int | None) -> patching.Sweep:
        """Every head and MLP zero-ablated, one per row (`patching.ablation_sweep`), with a status line."""
        cfg = self.lm.config
        return self._derived(
            "why.sweep",
            lambda lm, ids, m, should_stop: patching.ablation_sweep(lm, ids, m, should_stop=should_stop),
            self.ids,
            patching.Metric(pos, token, versus),
            stoppable=True,
            status=f"Ablating each of {cfg.n_layer * cfg.n_head} heads and {cfg.n_layer} MLPs, one per row…",
        )

    def versus_ablation(self, attr: attribution.Attribution, sweep: patching.Sweep) -> patching.EstimateVsAblation:
        """Each head's and MLP's attribution beside its ablation (`patching.estimate_vs_ablation`)."""
        return patching.estimate_vs_ablation(attr, sweep)

    def top_token(self, pos: int) -> int:
        """The model's top prediction after `pos` (`tfm.analysis.attribution.top_token`)."""
        return attribution.top_token(self.lm, self.trace, pos)

    def ablated_probs(self, pos: int, heads=(), mlps=(), neurons=(), mode: str = "zero") -> torch.Tensor:
        """Next-token probabilities at `pos` with these parts ablated (`patching.ablated_probs`)."""
        return self._derived(
            "why.probs", patching.ablated_probs, self.ids, pos, tuple(heads), tuple(mlps), tuple(neurons), mode
        )

    def top_neurons(self, pos: int, token: int, versus: int | None, k: int = 12) -> list[attribution.Neuron]:
        attr = self.attribution(pos, token, versus)
        return self._derived(
            "why.neurons", lambda lm, *_: attribution.top_neurons(lm, attr, k=k), self.ids, pos, token, versus, k
        )

    def flow(self, start: int, stop: int) -> torch.Tensor:
        """What each layer's heads moved between positions start..stop-1 (`attribution.flow`)."""
        return self._traced("why.flow", attribution.flow, start, stop)

    def feature_attribution(self, pos: int, token: int, versus: int | None) -> feature_sets.FeatureAttribution:
        feature_set = self.sae()
        return self._traced(
            "why.features",
            lambda lm, tr, p, t, v: feature_sets.feature_attribution(lm, feature_set.sae, tr, self.ids, p, t, v),
            pos,
            token,
            versus,
        )


class FeatureResults:
    """The shipped SAE's features on this prompt (the Features page); mixed into `PromptRun`."""

    def sae_features(self, per_token: int) -> feature_sets.TokenFeatures:
        """The SAE's strongest `per_token` features on each token; ValueError when none ships."""
        feature_set = self.sae()
        return self._traced(
            "features.tokens",
            lambda lm, tr, n: feature_sets.token_features(feature_set.sae, tr, n, feature_set.skip),
            per_token,
        )

    def opening_feature(self) -> int:
        """The feature the Features page opens on (`tfm.analysis.dictionaries.features.opening_feature`)."""
        return feature_sets.opening_feature(self.sae(), self.trace)

    def feature_acts(self, feature: int) -> list[float]:
        """`feature`'s activation on each token (0 where the SAE was not trained: the first `skip`)."""
        fs = self.sae()
        acts = fs.sae.encode(self.trace.residual_streams()[fs.sae.cfg.layer][1].float())[:, feature]
        acts[: fs.skip] = 0
        return acts.tolist()
