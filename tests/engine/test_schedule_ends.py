"""Every schedule over many warmup / decay_fraction combinations: the peak at the end of warmup,
no rise after it, and the configured end lr at the last step (#50.1: 1-sqrt and wsd stopped short
whenever warmup + decay exceeded the run)."""

import numpy as np
import pytest

from jaxbert.engine.optim import SCHEDULES, OptimSection, make_schedule

TOTAL, PEAK, END = 200, 1e-3, 0.01


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_every_schedule_ends_at_its_end_lr_whatever_the_warmup_and_decay(schedule):
    for warmup in (0, 1, 20, 100, 180, 199):
        for fraction in (0.05, 0.2, 0.5, 0.9, 0.95, 1.0):
            o = OptimSection(learning_rate=PEAK, warmup_steps=warmup, schedule=schedule, decay_fraction=fraction,
                             end_lr_factor=END, decay_power=2.0)
            s = make_schedule(o, TOTAL)
            lr = np.array([float(s(t)) for t in range(TOTAL + 1)])
            case = (schedule, warmup, fraction)
            want_end = PEAK if schedule == "constant" else PEAK * END
            assert lr[TOTAL] == pytest.approx(want_end, rel=1e-5), case
            assert lr[warmup] == pytest.approx(PEAK, rel=1e-6), case
            assert np.all(np.diff(lr[warmup:]) <= 1e-12), case  # never rises after warmup
            if schedule in ("wsd", "1-sqrt"):
                # the decay: the last round(fraction * total) steps, or every step after warmup if fewer remain
                start = max(TOTAL - max(round(fraction * TOTAL), 1), warmup)
                assert np.allclose(lr[warmup:start + 1], PEAK), case
                assert lr[start + 1] < PEAK, case


def test_cosine_follows_half_a_cosine_after_warmup():
    o = OptimSection(learning_rate=PEAK, warmup_steps=40, schedule="cosine", end_lr_factor=END)
    s = make_schedule(o, TOTAL)
    # 160 steps after warmup: a quarter, a half and three quarters of the way down, written out by hand
    for step, cos in ((80, np.sqrt(0.5)), (120, 0.0), (160, -np.sqrt(0.5))):
        want = PEAK * END + (PEAK - PEAK * END) * (1 + cos) / 2
        assert float(s(step)) == pytest.approx(want, rel=1e-6), step
    assert float(s(20)) == pytest.approx(PEAK / 2, rel=1e-6)  # linear warmup
