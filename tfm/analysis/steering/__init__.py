"""Activation steering: vectors (a direction from a pair of prompts or a feature, sweeps of
strengths), calibrate (where steering works: layers and strengths measured on a model), files (the
shipped models' calibrations)."""
