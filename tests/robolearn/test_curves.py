"""Learning curves: what each run's lines are drawn against."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

from robolearn.curves import plot_runs


@pytest.fixture(autouse=True)
def close_kept_figures():
    """The tests keep each figure open to read it (``plt.close`` patched): closed after each, not left for the
    rest of the suite's process (matplotlib had warned of more than 20 open)."""
    yield
    plt.close("all")


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
    assert figures[0].legends  # one legend, above the plots


def test_each_phase_keeps_its_colour_in_every_row_and_one_legend_names_them_all(tmp_path, monkeypatch):
    """A skill run: pretraining logs only its loss, the online phase only returns; the legend on the
    first row still names both, and a phase has one colour across the rows."""
    lines = [{"phase": "pretrain", "env_steps": 0, "pretrain_updates": u, "time": u / 100, "pretrain/loss": 1 / u}
             for u in (100, 200)]
    lines += [{"env_steps": s, "time": 2 + s / 100, "return": s / 10} for s in (100, 200)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs([tmp_path], tmp_path / "curves.png", metrics=["return", "pretrain/loss"])
    axes = figures[0].axes  # return: steps, time; pretrain/loss: steps, time
    labels = [text.get_text() for text in figures[0].legends[0].get_texts()]
    assert len(labels) == 2 and any("pretrain (pretrain updates)" in label for label in labels)
    return_colour, loss_colour = axes[0].lines[0].get_color(), axes[2].lines[0].get_color()
    assert return_colour != loss_colour and axes[3].lines[0].get_color() == loss_colour


def test_seeds_of_a_setting_share_a_colour_and_a_legend_entry_and_other_tasks_are_warned_about(tmp_path, monkeypatch):
    runs = []
    for folder, task in (("pend_base", "pendulum"), ("pend_g99", "pendulum"), ("cart", "cartpole")):
        for seed in (0, 1):
            run = tmp_path / folder / f"2026010{seed}-000000"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(json.dumps({"seed": seed, "env": {"task": task}}))
            (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 1e5, "return": s / 1e4 + seed})
                                                       + "\n" for s in (100_000, 2_000_000)))
            runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs[:4], tmp_path / "two.png")
    labels = [text.get_text() for text in figures[0].legends[0].get_texts()]
    assert labels == ["pend_base (2 runs)", "pend_g99 (2 runs)"]
    colours = [line.get_color() for line in figures[0].axes[0].lines]
    assert colours[0] == colours[1] != colours[2] == colours[3]
    assert figures[0].axes[0].xaxis.get_major_formatter()(2_000_000) == "2M"
    with pytest.warns(UserWarning, match=r"runs are of different tasks \(cartpole, pendulum\)"):
        plot_runs(runs, tmp_path / "mixed.png")


def test_many_runs_and_folders_of_one_name_under_different_parents(tmp_path, monkeypatch):
    """The figure grows by its legend (30 entries once crashed the layout); same-named folders are told
    apart by their parents."""
    def run_at(folder, stamp):
        run = tmp_path / folder / stamp
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s, "return": s}) + "\n" for s in (1, 2)))
        return run

    plot_runs([run_at(f"f{i}", "20260101-000000") for i in range(30)], tmp_path / "many.png", metrics=["return"])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    sweeps = [run_at(f"{sweep}/ppo_pendulum", f"2026010{k}-000000") for sweep in ("sweep_a", "sweep_b") for k in (0, 1)]
    plot_runs(sweeps, tmp_path / "sweeps.png")
    labels = [text.get_text() for text in figures[0].legends[0].get_texts()]
    assert labels == ["sweep_a/ppo_pendulum (2 runs)", "sweep_b/ppo_pendulum (2 runs)"]


def test_mean_draws_a_folders_seeds_as_their_mean_and_a_std_band_of_those_that_reached_each_step(tmp_path,
                                                                                                 monkeypatch):
    """Seeds logged at different steps are interpolated onto one grid; past the shorter run, the mean is the
    longer's alone (and the shorter is named)."""
    logged = {"a": [(0, 0.0), (100, 10.0), (200, 20.0)], "b": [(0, 2.0), (50, 3.0), (150, 5.0)]}
    runs = []
    for seed, points in logged.items():
        run = tmp_path / "pend_base" / seed
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 10, "return": r}) + "\n"
                                                   for s, r in points))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    with pytest.warns(UserWarning, match=r"pend_base/b to env steps 150, the others further \(to 200\)"):
        plot_runs(runs, tmp_path / "mean.png", metrics=["return"], mean=True)
    by_steps, by_time = figures[0].axes
    (line,) = by_steps.lines
    assert list(line.get_xdata()) == [0, 50, 100, 150, 200]  # 200: run a alone, run b stopped at 150
    assert list(line.get_ydata()) == pytest.approx([1.0, 4.0, 7.0, 10.0, 20.0])  # a: 0 5 10 15 20; b: 2 3 4 5
    (band,) = by_steps.collections
    top = band.get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(20.0)  # at 150: 15 and 5, mean 10, std 5; at 200: 20 alone, std 0
    assert line.get_label() == "pend_base (mean ± std of 2 runs)"
    assert len(by_time.lines) == 2 and not by_time.collections  # wall-clock: each run as it ran (a mean had been
    # drawn over the stretch every run covers: a sliver, where their episodes ended at other times)
    figures.clear()
    plot_runs(runs, tmp_path / "each.png", metrics=["return"])  # without mean: each seed its own line
    assert len(figures[0].axes[0].lines) == 2 and not figures[0].axes[0].collections


def test_mean_keeps_its_length_when_a_seed_has_just_started(tmp_path, monkeypatch):
    """A third seed that has logged one line: the mean of the folder had been cut to that line (one point);
    it spans the other seeds' steps, of all three up to the new seed's line and of the two past it."""
    runs = []
    for seed, count in (("a", 50), ("b", 50), ("c", 1)):
        run = tmp_path / "pend_base" / seed
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"env_steps": 1000 * (i + 1), "time": i, "return": 10.0 * i + (seed == "b")}) + "\n"
            for i in range(count)))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    with pytest.warns(UserWarning, match=r"pend_base/c to env steps 1000, the others further \(to 50000\)"):
        plot_runs(runs, tmp_path / "mean.png", metrics=["return"], mean=True)
    (line,) = figures[0].axes[0].lines
    assert list(line.get_xdata()) == [1000 * (i + 1) for i in range(50)]
    assert line.get_ydata()[0] == pytest.approx(1 / 3)  # a 0, b 1, c 0
    assert line.get_ydata()[-1] == pytest.approx(490.5)  # a 490, b 491: c is in no mean past its line


def test_mean_does_not_name_a_seed_that_logs_further_apart_as_stopping_short(tmp_path, monkeypatch, recwarn):
    """Seeds logging every 1,000 and every 1,500 steps of a 100,000-step budget end at 100,000 and 99,000: the
    second would not have logged again before 100,000, so it had been named as stopping short when it had not."""
    runs = []
    for seed, every, end in (("a", 1000, 100_000), ("b", 1500, 99_000)):
        run = tmp_path / "pend_base" / seed
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 1000, "return": s / 1000})
                                                   + "\n" for s in range(every, end + 1, every)))
        runs.append(run)
    monkeypatch.setattr(plt, "close", lambda figure: None)
    plot_runs(runs, tmp_path / "mean.png", metrics=["return"], mean=True)
    assert not [str(w.message) for w in recwarn if "further" in str(w.message)]
    (runs[1] / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 1000, "return": 1.0})
                                                   + "\n" for s in range(1500, 97_500 + 1, 1500)))
    with pytest.warns(UserWarning, match=r"pend_base/b to env steps 97500, the others further \(to 100000\)"):
        plot_runs(runs, tmp_path / "mean.png", metrics=["return"], mean=True)  # one line short: said


def test_a_run_that_logged_once_shows_its_point(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"updates": 500, "time": 6.2, "eval/return": 118.1}) + "\n")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs([tmp_path], tmp_path / "curves.png")
    assert [line.get_marker() for line in figures[0].axes[0].lines] == ["o"]  # a line of one point draws nothing


def test_seeds_that_logged_once_show_their_mean_as_a_point_and_out_may_be_a_folder(tmp_path, monkeypatch):
    runs = []
    for seed, value in (("a", 1.0), ("b", 3.0)):
        run = tmp_path / "pend_base" / seed
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(json.dumps({"env_steps": 4096, "time": 2.0, "return": value}) + "\n")
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    (tmp_path / "plots").mkdir()
    assert plot_runs(runs, tmp_path / "plots", mean=True) == tmp_path / "plots" / "curves.png"  # a folder: into it
    (line,) = figures[0].axes[0].lines
    assert line.get_marker() == "o" and list(line.get_ydata()) == [2.0]


def test_past_ten_series_the_lines_change_style_not_only_colour(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    runs = []
    for i in range(12):
        run = tmp_path / f"s{i}" / "t"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s, "return": i}) + "\n"
                                                   for s in (1, 2)))
        runs.append(run)
    plot_runs(runs, tmp_path / "many.png", metrics=["return"])
    styles = [(line.get_color(), line.get_linestyle()) for line in figures[0].axes[0].lines]
    assert len(set(styles)) == 12 and styles[0][0] == styles[10][0]


def test_a_runs_final_evaluation_is_drawn_at_its_end_and_rates_span_0_to_1(tmp_path, monkeypatch):
    """SAC's curve had ended at a training return of 96 with eval.json at 225: the evaluation was never drawn.
    A success rate of 0 to 4% had filled its panel as a full-height jump."""
    from robolearn.run_lock import RunLock

    lines = [{"env_steps": s, "time": s / 1e3, "return": s / 100, "success_rate": 0.04 * (s > 1000)} for s in (1000, 2000)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "config.yaml").write_text(json.dumps({"algo": "sac", "seed": 3, "env": {"task": "pendulum"}}))
    (tmp_path / "eval.json").write_text(json.dumps({"return_mean": 35.0, "return_std": 4.0}))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    lock = RunLock(tmp_path)  # as while it trains
    plot_runs([tmp_path], tmp_path / "curves.png")
    plot_runs([tmp_path], tmp_path / "curves.png", at_end=True)  # as the run's own end draws it, holding it
    lock.release()
    live, ended = figures
    final = [line for line in live.axes[0].lines if line.get_marker() == "D"]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in final] == [([2000], [35.0])]
    assert live.axes[2].get_ylim() == (-0.03, 1.03)  # success_rate's row
    assert live.texts[0].get_text() == f"{tmp_path}: sac on pendulum, seed 3 (training now)"
    assert ended.texts[0].get_text() == f"{tmp_path}: sac on pendulum, seed 3"
    labels = [text.get_text() for text in live.legends[0].get_texts()]
    assert "final evaluation (mean ± std of its episodes)" in labels


def test_an_evaluations_spread_is_a_band_around_it(tmp_path, monkeypatch):
    """An offline run logs eval/return and eval/return_std; only the mean had been drawn."""
    lines = [{"updates": u, "time": u / 1e3, "eval/return": r, "eval/return_std": 2.0} for u, r in ((1000, 5.0), (2000, 9.0))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs([tmp_path], tmp_path / "curves.png", metrics=["eval/return"])
    bands = figures[0].axes[0].collections
    assert len(bands) == 1
    low, high = bands[0].get_paths()[0].vertices[:, 1].min(), bands[0].get_paths()[0].vertices[:, 1].max()
    assert (low, high) == (3.0, 11.0)


def test_runs_of_several_algorithms_show_the_losses_most_of_them_log(tmp_path, monkeypatch):
    """The first three losses by name had been drawn: three PPO seeds beside a SAC run lost PPO's value_loss."""
    runs = []
    for name, losses in (("ppo_a", ("policy_loss", "value_loss")), ("ppo_b", ("policy_loss", "value_loss")),
                         ("sac", ("actor_loss", "alpha_loss", "critic_loss"))):
        run = tmp_path / name / "20260101-000000"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 1e3, "return": 1.0,
                                                               **{loss: 1.0 for loss in losses}}) + "\n" for s in (1, 2)))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs, tmp_path / "curves.png")
    rows = [ax.get_ylabel() for ax in figures[0].axes[::2]]
    assert rows == ["return", "policy_loss", "value_loss", "actor_loss"]


def test_a_metric_never_finite_is_no_empty_row_and_asked_for_is_said(tmp_path, monkeypatch):
    """A metric NaN in every line had been drawn as an empty row (its x axis ticked 0, 200m, 400m... of a step),
    and `--metrics` naming it gave that blank figure without a word."""
    lines = [{"env_steps": s, "time": s / 1e3, "return": float("nan"), "critic_loss": 1.0 / s} for s in (1000, 2000)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs([tmp_path], tmp_path / "curves.png")
    assert [ax.get_ylabel() for ax in figures[0].axes[::2]] == ["critic_loss"]
    with pytest.raises(ValueError, match=r"return is NaN or inf in every line"):
        plot_runs([tmp_path], tmp_path / "curves.png", metrics=["return"])


def test_runs_counted_in_updates_beside_runs_in_env_steps_say_which_in_the_legend(tmp_path, monkeypatch):
    """A BC run (x: updates) beside a PPO run (x: env steps) share one x axis labelled 'env steps / updates', but
    their legend entries were the bare names: which curve counted what was not said anywhere."""
    runs = []
    for name, counter in (("bc_pendulum", "updates"), ("ppo_pendulum", "env_steps")):
        run = tmp_path / name / "20260101-000000"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({counter: s, "time": s / 1e3, "eval/return": 1.0})
                                                   + "\n" for s in (1000, 2000)))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs, tmp_path / "curves.png")
    labels = [text.get_text() for text in figures[0].legends[0].get_texts()]
    assert labels == ["bc_pendulum (updates)", "ppo_pendulum (env steps)"], labels
    plot_runs(runs[1:], tmp_path / "one.png")  # one counter: the names alone, as before
    assert [line.get_label() for line in figures[1].axes[0].lines] == ["ppo_pendulum"]


def test_the_final_evaluations_legend_entry_is_no_one_runs_colour(tmp_path, monkeypatch):
    """With several runs, the legend's 'final evaluation' marker took the first run's colour: it read as that run's
    alone, while every run's diamond is drawn in its own colour."""
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name / "20260101-000000"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"env_steps": s, "time": s / 1e3, "return": 1.0}) + "\n"
                                                   for s in (1000, 2000)))
        (run / "eval.json").write_text(json.dumps({"return_mean": 2.0, "return_std": 0.5}))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs, tmp_path / "curves.png")
    legend = figures[0].legends[0]
    labels = [text.get_text() for text in legend.get_texts()]
    handle = legend.legend_handles[labels.index("final evaluation (mean ± std of its episodes)")]
    from matplotlib.colors import to_hex

    colours = {to_hex(line.get_color()) for line in figures[0].axes[0].lines if line.get_marker() != "D"}
    assert to_hex(handle.get_color()) not in colours, (to_hex(handle.get_color()), colours)


def test_a_legend_of_long_labels_stays_inside_the_figure(tmp_path, monkeypatch):
    """Two skill runs' folders, each in two phases, had three columns of labels such as
    'skill_critic_point_maze_medium (mean ± std of 2 runs): pretrain (pretrain updates)', wider than the figure:
    the legend was cut at both edges. Fewer columns, more rows: every label inside."""
    runs = []
    for folder in ("skill_critic_point_maze_medium", "spirl_point_maze_medium_long_name"):
        for seed in (0, 1):
            run = tmp_path / folder / f"2026010{seed}-000000"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(json.dumps({"seed": seed, "env": {"task": "point_maze_medium"}}))
            lines = [{"phase": "pretrain", "env_steps": 0, "pretrain_updates": u, "time": u / 100,
                      "pretrain/loss": 1 / u} for u in (100, 200)]
            lines += [{"env_steps": s, "time": 2 + s / 100, "return": s / 10 + seed} for s in (100, 200)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
            runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs, tmp_path / "curves.png", metrics=["return", "pretrain/loss"], mean=True)
    figure = figures[0]
    renderer = figure.canvas.get_renderer()
    box, legend = figure.bbox, figure.legends[0].get_window_extent(renderer)
    assert len(figure.legends[0].get_texts()) == 4
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and legend.y1 <= box.y1, (box, legend)
    plot_area_top = max(ax.get_position().y1 for ax in figure.axes) * box.height
    assert legend.y0 >= plot_area_top - 1  # above the plots, not over them


@pytest.mark.parametrize("labels", [
    [f"runs/ppo_go1_rough/2026010{i}-000000 (seed {i})" for i in range(3)],  # digits: wider than letters
    [f"PPO_GO1_ROUGH_RANDOMIZED_{i} (SEED {i})" for i in range(3)],  # capitals, wider still
    ["skill_critic_point_maze_medium_with_a_long_setting_name (mean ± std of 5 runs): pretrain (pretrain updates) "
     "under agent.pretrain_updates=100000 and runner.utd_ratio=0.25", "b"],  # one column too wide: a smaller font
    ["", " ", "a"],  # no glyphs (a folder named with spaces): measured as nothing, not matplotlib's AttributeError
], ids=["digits", "capitals", "one-too-wide", "blank"])
def test_the_header_fits_legends_of_any_label(labels):
    """The columns were chosen from a width per character measured on lowercase labels: run paths (digits) and
    capitals ran past both edges of the 10-inch figure, and a label wider than the figure could not fit at all."""
    from matplotlib.lines import Line2D

    from robolearn.curves import _add_header

    figure = plt.figure(figsize=(10, 5))
    _add_header(figure, "", {label: Line2D([], []) for label in labels})
    figure.canvas.draw()
    box = figure.bbox
    legend = figure.legends[0].get_window_extent(figure.canvas.get_renderer())
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1, (labels, box, legend)


def test_a_fine_tune_seed_still_pretraining_is_averaged_with_the_others_offline_phase(tmp_path, monkeypatch):
    """A fine-tune with offline lines only (still pretraining, or run with runner.total_steps=0) was drawn unnamed
    ('wsrl (mean ± std of 2 runs) (updates)'), apart from its seeds' offline phase: two offline curves, one phase
    unsaid and neither the mean of both seeds."""
    runs = []
    for seed, online in ((0, True), (1, False)):
        run = tmp_path / "wsrl" / f"2026010{seed}-000000"
        run.mkdir(parents=True)
        lines = [{"phase": "offline", "updates": u, "time": u / 1e3, "eval/return": seed + u / 1e3} for u in (1e3, 2e3)]
        lines += [{"phase": "online", "env_steps": 1000, "time": 4.0, "eval/return": 5.0}] if online else []
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        runs.append(run)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_runs(runs, tmp_path / "curves.png", metrics=["eval/return"], mean=True)
    curves = {line.get_label(): list(line.get_ydata()) for line in figures[0].axes[0].lines}
    assert curves["wsrl (mean ± std of 2 runs): offline (updates)"] == [1.5, 2.5]  # both seeds' pretraining
    assert curves["wsrl (mean ± std of 2 runs): online (env steps)"] == [5.0]
    assert len(curves) == 2, list(curves)
