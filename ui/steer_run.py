"""The sidebar's model's steering, as `ui.model_run.ModelRun` methods (a mixin: `ModelRun`
supplies the model and the cache through `_derived`): a direction from a prompt pair or an SAE
feature (`Direction`, cached by its recipe), text generated with and without it, a mood sweep,
where steering works on this model, and the typical stream lengths strength is measured in.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfm.analysis.dictionaries import features as feature_sets
from tfm.analysis.steering import calibrate as steer_calibrate, files as steer_files, vectors as steering


@dataclass(frozen=True)
class Direction:
    """A steering direction and the recipe it is cached by: ("pair", positive, negative, layer,
    how) or ("feature", spec, feature)."""

    recipe: tuple
    vector: steering.SteeringVector


def _vector(lm, recipe: tuple) -> steering.SteeringVector:
    if recipe[0] == "pair":
        return steering.pair_vector(lm, *recipe[1:])
    return feature_sets.steering_vector(feature_sets.bundled(lm, recipe[1]), recipe[2])


@dataclass(frozen=True)
class SteeredTexts:
    """The same continuation drawn without and with the steering (same seed)."""

    plain: str
    steered: str


@dataclass(frozen=True)
class ReadOut:
    """A direction read through the final norm and the unembedding: the `n` tokens it promotes most
    (ids, scores) and the `n` it suppresses most."""

    up: tuple[int, ...]
    up_scores: tuple[float, ...]
    down: tuple[int, ...]
    down_scores: tuple[float, ...]


@dataclass(frozen=True)
class MoodSweep:
    """p(each token next) after a prompt at each steering strength: `probs[k][i]` is `tokens[k]`'s
    probability at `strengths[i]` (one row per token, as the chart draws one line per word)."""

    strengths: tuple[float, ...]
    tokens: tuple[int, ...]
    probs: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        if len(self.probs) != len(self.tokens) or any(len(row) != len(self.strengths) for row in self.probs):
            raise ValueError(
                f"a mood sweep needs one row of {len(self.strengths)} probabilities per token "
                f"({len(self.tokens)} tokens), got {[len(row) for row in self.probs]}"
            )


class SteerResults:
    """Mixed into `ModelRun`; each result cached per model and arguments like the rest of it."""

    def pair_direction(self, positive: str, negative: str, layer: int, how: str) -> Direction:
        """`steering.pair_vector`; ValueError for an empty or too long prompt."""
        recipe = ("pair", positive, negative, layer, how)
        return Direction(recipe, self._derived("steer.vector", _vector, recipe))

    def feature_direction(self, feature: int) -> Direction:
        """This model's SAE feature as a direction (`tfm.analysis.dictionaries.features.steering_vector`)."""
        recipe = ("feature", self.spec, feature)
        return Direction(recipe, self._derived("steer.vector", _vector, recipe))

    def steered_texts(
        self,
        direction: Direction,
        prompt: str,
        strength: float,
        seed: int,
        new: int,
        temperature: float,
        where: str,
        include_first: bool = False,
    ) -> SteeredTexts:
        """The prompt's continuation without and with the direction (`steering.steered_pair`),
        stopped once no page waits for it."""

        def texts(lm, _recipe, prompt, strength, *rest, should_stop=None):
            *sampling, where, first = rest  # seed, new, temperature
            return steering.steered_pair(
                lm,
                prompt,
                direction.vector,
                strength,
                *sampling,
                where=where,
                should_stop=should_stop,
                include_first=first,
            )

        key = (prompt, strength, seed, new, temperature, where, include_first)
        pair = self._derived(
            "steer.texts", texts, direction.recipe, *key, stoppable=True, status="Generating with and without steering…"
        )
        return SteeredTexts(*pair)

    def mood_sweep(
        self,
        direction: Direction,
        ids: tuple[int, ...],
        tokens: tuple[int, ...],
        strengths: tuple[float, ...],
        include_first: bool = False,
    ) -> MoodSweep:
        """p(each token) after `ids` at each strength, steering the prompt (`steering.sweep_tokens`)."""

        def sweep(lm, _recipe, ids, tokens, strengths, first, should_stop=None):
            probs = steering.sweep_tokens(lm, ids, direction.vector, strengths, tokens, should_stop, first)
            return MoodSweep(strengths, tokens, tuple(tuple(row) for row in probs.T.tolist()))

        return self._derived(
            "steer.sweep", sweep, direction.recipe, ids, tokens, strengths, include_first, stoppable=True
        )

    def steer_calibration(self) -> steer_calibrate.Calibration:
        """Where steering works on this model (`tfm.analysis.steering.calibrate.calibrate`): the shipped
        file when it was measured on these weights (`steer_files`), else measured once per model,
        with a status line; ValueError where it cannot run (a very short context)."""
        shipped = self._derived("steer.shipped_calibration", steer_files.shipped_calibration, self.spec)
        if shipped is not None:
            return shipped
        return self._derived(
            "steer.calibration",
            lambda lm, should_stop=None: steer_calibrate.calibrate(lm, should_stop=should_stop),
            stoppable=True,
            status="Measuring where steering works on this model (once per model, seconds)…",
        )

    def read_out(self, vector, n: int) -> ReadOut:
        """The tokens a direction promotes and suppresses most (`tfm.analysis.steering.vectors.read_out`)."""
        return ReadOut(*(tuple(part) for part in steering.read_out(self.lm, vector, n)))

    def stream_norms(self) -> tuple[float, ...]:
        """Each layer's typical stream length, the unit of steering strength (`steering.stream_norms`)."""
        return self._derived("steer.norms", steering.stream_norms)
