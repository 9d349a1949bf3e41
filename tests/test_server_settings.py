"""services.server.parse: the owner's flags (after `--`) over TFM_* environment variables over defaults."""

from __future__ import annotations

import os

import pytest

from tfm.loaders.limits import Limits
from services import server


def test_defaults_allow_the_bundled_and_models_folders_only():
    s = server.parse([], {})
    assert s.limits == Limits()
    assert s.model_roots == tuple(r.resolve() for r in server.DEFAULT_ROOTS)


def test_flags_win_over_the_environment(tmp_path):
    env = {
        "TFM_MAX_NEW_TOKENS": "64",
        "TFM_MAX_MODEL_BYTES": "1GB",
        server.ROOTS_ENV: f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}",
    }
    s = server.parse(["--max-new-tokens", "16", "--allow-models", str(tmp_path / "c"), "--heavy-slots", "3"], env)
    assert (s.limits.max_new_tokens, s.limits.max_model_bytes, s.limits.heavy_slots) == (16, 10**9, 3)
    assert s.model_roots[-3:] == tuple((tmp_path / n).resolve() for n in "abc")


@pytest.mark.parametrize("argv", [["--bogus"], ["--max-new-tokens", "0"], ["--max-trace-bytes", "lots"], ["--max"]])
def test_bad_flags_are_a_clear_error(argv):
    with pytest.raises(ValueError, match="max_new_tokens=0 is out of range|app.py's flags"):
        server.parse(argv, {})
