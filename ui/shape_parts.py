"""The Shapes page's numbers (`tfm.analysis.shapes`): a forward's shapes at another batch and
length, parameters by component against their formulas, and KV-cache sizes of what-if shapes."""

from __future__ import annotations

from tfm.analysis import shapes
from tfm.core.trace import ShapeEntry
from ui.model_run import ModelRun
from ui.run import PromptRun

DTYPES = tuple(shapes.DTYPES)  # the precisions a KV cache is sized in, by name


def shape_trace(run: PromptRun, batch: int, length: int) -> tuple[ShapeEntry, ...]:
    """Every tensor's shape: the traced run's at batch 1 and the prompt's length, else a meta-device forward."""
    if (batch, length) == (1, len(run.ids)):
        return run.trace.shapes
    return shapes.shape_trace(run.lm.config, run.ids, batch, length)


def param_counts(run: ModelRun) -> dict[str, int]:
    return shapes.param_counts(run.lm.model)


def param_records(run: ModelRun) -> list[dict]:
    """`shapes.param_rows` as the page's table: component, formula, by formula, counted, match."""
    return [
        {
            "component": r.component,
            "formula": r.formula,
            "by formula": r.by_formula,
            "counted": r.counted,
            "match": "✓" if r.match else "✗",
        }
        for r in shapes.param_rows(run.lm.model)
    ]


def kv_what_if(run: ModelRun, context: int, layers: int, kv_heads: int, dtype: str, batch: int) -> shapes.KVWhatIf:
    """`tfm.analysis.shapes.kv_what_if` of this model; ValueError for a combination that is no model."""
    return shapes.kv_what_if(run.lm.config, context, layers, kv_heads, dtype, batch)
