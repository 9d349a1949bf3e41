"""tfm.viz.norms: a heatmap whose one token dwarfs the rest (an attention sink) caps its colours,
keeps every value exact, and says so in its title."""

from __future__ import annotations

import numpy as np

from tfm.viz import norms as fn


def test_a_sink_column_caps_the_colours_and_keeps_the_values():
    values = np.array([[2.3e4, 50.0, 80.0], [1.9e4, 60.0, 120.0]])
    fig = fn.layer_token_heatmap(values, ["<s>", "a", "b"], ["L0", "L1"], "norm", "norm")
    assert fig.data[0].zmax == 120.0 and fig.data[0].zmin == 50.0  # both: plotly keeps zauto with one
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), values)
    assert "colours stop at 120" in fig.layout.title.text and "token 0" in fig.layout.title.text


def test_ordinary_values_keep_the_full_range():
    for values in (np.array([[1.0, 5.0, 3.0], [2.0, 4.0, 6.0]]), np.array([[-3e4, 1.0], [2.0, 3.0]])):
        fig = fn.layer_token_heatmap(values, ["a", "b", "c"][: values.shape[1]], ["L0", "L1"], "t", "c")
        assert fig.data[0].zmax is None and fig.data[0].zmin is None and "colours stop" not in fig.layout.title.text
