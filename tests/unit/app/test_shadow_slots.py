"""``ShadowSlots`` (app/routing/probe_tasks.py): shadow calls over the process's limit are refused, and
calls in flight hold their expected cost against the router's budget until they settle."""

from __future__ import annotations

from app.routing.probe_tasks import ShadowSlots


def test_slots_refuse_over_the_limit_and_come_back() -> None:
    slots = ShadowSlots(2)
    assert slots.take() and slots.take()
    assert not slots.take()  # refused, nothing waits
    slots.give()
    assert slots.take() and slots.in_flight == 2


def test_calls_in_flight_hold_their_expected_cost_against_the_budget() -> None:
    slots = ShadowSlots(10)
    # budget 1.0 USD, 0.3 spent by stored calls: room for two calls expected at 0.3 each, not three
    assert slots.reserve(7, spent=0.3, expected=0.3, budget=1.0)
    assert slots.reserve(7, spent=0.3, expected=0.3, budget=1.0)
    assert not slots.reserve(7, spent=0.3, expected=0.3, budget=1.0)  # 0.3 + 0.6 + 0.3 > 1.0
    assert slots.reserve(8, spent=0.0, expected=0.3, budget=1.0)  # another router's budget is its own
    slots.settle(7, 0.3)  # one call stored: its cost is now in ``spent``
    assert not slots.reserve(7, spent=0.6, expected=0.3, budget=0.8)  # 0.6 + 0.3 + 0.3 > 0.8
    assert slots.reserve(7, spent=0.6, expected=0.1, budget=1.0)  # 0.6 + 0.3 + 0.1 <= 1.0
    slots.settle(7, 0.3)
    slots.settle(7, 0.1)
    assert 7 not in slots.reserved
