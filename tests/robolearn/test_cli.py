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
