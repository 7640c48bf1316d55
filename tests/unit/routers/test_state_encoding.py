"""encode_state/decode_state keep dtypes, shapes, infinities and nesting."""

from __future__ import annotations

import math

import numpy as np

from routers.base import decode_state, encode_state


def test_round_trip() -> None:
    state = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": {"x": np.array([1, 2], dtype=np.int64), "y": [np.float64(0.5), math.inf, -math.inf]},
        "c": "text",
        "d": None,
    }
    back = decode_state(encode_state(state))
    assert (
        back["a"].dtype == np.float32 and back["a"].shape == (2, 3) and np.array_equal(back["a"], state["a"])
    )
    assert back["b"]["x"].dtype == np.int64 and back["b"]["y"] == [0.5, math.inf, -math.inf]
    assert back["c"] == "text" and back["d"] is None
