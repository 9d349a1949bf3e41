"""Teaching: the guided tour and its checks, a class room's questions (questions.py), the
induction-head lesson, the toy encoder-decoder tasks, the experiments page's computations, and
each Look-inside page's example prompts, measured on the running model (examples.py).

Layer 5: may import every layer below (core, text, loaders, generation, analysis).
"""
