"""Learning curves: what each run's lines are drawn against."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt

from robolearn.curves import plot_runs


def test_a_fine_tuning_run_draws_its_offline_phase_too(tmp_path, monkeypatch):
    """Offline lines count updates, online lines env steps: each phase is its own curve, none dropped."""
    lines = [{"phase": "offline", "updates": u, "time": u / 1000, "eval/return": r} for u, r in ((1000, 1.0), (2000, 2.0))]
    lines += [{"phase": "online", "env_steps": s, "time": 2 + s / 1000, "eval/return": r} for s, r in ((500, 3.0), (1000, 4.0))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs([tmp_path], tmp_path / "curves.png")
    by_steps, by_time = figures[0].axes[:2]
    curves = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in by_steps.lines}
    assert sorted(curves.values()) == [([500, 1000], [3.0, 4.0]), ([1000, 2000], [1.0, 2.0])]
    assert any("offline (updates)" in label for label in curves) and any("online (env steps)" in label for label in curves)
    assert sorted(x for line in by_time.lines for x in line.get_xdata()) == [1.0, 2.0, 2.5, 3.0]  # seconds: one clock
    assert by_steps.get_legend() is not None
