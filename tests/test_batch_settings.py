"""The server's batching settings: --batching on|off (TFM_BATCHING), batch_rows and
batch_rows_per_session, each checked with one clear message."""

from __future__ import annotations

import pytest

from tfm.loaders.limits import Limits
from services import server


def test_batching_is_on_by_default_and_flags_win_over_the_environment():
    assert server.parse([], {}).batching is True
    assert server.parse(["--batching", "off"], {}).batching is False
    assert server.parse([], {"TFM_BATCHING": "off"}).batching is False
    assert server.parse(["--batching", "on"], {"TFM_BATCHING": "off"}).batching is True
    s = server.parse(["--batch-rows", "8", "--batch-rows-per-session", "2"], {})
    assert (s.limits.batch_rows, s.limits.batch_rows_per_session) == (8, 2)


def test_bad_batching_settings_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="on or off"):
        server.parse([], {"TFM_BATCHING": "maybe"})
    with pytest.raises(ValueError, match="invalid choice"):
        server.parse(["--batching", "yes"], {})
    with pytest.raises(ValueError, match="lower it or raise batch_rows"):
        Limits(batch_rows=2, batch_rows_per_session=3)
    with pytest.raises(ValueError, match="batch_rows"):
        Limits(batch_rows=0)
