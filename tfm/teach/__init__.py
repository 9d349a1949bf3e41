"""Teaching: the guided tour and its checks, a class room's questions (questions.py), the
induction-head lesson, the toy encoder-decoder tasks, and the experiments page's computations.

Layer 5: may import every layer below (core, text, loaders, generation, analysis).
"""
