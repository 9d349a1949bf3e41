"""Lenses on the residual stream: logit (the logit lens), tuned (trained per-layer translators: a
tuned lens's files), compare (both lenses on a prompt: grids, KL to the final distribution, top-1
agreement)."""
