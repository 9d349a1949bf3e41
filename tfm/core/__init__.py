"""The engine core: the model and everything one forward needs.

config (ModelConfig, presets), validate (the one check of counts and rates), kernels (the CPU
product choice), rope, positions, cache (KV cache), functional (attention and unembedding
arithmetic), trace / trace_cost / trace_read (named intermediates and their byte costs), lazy
(traces computed on first read), model (Norm, Attention, MLP, Block, GPT), edits (per-call
interventions), stats, cancel (`should_stop` and `Cancelled`: stopping a loop nobody waits for),
files (the bounded reader of untrusted JSON and text files, and the guard that turns any failure
while reading one into a ValueError naming it).

Layer 0: imports nothing else from tfm.
"""
