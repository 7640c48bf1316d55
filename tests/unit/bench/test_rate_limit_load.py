"""``bench rate-limit``'s two estimates of an accepted rate, on hand-made answer times."""

from __future__ import annotations

from bench.rate_limit_load import Sent, accepted_rate, accepted_rate_by_count


def test_both_estimates_on_a_burst_of_4_then_one_admission_every_half_second() -> None:
    """Answers every 0.125 s over [0, 4]: the first 4 admitted (the burst), then one in four from
    t = 1.0 (every 0.5 s): 4 + 7 admitted. Steady (from t = 0 + 1): 1.0, 1.5, ..., 4.0 = 7 answers
    over 3 s, 2/s; by count (11 - 4) / 4 s = 1.75/s (the first 0.5 s admit nothing beyond the burst)."""
    hot = []
    for k in range(33):
        t = k * 0.125
        admitted = k < 4 or (t >= 1.0 and k % 4 == 0)
        hot.append(Sent(offset_s=t, done_s=t, status=200 if admitted else 429))
    assert sum(s.status == 200 for s in hot) == 11
    assert accepted_rate(hot, warmup_s=1.0) == 2.0
    assert accepted_rate_by_count(hot, burst=4) == 1.75
