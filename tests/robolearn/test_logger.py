"""The run logger: metrics.jsonl lines, and a progress bar that does not flood a log file."""

from __future__ import annotations

import json

from robolearn.logger import RunLogger


def test_the_bar_writes_a_log_file_sparingly(tmp_path, capsys):
    """With stderr not a terminal (a log file, CI) the bar redraws every 30 s, not at every log call."""
    logger = RunLogger(tmp_path, total_steps=100_000, config={}, wandb_mode="disabled", progress=True)
    for i in range(1, 201):
        logger.log(500 * i, {"return": float(i)})
    logger.close()
    err = capsys.readouterr().err
    assert err.count("\r") <= 3, err.count("\r")  # the first draw, the last, the close
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 200 and lines[-1]["env_steps"] == 100_000


def test_a_phase_counted_in_updates_gets_a_bar_of_its_own(tmp_path, capsys):
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=True)
    bar = logger.phase_bar(200, 50, "pretrain", "upd")
    bar.update(150)
    bar.close()
    logger.close()
    assert "pretrain" in capsys.readouterr().err  # the run's bar alone would have sat at 0 steps throughout
    (tmp_path / "q").mkdir()
    quiet = RunLogger(tmp_path / "q", total_steps=1000, config={}, wandb_mode="disabled", progress=False)
    assert quiet.phase_bar(10, 0, "pretrain", "upd").disable  # logging.progress=false silences it too
    quiet.close()
