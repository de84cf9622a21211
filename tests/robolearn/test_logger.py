"""The run logger: metrics.jsonl lines, and a progress bar that does not flood a log file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from robolearn.logger import RunLogger


def test_the_bar_writes_a_log_file_sparingly(tmp_path, capsys):
    """With stderr not a terminal (a log file, CI) the bar redraws every 30 s, not at every log call."""
    logger = RunLogger(tmp_path, total_steps=100_000, config={}, wandb_mode="disabled", progress=True)
    for i in range(1, 201):
        logger.log(500 * i, {"return": float(i)})
    logger.close()
    err = capsys.readouterr().err
    assert 1 <= err.count("\r") <= 3, repr(err)  # the first draw, the last, the close
    assert "100k/100k" in err, repr(err)  # the last draw shows the run's end
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 200 and lines[-1]["env_steps"] == 100_000


def test_into_a_log_file_tqdms_monitor_does_not_redraw_the_bar_before_30_s(tmp_path):
    """tqdm's monitor thread redraws a bar not drawn for ``maxinterval`` (10 s by default) whatever its
    ``mininterval``: a training log got a bar every 10-20 s (seen: 15 s apart), not the 30 s meant."""
    logger = RunLogger(tmp_path, total_steps=100, config={}, wandb_mode="disabled", progress=True)
    try:
        bars = [logger._bar, logger.phase_bar(10, 0, "pretrain", "upd")]
        assert all(bar.mininterval == 30.0 and bar.maxinterval >= bar.mininterval for bar in bars)
    finally:
        logger.close()


def test_a_phase_counted_in_updates_gets_a_bar_of_its_own(tmp_path, capsys):
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=True)
    bar = logger.phase_bar(200, 50, "pretrain", "upd")
    bar.update(150)
    bar.close()
    logger.close()
    err = capsys.readouterr().err  # the run's bar alone would have sat at 0 steps throughout
    assert "pretrain:  25%" in err and "50.0/200 [" in err, repr(err)  # from where earlier updates left it
    (tmp_path / "q").mkdir()
    quiet = RunLogger(tmp_path / "q", total_steps=1000, config={}, wandb_mode="disabled", progress=False)
    assert quiet.phase_bar(10, 0, "pretrain", "upd").disable  # logging.progress=false silences it too
    quiet.close()


def test_a_torn_last_line_is_read_past_and_set_aside_on_resume(tmp_path):
    """A run killed mid-write leaves half a line: readers skip it, and a resumed logger moves it to
    metrics.superseded.jsonl instead of appending its next line onto it."""
    from robolearn.logger import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"env_steps": 100, "time": 1.0}\n{"env_steps": 2')
    assert [line["env_steps"] for line in read_metrics(tmp_path)] == [100]
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=False, initial_steps=100)
    logger.log(200, {"return": 1.0})
    logger.close()
    assert [line["env_steps"] for line in read_metrics(tmp_path)] == [100, 200]
    assert path.read_text().count("\n") == 2
    assert (tmp_path / "metrics.superseded.jsonl").read_text() == '{"env_steps": 2\n'


def test_lines_set_aside_after_a_torn_superseded_line_stay_lines_of_their_own(tmp_path):
    """A resume killed mid-append to metrics.superseded.jsonl (kill -9) left it torn: the next resume's lines had
    been appended onto that half line, the first of them joined to it and no longer read as JSON."""
    superseded = tmp_path / "metrics.superseded.jsonl"
    superseded.write_text('{"env_steps": 300}\n{"env_steps": 4')
    (tmp_path / "metrics.jsonl").write_text('{"env_steps": 100, "time": 1.0}\n{"env_steps": 200, "time": 2.0}\n')
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=False, initial_steps=100)
    logger.close()
    assert superseded.read_text().splitlines() == ['{"env_steps": 300}', '{"env_steps": 4',
                                                   '{"env_steps": 200, "time": 2.0}']


@pytest.mark.parametrize("bad, superseded", [
    (b'{"env_steps": \xff\xfe}', b'{"env_steps": '),  # bytes that are no UTF-8 (a disk's damage)
    (b"[" * 100_000 + b"]" * 100_000, b"[[["),  # nested deeper than json decodes (RecursionError, no ValueError)
])
def test_a_damaged_line_of_the_metrics_is_set_aside_not_a_refused_resume(tmp_path, bad, superseded):
    """Damaged bytes had stopped the resume with a decode error naming no file; 100,000 nested brackets had
    stopped `list`, `plot` and a resume in json's RecursionError traceback."""
    from robolearn.logger import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"env_steps": 100, "time": 1.0}\n' + bad + b"\n")
    assert [line["env_steps"] for line in read_metrics(tmp_path)] == [100]
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=False, initial_steps=100)
    logger.log(200, {})
    logger.close()
    assert [line["env_steps"] for line in read_metrics(tmp_path)] == [100, 200]
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes().startswith(superseded)


def test_a_last_line_whole_but_for_its_newline_gets_one_before_the_next(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"env_steps": 100, "time": 1.0}')
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=False, initial_steps=100)
    logger.log(200, {})
    logger.close()
    assert [json.loads(line)["env_steps"] for line in path.read_text().splitlines()] == [100, 200]


def test_wandb_runs_carry_the_configs_group_and_tags(tmp_path):
    """Seeds of one setting group together in W&B (logging.group, logging.tags)."""
    from robolearn.config import LoggingConfig

    settings = LoggingConfig(wandb="offline", progress=False, group="pend_base", tags=("seed-study", "ppo"))
    run = tmp_path / "runs" / "20260101-000000"
    run.mkdir(parents=True)
    logger = RunLogger(run, total_steps=10, config={}, **settings.logger_args("pend"))
    try:
        assert logger._wandb.group == "pend_base" and list(logger._wandb.tags) == ["seed-study", "ppo"]
    finally:
        logger.close()


def test_wandb_is_quiet_for_the_run_alone(tmp_path, monkeypatch, capfd):
    """The logger had set WANDB_SILENT=true in os.environ for good: a script's own wandb.init after train() was silent
    too, the link to its run included."""
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    logger = RunLogger(tmp_path, total_steps=10, config={}, wandb_mode="offline", progress=False)
    logger.close()
    assert "WANDB_SILENT" not in os.environ
    assert "wandb:" not in "".join(capfd.readouterr())


def test_a_run_left_open_does_not_take_the_next_runs_wandb_lines(tmp_path):
    """A run stopped by an error leaves its W&B run open; in a script that goes on, W&B's default returned that
    run to the next wandb.init, so the next run's lines went under the first's id (and were dropped as steps
    logged before its last)."""
    first, second = tmp_path / "runs" / "first", tmp_path / "runs" / "second"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    left_open = RunLogger(first, total_steps=10, config={}, wandb_mode="offline", progress=False)
    logger = RunLogger(second, total_steps=10, config={}, wandb_mode="offline", progress=False)
    try:
        assert logger._wandb is not left_open._wandb and logger._wandb.id.startswith("runs-second-")
        assert Path(logger._wandb.dir).is_relative_to(second)
    finally:
        logger.close()
        left_open.close()


def test_a_renamed_run_resumes_its_wandb_run(tmp_path):
    """The W&B id had been made from the run's folder names, so a run renamed or moved to another folder and
    resumed started a second W&B run of the same name, holding only the steps after the move."""
    run = tmp_path / "runs" / "ppo_cartpole" / "20260101-000000"
    run.mkdir(parents=True)
    first = RunLogger(run, total_steps=10, config={}, wandb_mode="offline", progress=False)
    first_id = first._wandb.id
    first.close()
    assert first_id.startswith("ppo-cartpole-20260101-000000-")
    (tmp_path / "kept").mkdir()
    moved = run.rename(tmp_path / "kept" / "best")
    logger = RunLogger(moved, total_steps=10, config={}, wandb_mode="offline", progress=False)
    try:
        assert logger._wandb.id == first_id
    finally:
        logger.close()
    sessions = list((moved / "wandb").glob("offline-run-*/*.wandb"))
    assert len(sessions) == 2 and {path.name for path in sessions} == {f"run-{first_id}.wandb"}


def test_the_fps_after_a_phase_without_env_steps_counts_from_its_end(tmp_path, monkeypatch):
    """A skill run pretrains for minutes at env step 0: its first online lines once showed a fraction of the fps."""
    clock = iter([0.0, 100.0, 110.0, 110.0])  # start; pretraining ends at 100 s; 10 s later, 1000 steps logged
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    logger = RunLogger(tmp_path, total_steps=1000, config={}, wandb_mode="disabled", progress=False)
    logger.restart_rate(0)
    now, fps = logger.clock(1000)
    assert fps == 100.0 and now == 110.0  # 1000 steps in 10 s, the run's time goes on
    logger.close()


def test_the_runs_clock_starts_once_wandb_has_started(tmp_path, monkeypatch):
    """W&B's start-up (about 2 s) had counted as training time: a W&B run's curves began 2 s after a --no-wandb
    run's, beside it in a plot of the two. On a fake clock that only W&B's start moves: the wall clock's second of
    sleep, with 0.5 s allowed after it, failed on a machine loaded enough to hold the test up for as long."""
    import wandb

    from robolearn.logger import read_metrics

    class Started:
        def log(self, *args, **kwargs): ...
        def finish(self, exit_code: int = 0): ...

    clock = [100.0]

    def read() -> float:
        clock[0] += 1e-6  # (a microsecond a read: a rate divides by the time since the start)
        return clock[0]

    def slow_start(**kwargs) -> Started:
        clock[0] += 60.0  # a slow start
        return Started()

    monkeypatch.setattr(time, "perf_counter", read)
    monkeypatch.setattr(wandb, "init", slow_start)
    logger = RunLogger(tmp_path, total_steps=10, config={}, wandb_mode="offline", progress=False)
    logger.log(1, {"loss": 1.0})
    logger.close()
    assert read_metrics(tmp_path)[0]["time"] == 0.0  # the start's 60 s not counted (60.0 where they were)


def test_online_logging_without_a_wandb_key_is_one_line_saying_what_to_do(tmp_path, monkeypatch):
    """W&B's UsageError had come out as a 38-line traceback."""
    import wandb

    from robolearn.config import ConfigError

    def no_key(**_):  # as W&B refuses online mode without a key (a real call may prompt on a terminal instead)
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_key)
    with pytest.raises(ConfigError, match=r"logging.wandb=online: W&B refused to start \(No API key configured.*\): "
                                          r"run `wandb login`"):
        RunLogger(tmp_path, total_steps=10, config={}, wandb_mode="online", progress=False)


def test_the_bars_eta_is_the_time_left_under_runner_max_minutes(tmp_path, capsys):
    """runner.max_minutes ends a run at its deadline, but the bar's ETA counted to runner.total_steps: a 3-minute
    run of a 2M-step config showed '3%| 60.4k/2.00M [00:17<09:35' one second before it ended."""
    logger = RunLogger(tmp_path, total_steps=1_000_000, config={}, wandb_mode="disabled", progress=True)
    clock = [logger._bar._time()]
    logger._bar._time = lambda: clock[0]
    logger.set_deadline(time.monotonic() + 120)  # two minutes left
    for i in range(1, 4):
        clock[0] += 60.0  # 1000 steps a minute: 16 hours to 1M steps
        logger.log(1000 * i, {})
    bar = str(logger._bar)
    logger.close()
    eta = bar.split("<", 1)[1].split(",", 1)[0]
    assert eta.startswith(("01:", "02:00")) and "max_minutes" in eta, bar
    (tmp_path / "plain").mkdir()
    plain = RunLogger(tmp_path / "plain", total_steps=1_000_000, config={}, wandb_mode="disabled", progress=True)
    clock = [plain._bar._time()]
    plain._bar._time = lambda: clock[0]
    for i in range(1, 4):
        clock[0] += 60.0
        plain.log(1000 * i, {})
    assert "16:" in str(plain._bar).split("<", 1)[1], str(plain._bar)  # no deadline: to total_steps, as before
    plain.close()


def test_runs_of_one_name_and_second_in_other_folders_get_their_own_wandb_runs(tmp_path):
    """A new run's W&B id was its folder's '<name>-<time>': two runs of one config started in the same second
    under two run_dir= (two machines of a sweep, two jobs' scratch folders) shared it, and `wandb sync` merged
    them into one W&B run (the second's steps dropped as logged before the first's last)."""
    ids = []
    for machine in ("a", "b"):
        run = tmp_path / machine / "ppo_cartpole" / "20260101-000000"
        run.mkdir(parents=True)
        logger = RunLogger(run, total_steps=10, config={}, wandb_mode="offline", progress=False)
        ids.append(logger._wandb.id)
        logger.close()
    assert ids[0] != ids[1], ids
    assert all(i.startswith("ppo-cartpole-20260101-000000-") for i in ids), ids  # still says which run it is


def test_a_fine_tunes_rates_have_the_names_other_runs_give_them(tmp_path):
    """Env steps a second are `fps` in PPO and SAC runs; a fine-tune's online phase called them `env_steps_per_s`,
    so `plot --metrics fps` (and a W&B chart of fps) of a SAC run beside a WSRL run left the WSRL run out."""
    from robolearn.finetune_runner import PhaseLogger
    from robolearn.offline_runner import UpdateLogger

    for phase, counter in (("offline", "updates"), ("online", "env_steps")):
        logger = PhaseLogger(tmp_path, phase, counter, total_steps=10, config={}, wandb_mode="disabled", progress=False)
        logger.log(5, {})
        logger.close()
    (tmp_path / "offline_run").mkdir()
    offline = UpdateLogger(tmp_path / "offline_run", total_steps=10, config={}, wandb_mode="disabled", progress=False)
    offline.log(5, {})
    offline.close()
    plain = RunLogger(tmp_path / "offline_run", total_steps=10, config={}, wandb_mode="disabled", progress=False)
    plain.log(5, {})
    plain.close()
    rates = [{k for k in json.loads(line) if k in ("fps", "updates_per_s", "env_steps_per_s")}
             for path in (tmp_path, tmp_path / "offline_run") for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert rates == [{"updates_per_s"}, {"fps"}, {"updates_per_s"}, {"fps"}]


def test_an_offline_runs_bar_calls_its_evaluation_return_what_it_is(tmp_path):
    """An offline run has no training return; its bar showed the periodic evaluation's as 'return=', the name of
    the online runs' training return (a fine-tune's bar already said 'eval/return=')."""
    from robolearn.offline_runner import UpdateLogger

    logger = UpdateLogger(tmp_path, total_steps=10, config={}, wandb_mode="disabled", progress=True)
    logger.log(5, {"eval/return": 118.8})
    bar = str(logger._bar)
    logger.close()
    assert "eval/return=118.8" in bar, bar
