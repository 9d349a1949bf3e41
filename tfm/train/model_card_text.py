"""The default model's card as text: its README template and the attention-heads section
(`model_card.render` and `heads_section` fill them in)."""

HEADS_SECTION = """## Attention heads (the engine's scores, `tfm.analysis`)
Previous-token and first-token scores on the first {n_nat} tokens of `tinystories_valid.txt`;
induction scores on {probe_len} random tokens repeated twice (the standard induction test; the
same probe as the app's head table).
Score = average attention mass on the positions that head type predicts (TransformerLens's
definition).

- Strongest previous-token heads: {top_prev} (on the repeated random tokens: {top_prev_probe})
- Strongest induction heads: {top_ind}
- Strongest first-token (attention sink) heads: {top_first}
- Copying from context: on {cp[n]} spans of {cp[span]} tokens of `tinystories_valid.txt`, the
  loss is {cp[first]:.2f} nats/token the first time and **{cp[second]:.2f}** when the same span
  is repeated right after it.

Previous-token:

{prev}

Induction:

{ind}

First-token:

{first}

"""


TEMPLATE = """# tfm default model: model card

A small GPT trained from scratch by this project on CPU, for looking inside: readable simple
English, recognisable attention heads, small enough to run anywhere. Written {date} by
`python -m tfm.train.model_card`; every figure below was measured by that command or by the run.

## Model
- {n_params:,} parameters (tied embeddings counted once); by component: `{counts}`
- Tokenizer: the project's 4096-token byte-level BPE (`assets/tokenizer/`, served by tiktoken;
  the size was chosen by measurement, see `assets/tokenizer/vocab_report.json`: 4096 keeps most
  common words whole (3.70 characters per token on TinyStories) at a quarter of the
  embedding cost of 8192).

```json
{cfg}
```

## Data and licences
Read from `../shared/corpus/` at training time, never copied into this repository.

| file | content | licence |
|---|---|---|
{lic}

Training mix (held-out tail of 1% of each file excluded):

| file | share of batches | training tokens | epochs seen |
|---|---|---|---|
{mix}

{repeat}

## Training
- {tokens:,} tokens in {steps:,} steps, {hours:.2f} h wall time on a shared 2-core CPU
  (bf16 autocast; the run checkpointed and can be resumed).
{stages}- Loss curve (training loss of the mix, and held-out loss of the mix):

![loss curve](loss_curve.svg)

## Held-out evaluation
- **{bpb:.3f} bits per byte** on the first 200,000 bytes of `tinystories_valid.txt` (never
  trained on; vocabulary-independent) at the end of training; the best was {best_bpb:.3f} at
  step {best_step}.
- Held-out loss of the mix: {val:.3f} nats/token ({per_file}).

## Samples (seed 0, top-k off, top-p off)
{samples}

{heads_section}## Reproduce
From the repository root (with `../shared/corpus` beside it), after `scripts/setup.sh dev`:

```bash
{cmds}
.venv/bin/python -m tfm.train.model_card {run} --out assets/models/default
```
Training is deterministic for a seed on the CPU (tested), so this gives the same weights up to
bf16 kernel differences between machines; an interrupted run continues with the same command
plus `--resume`. Its wall-clock speed depends on the machine (the figures above were taken
on a shared, busy 2-core machine).
"""
