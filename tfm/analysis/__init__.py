"""Analysis: plain functions over a model and its trace.

heads (head scores, the induction probe, the head table, rollout), lens (the logit lens),
tuned_lens (trained per-layer translators: the tuned lens's files) and lens_compare (both lenses on
a prompt: grids, KL to the final distribution, top-1 agreement),
norms (norm statistics), shapes (shapes, parameter counts, KV-cache sizes), positions (the
positional-encoding page), attention_rows (a window of a pattern), attribution (direct logit
attribution), patching (ablation and activation patching sweeps), topk_dict (the TopK dictionary
an SAE and a transcoder share), transcoder (per-layer TopK transcoders), graph (attribution graphs
on them: graph_frozen, graph_rows, graph_prune,
graph_edit, graph_io, graph_slopes, graph_view), steering (steer_calibrate: where steering works;
steer_files: the shipped models' calibrations), sae and features; neuron_view (how one score
is made), similarity and bert_heads (encoders' sentence embeddings and Clark et al.'s averages),
capability (what a page needs of a model).

Layer 4: may import tfm.core, tfm.text, tfm.loaders and tfm.generation.

`tfm.analysis.head_table` and the other names below keep working as they did when this was one
module.
"""
from ..core.stats import entropy
from .heads import (PROBE_LEN, PROBE_SCORES, PROBE_SEED, PROMPT_SCORES, SCORES, HeadTable, ProbeSettings, Progress, detection_score,
                    duplicate_token_detection, first_token_detection, head_scores, head_table, induction_detection,
                    induction_probe, patterns, previous_token_detection, probe_settings, rollout, strongest_heads,
                    top_head)
from .graph import Graph, GraphSettings, Target, attribution_graph
from .graph_edit import FeatureEdit, Faithfulness, Intervention, edited_logits, faithfulness, intervene, predicted_change
from .graph_io import GraphFile, graph_file, load_graph_json
from .graph_prune import Pruned, graph_scores, node_influence, prune_graph
from .lens import LogitLens, decode_streams, logit_lens, residual_streams
from .norms import layer_summaries, norm_stats, residual_norms
from .shapes import param_counts

__all__ = ["FeatureEdit", "Faithfulness", "Graph", "GraphFile", "GraphSettings", "Intervention", "Pruned", "Target",
           "attribution_graph", "edited_logits", "faithfulness", "graph_file", "graph_scores", "intervene", "load_graph_json",
           "node_influence", "predicted_change", "prune_graph",
           "PROBE_LEN", "PROBE_SCORES", "PROBE_SEED", "PROMPT_SCORES", "SCORES", "HeadTable", "LogitLens", "ProbeSettings", "Progress",
           "decode_streams", "detection_score", "duplicate_token_detection", "entropy", "first_token_detection",
           "head_scores", "head_table", "induction_detection", "induction_probe", "layer_summaries",
           "logit_lens", "norm_stats", "param_counts", "patterns", "previous_token_detection", "probe_settings",
           "residual_norms", "residual_streams", "rollout", "strongest_heads", "top_head"]
