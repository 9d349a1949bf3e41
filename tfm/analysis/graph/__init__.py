"""Attribution graphs on per-layer transcoders: build (the graph of one prompt), frozen (the
forward with attention and norms frozen), rows (a row node's incoming edges), slopes (the real
slopes of frozen nonlinearities), prune (the nodes and edges holding most of the influence), edit
(interventions and their predicted and measured effects), files (graph JSON files), view (what the
page draws of a pruned graph)."""
