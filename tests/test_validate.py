"""tfm.core.validate: the one integer / number / JSON-object check of the engine."""

import dataclasses

import numpy as np
import pytest
import torch

from tfm.core.validate import check_int, check_number, from_json_object


def test_check_int_accepts_integer_scalars_and_refuses_bools_floats_and_out_of_range():
    assert (
        check_int("k", 5, 0) == 5 and check_int("k", np.int64(3), 0, 9) == 3 and check_int("k", torch.tensor(2), 0) == 2
    )
    with pytest.raises(ValueError, match=r"^n must be an integer between 1 and 1,024, got True \(heads\)$"):
        check_int("n", True, 1, 1024, " (heads)")
    with pytest.raises(ValueError, match="must be an integer >= 0, got 2.0"):
        check_int("k", 2.0, 0)
    with pytest.raises(ValueError, match=r"^seed=-1 is out of range; it must be between 0 and 65,535$"):
        check_int("seed", -1, 0, 2**16 - 1)
    with pytest.raises(ValueError, match="it must be >= 1"):
        check_int("steps", 0, 1)


def test_check_number_needs_a_finite_number_in_range():
    assert check_number("t", 0.5, 0) == 0.5 and check_number("p", 1, 0, 1) == 1.0
    for bad in (float("nan"), float("inf"), "0.5", None, False):
        with pytest.raises(ValueError, match="must be a finite number"):
            check_number("t", bad)
    with pytest.raises(ValueError, match=r"top_p=1.5 is out of range; it must be between 0 and 1 \(1 is off\)"):
        check_number("top_p", 1.5, 0, 1, " (1 is off)")


def test_from_json_object_names_unknown_and_missing_keys():
    @dataclasses.dataclass(frozen=True)
    class C:
        a: int
        b: int = 2

    assert from_json_object(C, {"a": 1}, "a C") == C(1, 2)
    with pytest.raises(ValueError, match="a C must be a JSON object, got list"):
        from_json_object(C, [1], "a C")
    with pytest.raises(ValueError, match=r"unknown config keys \['z'\]; allowed keys are \['a', 'b'\]"):
        from_json_object(C, {"a": 1, "z": 0}, "a C")
    with pytest.raises(ValueError, match=r"missing required keys \['a'\]"):
        from_json_object(C, {"b": 1}, "a C")
