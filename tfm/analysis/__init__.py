"""Analysis: plain functions over a model and its trace, grouped by subject.

Flat modules (what every page reads of one run): heads (head scores, the induction probe, the head
table, rollout), norms (norm statistics), shapes (shapes, parameter counts, KV-cache sizes),
positions (the positional-encoding page), attention_rows (a window of a pattern), attribution
(direct logit attribution), patching (ablation and activation patching sweeps), neuron_view (how one
attention score is made), capability (what a page needs of a model).

Subpackages: `lens/` (the logit lens, tuned lenses, both compared), `dictionaries/` (the TopK
dictionary SAEs and transcoders share, their features and labels), `graph/` (attribution graphs on
transcoders), `steering/` (steering vectors, where steering works, shipped calibrations), `quant/`
(what re-quantizing does), `encoders/` (BERT sentence embeddings and head averages).

Layer 4: may import tfm.core, tfm.text, tfm.loaders and tfm.generation.

The names below (head scores and their probe, the one path: `tfm.analysis.head_table`; norms and
parameter counts) are re-exported here; everything else is imported from its module.
"""

from ..core.stats import entropy
from .heads import (
    PROBE_LEN,
    PROBE_SCORES,
    PROBE_SEED,
    PROMPT_SCORES,
    SCORES,
    HeadTable,
    ProbeSettings,
    Progress,
    detection_score,
    duplicate_token_detection,
    first_token_detection,
    head_scores,
    head_table,
    induction_detection,
    induction_probe,
    patterns,
    previous_token_detection,
    probe_settings,
    rollout,
    strongest_heads,
    top_head,
)
from .norms import layer_summaries, norm_stats, residual_norms
from .shapes import param_counts

__all__ = [
    "PROBE_LEN",
    "PROBE_SCORES",
    "PROBE_SEED",
    "PROMPT_SCORES",
    "SCORES",
    "HeadTable",
    "ProbeSettings",
    "Progress",
    "detection_score",
    "duplicate_token_detection",
    "entropy",
    "first_token_detection",
    "head_scores",
    "head_table",
    "induction_detection",
    "induction_probe",
    "layer_summaries",
    "norm_stats",
    "param_counts",
    "patterns",
    "previous_token_detection",
    "probe_settings",
    "residual_norms",
    "rollout",
    "strongest_heads",
    "top_head",
]
