"""Command-line parsing that users trip over."""

import pytest

from robolearn.cli import main


def test_overrides_may_follow_options(capsys):
    # Fails at config validation, i.e. after argparse accepted the word order.
    assert main(["train", "ppo_cartpole", "--no-wandb", "runner.total_step=5"]) == 2
    assert "unknown key 'runner.total_step'" in capsys.readouterr().err


def test_stray_words_are_still_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "runs/x", "oops=1"])
    assert "unrecognized arguments: oops=1" in capsys.readouterr().err


def test_bench_lists_the_benchmarks_and_runs_one_with_its_own_flags(capfd):
    assert main(["bench"]) == 0
    listed = capfd.readouterr().out
    assert "ppo_vs_rsl_rl            End-to-end PPO throughput" in listed and "gpu  " in listed
    assert "common" not in listed  # a helper module, not a benchmark
    assert main(["bench", "nope"]) == 2
    assert "no benchmark 'nope'; there are: dataset_read_heap" in capfd.readouterr().err
    assert main(["bench", "make_maze_datasets", "--help"]) == 0  # the flag is the script's, not ours
    assert "--layouts" in capfd.readouterr().out
