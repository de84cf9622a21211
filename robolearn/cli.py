"""``robolearn train | eval | play | plot | export | deploy | replay | emulate | list | dataset | bench``: the command line.

Every failure a user can cause (a bad config key, a missing or foreign
checkpoint, NaN during training) ends with one line saying what to fix.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import errno
import itertools
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from robolearn import distributed, strict_json
from robolearn.checkpoint import CheckpointError
from robolearn.config import (CONFIG_DIR, SECTIONS, ConfigError, TrainConfig, check_starts, flat_keys, load_config,
                              read_yaml, refuse_algo_change, resolve_config_path, run_above, run_config_path, to_dict)
from robolearn.data.cli import add_dataset_parser, dataset_command, seed_argument
from robolearn.evaluate import NonFiniteError
from robolearn.interfaces import ContractError, SimulationFailed
from robolearn.listing import counted, few
from robolearn.runtime import SlowLoopWarning, stops_as_ctrl_c, to_devnull
from robolearn.shell import shell

BENCH_DIR = CONFIG_DIR.parent / "benchmarks"
USER_ERRORS = (ConfigError, CheckpointError, NonFiniteError, FileNotFoundError, FileExistsError, ValueError,
               ContractError, distributed.PeersLost, SimulationFailed)
_DEFAULT_FORMAT = warnings.formatwarning  # Python's, for the warnings _format_warning passes on
RANK_ERROR_WAIT_S = 5.0
"""How long a rank other than 0 that refused the config waits for rank 0 to say it (and torchrun to stop this one)."""
# Storage a command could not write to, said in one line with what to do, not as a traceback
_ELSEWHERE = "run_dir=... for runs, --root for datasets, --out for exports and plots"
_STORAGE_ERRORS = {errno.ENOSPC: f"free some space (or write elsewhere: {_ELSEWHERE})",
                   errno.EDQUOT: f"your disk quota is used up: free some space (or write elsewhere: {_ELSEWHERE})",
                   errno.EROFS: f"the file system is read-only: write elsewhere ({_ELSEWHERE}; a resume writes into "
                                f"its run: copy the run somewhere writable and resume the copy)",
                   errno.EFBIG: "the file is larger than this process may write (a file size limit: `ulimit -f`, a "
                                f"job scheduler's, or the file system's largest file): raise it (or write elsewhere: "
                                f"{_ELSEWHERE})",
                   errno.EACCES: "permission denied: use another path or fix its permissions",
                   errno.EPERM: "permission denied: use another path or fix its permissions",
                   errno.ENOTDIR: "a file stands where a folder goes (runs, run_dir=, name=): move it, or write "
                                  f"elsewhere ({_ELSEWHERE})",
                   errno.EISDIR: "a folder stands where a file goes: move it, or write elsewhere"}


def _user_errors() -> tuple[type[BaseException], ...]:
    """USER_ERRORS plus the hardware's typed errors, which only exist once hardware is imported."""
    extra: tuple[type[BaseException], ...] = ()
    if "hardware.safety" in sys.modules:
        extra += (sys.modules["hardware.safety"].RobotError,)
    if "hardware.dynamixel.errors" in sys.modules:
        extra += (sys.modules["hardware.dynamixel.errors"].DynamixelError,)
    return USER_ERRORS + extra


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` (``--episodes``, ``-h``...): argparse has no public list of them."""
    return [option for action in parser._actions for option in action.option_strings]


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "the following arguments are required" also says the misspelled option that was
    likely meant (``--epsiodes``: ``--episodes``): argparse says a missing required option before the words no
    option took reach :func:`refuse_unknown_words`. Its subcommands' parsers are of this class too."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            known = _options(self)
            for flag in (word.split("=", 1)[0] for word in getattr(self, "_words", []) if word.startswith("--")):
                if flag not in known and (close := difflib.get_close_matches(flag, known, n=1, cutoff=0.7)):
                    message += f"; {flag}: did you mean {close[0]}?"
        if self._asks_json():  # (eval RUN --episodes abc --json)
            _json_error(argparse.Namespace(json=True), f"{self.prog}: {message}")  # as every later error is
        super().error(message)

    def _asks_json(self) -> bool:
        """Whether the words ask this parser for ``--json``, or a shortening argparse takes as it (``--js``)."""
        options = _options(self)
        return "--json" in options and any(  # (the whole word first: a later --json-lines would not hide it)
            word == "--json" or word.startswith("--") and len(word) > 2
            and [o for o in options if o.startswith(word)] == ["--json"]
            for word in getattr(self, "_words", []) if "--json".startswith(word))


def build_parser() -> argparse.ArgumentParser:
    """The command line's commands and their options (the dataset commands: robolearn/data/cli.py)."""
    parser = _Parser(prog="robolearn", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("train", help="train an agent; with no config, PPO on cartpole swing-up")
    p.add_argument("config", nargs="?", help="configs/<name>.yaml, its name, or a path")
    p.add_argument("overrides", nargs="*", help="key=value, e.g. runner.total_steps=200000 agent.learning_rate=3e-4 "
                                                "seed=1 name=lr_3e-4 (the run's folder) logging.group=lr_3e-4 (W&B's)")
    p.add_argument("--resume", type=Path, help="a run directory to continue from its latest checkpoint")
    p.add_argument("--fresh-replay", action="store_true",
                   help="with --resume, for a run whose checkpoints/replay.pt is lost or damaged: go on with an empty "
                        "replay buffer, refilled by the agent's own actions (runner.random_steps env steps) before "
                        "updates go on")
    p.add_argument("--seed", help=argparse.SUPPRESS)  # said to be seed=N, as every setting
    p.add_argument("--no-wandb", action="store_true", help="do not write Weights & Biases files")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="data-parallel over N processes on this machine (relaunches under torchrun; "
                        "env.num_envs is per process; one GPU each on CUDA); default 1, or with --resume "
                        "as many as the run was trained on")

    p = commands.add_parser("eval", help="evaluate a run's controller")
    p.add_argument("run", type=Path, help="a run directory (runs/<config>/<time>)")
    p.add_argument("--episodes", type=int, help="default: as many as the run's own evaluation (runner.eval_episodes; "
                                                "10 where it had none)")
    p.add_argument("--seed", type=seed_argument, help="default: the run's own evaluation seed (its seed + 10000), which "
                                            "with the default --episodes gives eval.json's numbers again; --fas: 12345")
    p.add_argument("--exported", choices=["torchscript", "onnx"], help="evaluate the exported file instead of the checkpoint")
    p.add_argument("--json", action="store_true", help="end with one JSON line for scripts")
    p.add_argument("--fas", nargs="?", const=True, default=None, metavar="R_MAX",
                   help="R(L) at action-sequence lengths 1, 2, 4, 6, ..., 30 and the Frequency-Averaged Score "
                        "(robolearn/fas.py); writes <run>/fas.png and fas.json. R_MAX: the reference return "
                        "for tasks without one, plus --fas-shift where given (Pendulum-v1: 1350 = -200 + 1550)")
    p.add_argument("--fas-shift", type=float, metavar="SHIFT",
                   help="added to every R(L) before the FAS (tasks with negative returns; Pendulum-v1's is 1550)")
    p.add_argument("--nominal", action="store_true", help="without the run's domain randomization (its delays kept)")

    p = commands.add_parser("play", help="film a run's controller")
    p.add_argument("run", type=Path, help="a run directory (runs/<config>/<time>)")
    p.add_argument("--video", type=Path, required=True, help="output .mp4 (or .gif, .mkv, .mov, .avi)")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the film, in seconds (default 10)")
    p.add_argument("--seed", type=seed_argument, default=0, help="the episodes' random stream (default 0)")
    p.add_argument("--nominal", action="store_true", help="without the run's domain randomization (its delays kept)")

    p = commands.add_parser("plot", help="draw runs' learning curves into a PNG (a run in training, or several to compare)")
    p.add_argument("runs", type=Path, nargs="+", help="run directories, or folders of them (runs/ppo_cartpole); "
                   "or one recording (<run>/deploy/<time>): its joints' commands and motion, per episode")
    p.add_argument("--metrics", nargs="+", help="metrics.jsonl keys, one row each (default: return, eval/return "
                   "and success_rate, where logged, then up to three losses)")
    p.add_argument("--out", type=Path, help="the PNG (default: <run>/curves.png for one run's own curves, curves.png here for several "
                   "or with --metrics or --mean, <recording>/recording.png for a recording)")
    p.add_argument("--mean", action="store_true", help="draw the runs of each folder (the seeds of a setting) as "
                   "their mean and a ±1 std band; at each step, of the runs that reached it (a seed just started counts up to "
                   "its last line, and is named)")

    p = commands.add_parser("export", help="export a run's controller")
    p.add_argument("run", type=Path, help="a run directory (runs/<config>/<time>)")
    p.add_argument("--format", choices=["onnx", "torchscript"], action="append",
                   help="repeatable; default both. A file of a format not asked for is removed from the folder (it "
                        "would be of an older controller than the new controller.json): deploy plays onnx where "
                        "there is one, else torchscript")
    p.add_argument("--out", type=Path, help="a directory for controller.pt/.onnx/.json; default: <run>/export")
    p.add_argument("--overwrite", action="store_true", help="replace another run's export in --out")

    p = commands.add_parser("deploy", help="run a run's exported controller on a robot, recorded, stopping safely")
    p.add_argument("run", type=Path, help="a run directory, with its export/ (robolearn export RUN writes it)")
    p.add_argument("--robot", required=True, help="robot config: a YAML path or a name in configs/robots/")
    p.add_argument("--port", help="serial port; default: the robot config's (`robolearn emulate` prints one)")
    p.add_argument("--episodes", type=int, default=1, help="episodes to run (default 1)")
    p.add_argument("--format", choices=["torchscript", "onnx"],
                   help="which exported file drives the robot (default: controller.onnx, which loads without "
                        "running code; controller.pt where the run exported TorchScript alone)")
    p.add_argument("--target", type=float, nargs=3, metavar=("X", "Y", "Z"), help="fixed target (m); default: sampled")
    p.add_argument("--no-record", action="store_true", help="do not record the deployment")
    p.add_argument("--seed", type=seed_argument, default=0,
                   help="the targets' random stream (the same seed, the same targets; default 0)")
    p.add_argument("--retries", type=int, default=3, metavar="N",
                   help="how often the bus asks again after no reply or a garbled one before a read fails, which the "
                        "watchdog then judges (default 3; 0: every lost reply a failed read)")
    p.add_argument("--safety", action="append", default=[], metavar="KEY=VALUE",
                   help="a safety setting for this run (repeatable), e.g. max_velocity=5.5 or safe_pose=[0,1.2,-2.2,0]; "
                        "default: the robot config's safety:")
    p.add_argument("--json", action="store_true", help="end with one JSON line for scripts")

    p = commands.add_parser("replay", help="replay a recorded episode on a robot (slow ramp to its first pose)")
    p.add_argument("episode", type=Path, help="an episode_*.npz from a deployment recording")
    p.add_argument("--robot", required=True, help="robot config: a YAML path or a name in configs/robots/")
    p.add_argument("--port", help="serial port; default: the robot config's")
    p.add_argument("--safety", action="append", default=[], metavar="KEY=VALUE",
                   help="a safety setting for this replay (repeatable), as for deploy; default: the robot config's")
    p.add_argument("--json", action="store_true", help="end with one JSON line for scripts")

    p = commands.add_parser("emulate", help="serve an emulated robot on a pseudo-terminal (no hardware needed)")
    p.add_argument("kind", choices=["dynamixel"])
    p.add_argument("--robot", default="dxl_arm", help="robot config: a YAML path or a name in configs/robots/")
    p.add_argument("--lockstep", action="store_true", help="advance physics per goal write, not wall clock")
    p.add_argument("--step-dt", type=float, metavar="SECONDS",
                   help="with --lockstep: physics per goal write; default: the robot config's control_dt, else 0.02")
    for name in ("mass-scale", "damping-scale", "friction-scale", "gain-scale"):
        p.add_argument(f"--{name}", type=float, default=1.0,
                       help="reality differs from the MJCF by this factor (default 1)")
    p.add_argument("--latency", type=float, default=0.0,
                   help="actuation latency of the emulated servos, in seconds (default 0)")
    p.add_argument("--fault", action="append", default=[], metavar="NAME=VALUE",
                   help="a bus fault to rehearse against (repeatable): drop_reply=P, corrupt_crc=P (probabilities "
                        "0-1), drop_next=N, corrupt_next=N (status packets), reply_latency=S, silent_after=S (no "
                        "replies from S seconds after the first packet), seed=N")

    add_dataset_parser(commands)

    p = commands.add_parser("list", help="list configs, tasks, algorithms and runs")
    p.add_argument("--runs", type=Path, default=Path("runs"),
                   help="where to look for runs, at any depth (default runs/; e.g. runs/ppo_cartpole); runs of one "
                        "folder (seeds of one setting: name=...) are summarized as mean ± std")

    p = commands.add_parser("bench", help="list the benchmarks against peers (benchmarks/), or run one")
    p.add_argument("name", nargs="?", help="a benchmark's name (robolearn bench lists them)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="for the benchmark: robolearn bench NAME --help")
    return parser


def refuse_unknown_words(parser: argparse.ArgumentParser, args: argparse.Namespace, stray: list[str]) -> NoReturn:
    """Words no option took, said by the command's own parser (its usage, not the top level's list of commands),
    with what each misspelled or misplaced option likely was: the command's nearest option, another command's
    option (`deploy --lockstep` is `emulate`'s), or for `train`, a setting given as a flag."""
    from policies import AGENTS  # every algorithm's settings (TrainConfig's own agent section is PPO's)

    def subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})

    command = subparsers(parser)[args.command]
    siblings = {name: p for name, p in subparsers(parser).items() if name != args.command}
    if args.command == "dataset":  # its subcommands' options are the nearer others
        siblings |= {f"dataset {name}": p for name, p in subparsers(command).items() if name != args.dataset_command}
        command = subparsers(command)[args.dataset_command]
    known = _options(command)
    others: dict[str, list[str]] = {}  # option -> every other command that takes it (--json: five of them)
    for name, p in siblings.items():
        for option in _options(p):
            if option not in known:
                others.setdefault(option, []).append(f"`robolearn {name}`")
    settings = {key.rsplit(".", 1)[-1]: key for key in flat_keys(to_dict(TrainConfig()))}
    settings |= {f.name: f"agent.{f.name}" for config_cls, _ in AGENTS.values() for f in dataclasses.fields(config_cls)
                 if f.name not in settings}
    hints = []
    for flag in (word.split("=", 1)[0] for word in stray if word.startswith("--")):
        if close := difflib.get_close_matches(flag, known, n=1, cutoff=0.7):
            hints.append(f"{flag}: did you mean {close[0]}?")
        elif args.command == "train" and (key := settings.get(flag[2:].replace("-", "_"))):
            hints.append(f"{flag}: settings are key=value words here, as {key}=...")
        elif flag in others:
            hints.append(f"{flag} is an option of {few(others[flag], 4)}, not of {command.prog.split(' ', 1)[1]}")
    command.error(f"unrecognized arguments: {' '.join(stray)}" + "".join(f"; {hint}" for hint in hints))


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (2: a user error said in one line; 130: interrupted)."""
    parser = build_parser()
    # Overrides may follow options (`train cfg --no-wandb k=v`), which plain
    # argparse rejects; collect the stray key=value words for `train`.
    args, extra = parser.parse_known_args(argv)
    stray = [word for word in extra if word.startswith("-") or "=" not in word or args.command != "train"]
    if stray:
        refuse_unknown_words(parser, args, stray)
    if extra:
        args.overrides.extend(extra)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    warnings.formatwarning = _format_warning
    # `train` takes SIGTERM and SIGHUP itself (the runner's checkpoint), and `deploy` and `replay` (the robot's safe
    # stop); the other commands take them as Ctrl+C: `dataset record` keeps its complete episodes, an import leaves
    # nothing, a film, an export or a plot cut short leaves no temp file (a kill had left them), status 130
    stops = contextlib.nullcontext() if args.command in ("train", "deploy", "replay") else stops_as_ctrl_c()
    try:
        with stops:
            return COMMANDS[args.command](args)
    except _user_errors() as err:
        if not distributed.is_main() and isinstance(err, ConfigError):  # a config is refused alike on every rank:
            # rank 0 says it, and torchrun then stops this rank. A later rank that got there first had left at once,
            # and torchrun stopped rank 0 before it said it: the run ended on torchrun's 'local_rank: 1' alone
            time.sleep(RANK_ERROR_WAIT_S)  # (1 in 4 `--nproc 2` refusals here); still here: rank 0 has not said it
        print(f"error: {err}", file=sys.stderr)
        _json_error(args, str(err))
        return 2
    except KeyboardInterrupt as err:
        if distributed.is_main() and not getattr(err, "said", False):  # once over the ranks, and not after a
            said = f": {err}" if "; " in str(err) else ""  # message that said what the interrupt left (a run's end's);
            print(f"interrupted{said}", file=sys.stderr)  # what a stop added to it (a torque-off not confirmed) is said
        _json_error(args, "interrupted")
        return 130
    except BrokenPipeError:  # `robolearn ... | head` closed the pipe: stop quietly, as Unix tools do
        to_devnull(sys.stdout.fileno())  # the exit's flush then has nowhere to fail
        return 141
    except OSError as err:
        if err.errno not in _STORAGE_ERRORS:  # anything else is ours to fix: Python's traceback
            raise
        print(f"error: {err.strerror}: {err.filename or 'a file being written'}; {_STORAGE_ERRORS[err.errno]}. "
              "Files are written aside and renamed, so what was saved before (checkpoints, datasets) is intact",
              file=sys.stderr)
        _json_error(args, f"{err.strerror}: {err.filename or 'a file being written'}")
        return 2
    except Exception as err:  # noqa: BLE001 (only a Ctrl+C's, said as one; anything else is raised)
        if not _from_ctrl_c(err):
            raise
        if distributed.is_main():  # once over the ranks, as a plain Ctrl+C's
            print("interrupted", file=sys.stderr)
        _json_error(args, "interrupted")
        return 130
    finally:
        warnings.formatwarning = _DEFAULT_FORMAT


def _from_ctrl_c(err: BaseException) -> bool:
    """Whether ``err`` was raised because a Ctrl+C landed inside something that wraps it: Python 3.11 makes one
    that lands while a class is defined (torch imports torch._dynamo as a run starts) a RuntimeError ('Error
    calling __set_name__'), which had ended a Ctrl+C at start-up in a traceback."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _json_error(args: argparse.Namespace, said: str) -> None:
    """With ``--json``, an error is that one JSON line too (on stdout, where a script reads the result), so a
    script that parses it sees why, not nothing."""
    if getattr(args, "json", False):
        try:
            print(strict_json.dumps({"error": said}), flush=True)
        except BrokenPipeError:  # `... --json | head` closed it: quietly, as main's own BrokenPipeError
            to_devnull(sys.stdout.fileno())


def _normalized_score(run: Path, dataset: str, episode_return: float) -> float | None:
    """``episode_return`` scored for ``run``, trained on ``dataset``: on the reference returns its end kept
    (``eval.json``, or the one a resume set aside), else on the dataset's own (:meth:`Dataset.score`); None
    without a dataset, or where it is gone. A dataset since replaced under its name had rescored the run."""
    from robolearn.data.dataset import normalized_score

    if not dataset:
        return None
    for kept in ("eval.json", "eval.superseded.json"):
        try:
            return normalized_score(episode_return, json.loads((run / kept).read_text()))
        except (OSError, ValueError, KeyError, TypeError):  # none kept (a run of before, or not ended yet)
            continue
    from robolearn.data import Dataset, DatasetError

    try:
        return Dataset.load(dataset).score(episode_return)
    except DatasetError:
        return None


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    line: str | None = None) -> str:
    """A user warning as the command line prints it: one line, like its errors, not Python's file, line
    number and source line; other categories (deprecations...) keep Python's format."""
    if category is UserWarning or issubclass(category, SlowLoopWarning):  # (a deploy's slow loop: the user's to act
        return f"warning: {message}\n"  # on, not Python's file, line and source line of ours)
    return _DEFAULT_FORMAT(message, category, filename, lineno, line)


def _positive(flag: str, value: float) -> None:
    """Refuse a count or duration that is zero, negative or not finite, naming the flag."""
    if not math.isfinite(value):  # (`play --seconds inf` had ended in an OverflowError's traceback)
        raise ValueError(f"{flag} must be a positive, finite number, got {value:g}")
    if not value > 0:
        raise ValueError(f"{flag} must be positive, got {value:g}")


def _outcome(e: dict) -> str:
    """``return m ± s``, the success rate where the task reports one, and the normalized score (x 100, as
    D4RL's tables) where the dataset has references."""
    text = f"return {e['return_mean']:.1f} ± {e['return_std']:.1f}"
    text += f", success {100 * e['success_rate']:.0f}%" if e.get("success_rate") is not None else ""
    return text + (f", normalized score {100 * e['normalized_score']:.1f}" if e.get("normalized_score") is not None else "")


def _torchrun(nproc: int, argv: list[str]) -> int:
    """``robolearn train ... --nproc N``: the same command, without ``--nproc``, on N ranks of
    ``torchrun --standalone`` (the same as ``torchrun --nproc_per_node N -m robolearn train ...``)."""
    import logging

    # torchrun's warnings on a Ctrl+C ("Received 2 death signal", "Sending process N closing signal") repeat what
    # rank 0 says; its errors (a failed rank's 'local_rank: N') stay. Its loggers take LOGLEVEL when made.
    os.environ.setdefault("LOGLEVEL", "ERROR")
    for name in [name for name in logging.root.manager.loggerDict if name.startswith("torch.distributed")]:
        logging.getLogger(name).setLevel(os.environ["LOGLEVEL"])
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    from robolearn.distributed import LAUNCHER_PID, launcher_said

    argv = list(argv)
    for i, word in enumerate(argv):  # --nproc, or argparse's abbreviation of it (--np 2, as mpirun's -np), which
        name, eq, _ = word.partition("=")  # had reached torchrun's own parser ('ambiguous option') or every rank
        if len(name) > 3 and "--nproc".startswith(name):
            del argv[i:i + (1 if eq else 2)]
            break
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, without its banner about it
    # A Ctrl+C or kill stops the ranks at the end of their iteration, which can take minutes: torchrun's own
    # 30 s before it SIGKILLs them had lost every step since the last checkpoint. A second Ctrl+C stops at once.
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "600")
    from torch.distributed.launcher.api import LaunchConfig

    if "shutdown_timeout" not in getattr(LaunchConfig, "__dataclass_fields__", {}):  # (a torch before 2026's)
        print("note: this torch's torchrun stops the ranks 30 s after a Ctrl+C or kill, whatever they are doing: an "
              "iteration longer than that loses its steps since the last checkpoint (a newer torch waits 10 minutes "
              "here)", file=sys.stderr)
    # torchrun's folder for its ranks' error files, made in /tmp and never removed (one per run): ours, removed after,
    # named and locked as a dataset writer's temp folder, so what a launcher killed outright (kill -9) left goes with
    # the next launch (another one's, running, stays)
    from robolearn.data.minari_store import remove_leftovers, temp_beside

    remove_leftovers(Path(tempfile.gettempdir()), legacy=False)
    logs, lock = temp_beside(Path(tempfile.gettempdir()) / "robolearn-torchrun")
    before = os.environ.get(LAUNCHER_PID)
    os.environ[LAUNCHER_PID] = launcher_said(os.getpid(), logs)  # the ranks' parent: a rank with another has lost it
    try:
        torchrun(["--standalone", f"--nproc_per_node={nproc}", f"--log-dir={logs}", "-m", "robolearn", *argv])
    except ChildFailedError as err:  # the failing rank printed its error; exit with its code (ranks killed after it: < 0)
        return max(1, *(failure.exitcode for failure in err.failures.values()))
    except SignalException:  # Ctrl+C: the ranks saved their checkpoint and printed how to resume
        return 130
    finally:
        shutil.rmtree(logs, ignore_errors=True)
        if lock is not None:
            os.close(lock)
        if before is None:  # (a Python caller's later torchrun lines are not this launcher's)
            os.environ.pop(LAUNCHER_PID, None)
        else:
            os.environ[LAUNCHER_PID] = before
    return 0


def _names_config(word: str) -> bool:
    """Whether ``word`` is a config's YAML path or name in configs/."""
    try:
        resolve_config_path(word)
    except ConfigError:
        return False
    return True


def _train(args: argparse.Namespace) -> int:
    from policies import agent_entry
    from robolearn.preflight import check_data_parallel, check_fresh_replay, check_minibatches
    from robolearn.runner import train
    from robolearn.runs import refuse_task_change, refuse_wandb_move, take_checkpoints_settings

    if args.seed is not None:
        raise ConfigError(f"--seed: settings are overrides here, as key=value: seed={args.seed}")
    if os.environ.get("LOCAL_RANK", "0") != "0":  # under torchrun: one rank per machine says what each would say
        warnings.filterwarnings("ignore", category=UserWarning)
    config = args.config
    if config and "=" in config:  # `train key=value ...`: the default config with overrides
        args.overrides.insert(0, config)
        config = None
        if named := next((word for word in args.overrides if "=" not in word and _names_config(word)), None):
            # `train key=value NAME` (another word, '64]' of an unquoted `a=[64, 64]`, is said as an override)
            settings = [word for word in args.overrides if word != named]
            raise ConfigError(f"'{named}' follows key=value settings: a config goes first, as in "
                              f"{shell('robolearn', 'train', named, *settings)}")
    if (config and config.split(".")[0] in SECTIONS and "." in config and not config.endswith((".yaml", ".yml"))
            and not _names_config(config)):
        # `train runner.total_steps` (`=value` forgotten) had been 'no config ...', or with --resume 'give a config
        # or --resume, not both'
        raise ConfigError(f"'{config}': a setting without a value; give it as key=value (e.g. {config}=...)")
    if args.resume and config:
        raise ConfigError(f"give a config or --resume, not both: --resume {args.resume} continues with the run's own "
                          f"config ({args.resume / 'config.yaml'}); drop '{config}' (key=value overrides still apply)")
    if args.resume:  # `train --resume RUN [key=value ...]`: the run's own config, overrides applied
        config = run_config_path(args.resume)
        refuse_algo_change(args.resume, args.overrides)
    asked = [word for word in args.overrides if word.startswith("logging.wandb=") and word != "logging.wandb=disabled"]
    if args.no_wandb and asked:  # (the flag had silently won)
        raise ConfigError(f"--no-wandb and {asked[-1]}: give one of them")
    cfg = load_config(config, args.overrides)
    if args.no_wandb:
        cfg.logging.wandb = "disabled"
    if args.nproc is not None and "WORLD_SIZE" in os.environ:  # (it had been ignored for WORLD_SIZE's ranks)
        raise ConfigError(f"--nproc {args.nproc} with WORLD_SIZE={os.environ['WORLD_SIZE']} set: under torchrun its "
                          "--nproc_per_node sets the ranks (drop --nproc); elsewhere WORLD_SIZE is left from another "
                          "launch: unset it")
    if args.nproc is None:
        args.nproc = _trained_ranks(args.resume, cfg) if args.resume and "WORLD_SIZE" not in os.environ else 1
        if args.nproc > 1:
            print(f"resuming on {args.nproc} ranks, as {args.resume} was trained (--nproc N to change)")
    if args.nproc < 1:
        raise ValueError(f"--nproc must be at least 1, got {args.nproc}")
    if args.resume:  # (said by the ranks' rank 0 where the launcher starts them)
        cfg = take_checkpoints_settings(args.resume, cfg, warn=args.nproc == 1 or "WORLD_SIZE" in os.environ)
    check_data_parallel(cfg, args.nproc, f"--nproc {args.nproc}")
    if not args.resume:  # (the runner's own check, said before any rank starts)
        check_starts(cfg)
    if args.fresh_replay:
        check_fresh_replay(cfg, args.resume)
    if args.resume and "WORLD_SIZE" not in os.environ:  # (under torchrun every rank's runner refuses it)
        _refuse_finished_first(args.resume, cfg, args.nproc)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:  # the config is valid: start the ranks
        import sims

        sims.check_task(cfg.env.task, cfg.env.kwargs)  # here, once, not by every rank
        if cfg.env.task.startswith((sims.GYM_PREFIX, sims.MJLAB_PREFIX)):  # (ours: _check_ranks_fit resolves them)
            # a missing GPU, as its make_env refuses it: the ranks had failed in torch.cuda.set_device first
            sims.resolve_backend("mujoco", cfg.env.device)
        if cfg.env.task.startswith(sims.GYM_PREFIX):  # Gymnasium checks its env.kwargs as it makes one: one here
            sims.make_env(cfg.env.task, num_envs=1, **cfg.env.kwargs).close()  # (every rank had said a wrong one)
        if args.resume:  # (the ranks' runners refuse them too, but only once torchrun has started them)
            refuse_task_change(args.resume, cfg)
            refuse_wandb_move(args.resume, cfg)
        # each rank's env.num_envs (an algorithm of one's own that sets on_policy only when built: its ranks ask)
        check_minibatches(cfg, getattr(agent_entry(cfg.algo)[1], "on_policy", None) is True, cfg.env.num_envs)
        return _torchrun(args.nproc, args.argv + _check_ranks_fit(args.nproc, cfg))
    result = train(cfg, resume=args.resume, fresh_replay=args.fresh_replay)
    if result.interrupted:
        return 130
    if not distributed.is_main():  # rank 0 reports the run
        return 0
    print(f"run:         {result.run_dir}")
    if result.evaluation:
        e = result.evaluation
        print(f"evaluation:  {_outcome(e)} over {counted(e['episodes'], 'episode')}")
    if result.video:
        print(f"video:       {result.video}")
    if result.curves:
        print(f"curves:      {result.curves}")
    for fmt in ("torchscript", "onnx"):
        if fmt in result.exported:
            print(f"{fmt + ':':<13}{result.exported[fmt]}")
    return 0


def _check_ranks_fit(nproc: int, cfg: TrainConfig) -> list[str]:
    """``--nproc`` ranks on this machine: on CUDA one GPU each, so more ranks than GPUs is refused before
    torchrun starts them; on CPU more ranks than cores run, but share cores, which the user is told.
    Returns the overrides that give the ranks the backend and device resolved here (``warp`` on a missing
    GPU: MuJoCo on the CPU), so that the fallback is said once, here, and not again by rank 0. What the ranks
    resolve alike (``warp`` on Warp's CPU device) rank 0 says, and not this process too (it had been said twice)."""
    import copy

    import torch

    from robolearn.registry import resolve_backend

    resolved = copy.deepcopy(cfg.env)
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        resolve_backend(resolved)
    fallback = ([f"env.backend={resolved.backend}", f"env.device={resolved.device}"]
                if (resolved.backend, resolved.device) != (cfg.env.backend, cfg.env.device) else [])
    for note in notes if fallback else []:
        warnings.warn(note.message, stacklevel=2)
    if cfg.env.device.startswith("cuda") and torch.cuda.is_available():
        if nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {nproc}: each rank takes one GPU and this machine has "
                              f"{torch.cuda.device_count()}; give --nproc {torch.cuda.device_count()} or fewer, or "
                              "use torchrun across machines (README, Multi-GPU and multi-node)")
    elif nproc > (cores := len(os.sched_getaffinity(0))):
        print(f"warning: --nproc {nproc} on {cores} CPU cores: the ranks share cores, so each steps slower "
              f"and the run is likely slower than with --nproc {cores}", file=sys.stderr)
    return fallback


def _refuse_finished_first(run: Path, cfg: TrainConfig, ranks: int) -> None:
    """A resume of a finished run, refused before anything else is built, as the runner would refuse it: under
    --nproc each rank had been started only to refuse it, torchrun's error lines after the runner's; in one
    process a finished run whose replay.pt was lost had first been told to restore it. Before more than one
    ``ranks`` start, so is a changed agent setting a resume may not change (an activation, the agent's
    ``resume_fixed``, a starting value ``init_*``), which every rank's restore had refused
    (:func:`robolearn.checkpoint.restore_agent`)."""
    from policies import agent_entry
    from robolearn.checkpoint import CheckpointError, load_checkpoint, refuse_changed_starts, refuse_fixed_changes
    from robolearn.runs import refuse_finished

    try:
        payload = load_checkpoint(run / "checkpoints" / "latest.pt")
        done = int(payload["progress"].get("env_steps", 0))
    except (CheckpointError, TypeError, ValueError):  # (the runner says what is wrong with it)
        return
    if done >= cfg.runner.total_steps:  # (below it, the resume sets the evaluation aside: the ranks' to do)
        refuse_finished(run, "env_steps", done, cfg.runner.total_steps, cfg.runner.eval_episodes)
    if ranks > 1:
        agent_cls, saved = agent_entry(cfg.algo)[1], (payload.get("config") or {}).get("agent") or {}
        now = to_dict(cfg).get("agent") or {}
        refuse_fixed_changes(agent_cls, saved, now)
        refuse_changed_starts(cfg.algo, agent_cls, saved, now)


def _trained_ranks(run: Path, cfg: TrainConfig) -> int:
    """How many ranks trained ``run`` (its checkpoint's ``world_size``; 1 for runs from before it was
    recorded, or without a checkpoint, which the runner then reports). More than this machine's GPUs was a
    multi-node run: it resumes with its own torchrun line. On CPU, ranks beyond the cores start again,
    sharing them, as they trained (``--nproc`` warned)."""
    import torch

    from robolearn.checkpoint import CheckpointError, load_checkpoint

    try:
        ranks = max(1, int(load_checkpoint(run / "checkpoints" / "latest.pt")["progress"].get("world_size", 1)))
    except CheckpointError:
        return 1
    # Without a GPU a warp run falls back to the CPU (a mujoco one on cuda is refused when built); on CPU, ranks
    # beyond the cores share them, as it trained
    cuda = cfg.env.device.startswith("cuda") and torch.cuda.is_available()
    if cuda and ranks > torch.cuda.device_count():
        raise ConfigError(f"{run} was trained on {ranks} ranks, more than this machine's {torch.cuda.device_count()} "
                          "GPUs: resume a multi-node run with its torchrun line (README, Multi-GPU and multi-node), "
                          "or give --nproc N (each update then sees another batch)")
    return ranks


def _run_config(run: Path, nominal: bool = False) -> TrainConfig:
    """The run's config, with its torch settings (threads, matmul precision, denormals) applied to this
    process as the run had them: eval then gives eval.json's numbers again, play and export the same actions.
    ``nominal``: without its domain randomization; else automatic randomization at the width it reached."""
    from robolearn.config import load_run_config
    from robolearn.runs import on_this_machine, trained_env_config

    cfg = load_run_config(run)
    cfg.runner.apply_torch_settings()
    if nominal:
        cfg.env = on_this_machine(run, cfg.env)
        cfg.env.randomization = {}
    else:
        cfg.env = trained_env_config(run, cfg)
    return cfg


def _eval(args: argparse.Namespace) -> int:
    from robolearn.evaluate import evaluate
    from robolearn.registry import evaluation_dynamics, make_env
    from robolearn.runs import load_controller

    if args.episodes is not None:
        _positive("--episodes", args.episodes)
    if args.fas_shift is not None and args.fas is None:
        raise ValueError("--fas-shift applies to --fas: add --fas (and R_MAX where the task has no reference)")
    cfg = _run_config(args.run, nominal=args.nominal)
    if args.episodes is None:  # the run's own evaluation's count: with its seed, eval.json's numbers again
        args.episodes = cfg.runner.eval_episodes if cfg.runner.eval_episodes > 0 and args.fas is None else 10
    if args.fas is not None:
        args.seed = 12345 if args.seed is None else args.seed
        return _eval_fas(args, cfg)
    seed = cfg.seed + 10_000 if args.seed is None else args.seed  # the end-of-run evaluation's (runner.finish_run)
    with make_env(cfg.env, num_envs=args.episodes, seed=seed) as env:
        result = evaluate(load_controller(args.run, env, args.exported, cfg), env, args.episodes, seed=seed)
    result = {"run": str(args.run), "task": cfg.env.task, **result, "dynamics": evaluation_dynamics(cfg.env),
              "controller": args.exported or "checkpoint"}
    if (score := _normalized_score(Path(args.run), cfg.dataset, result["return_mean"])) is not None:  # as the run's own evaluation
        result["normalized_score"] = score
    if not args.json:
        line = f"{cfg.env.task}: return {result['return_mean']:.2f} ± {result['return_std']:.2f} over {counted(result['episodes'], 'episode')}"
        if result.get("success_rate") is not None:
            line += f", success {100 * result['success_rate']:.0f}%"
        if score is not None:
            line += f", normalized score {100 * score:.1f}"
        print(f"{line}; dynamics {result['dynamics']}" + ("" if result["dynamics"].startswith("nominal") else
                                                         " (--nominal without)"))
    if args.json:
        print(strict_json.dumps(result))
    return 0


def _eval_fas(args: argparse.Namespace, cfg: TrainConfig) -> int:
    """``eval --fas``: R(L) for L = 1, 2, 4, ..., 30, the FAS, a plot and a JSON line."""
    from robolearn import fas
    from robolearn.checkpoint import atomic_write_bytes
    from robolearn.registry import make_env
    from robolearn.runs import load_controller

    try:
        r_max = None if args.fas is True else float(args.fas)
    except ValueError:
        raise ValueError(f"--fas R_MAX must be a number (the task's reference return), got {args.fas!r}") from None
    fas.reference(cfg.env.task, r_max, args.fas_shift)  # an unknown task fails before any episode is run
    with make_env(cfg.env, num_envs=1) as env:
        controller = load_controller(args.run, env, args.exported, cfg)
    result = fas.fas(controller, lambda n: make_env(cfg.env, num_envs=n, seed=args.seed), cfg.env.task,
                     episodes=args.episodes, seed=args.seed, r_max=r_max, shift=args.fas_shift)
    result = {"run": str(args.run), "controller": args.exported or "checkpoint", **result, "plot": str(fas.plot({cfg.run_name: result}, args.run / "fas.png", cfg.env.task))}
    atomic_write_bytes(args.run / "fas.json", lambda f: f.write(strict_json.dumps(result, indent=2).encode()))
    if not args.json:
        print(f"{cfg.env.task}: R(L) over {counted(args.episodes, 'episode')}, decision period {result['decision_period']}")
        for length, value in zip(result["lengths"], result["returns"]):
            print(f"  L = {length:>2}  R = {value:10.2f}")
        print(f"FAS {result['fas']:.3f}  (R_max {result['r_max']:g}, shift {result['shift']:g}); plot {result['plot']}")
    else:
        print(strict_json.dumps(result))
    return 0


def _play(args: argparse.Namespace) -> int:
    from gymnasium.error import DependencyNotInstalled

    from robolearn.evaluate import record_video, video_target
    from robolearn.registry import make_env
    from robolearn.runs import load_controller

    _positive("--seconds", args.seconds)
    cfg = _run_config(args.run, nominal=args.nominal)
    video_target(args.video)[1].unlink()  # a path that cannot take the video is said now, not after the filming
    with make_env(cfg.env, num_envs=1, seed=args.seed) as env:
        controller = load_controller(args.run, env, None, cfg)
        try:
            path = record_video(controller, env, args.video, seconds=args.seconds, seed=args.seed, progress=True)
        except (ImportError, DependencyNotInstalled, NotImplementedError) as err:  # no pygame; an env that cannot render
            raise ValueError(f"cannot film {cfg.env.task}: {str(err).strip()}") from None
    print(f"video: {path}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from robolearn.curves import find_runs, plot_runs
    from robolearn.logger import read_metrics
    from robolearn.recording_plot import is_recording, plot_recording

    missing = [str(path) for path in args.runs if not path.exists()]
    if missing:
        raise FileNotFoundError(f"no such run or recording: {', '.join(missing)}")
    if file := next((path for path in args.runs if path.is_file()), None):  # (had been "no metrics.jsonl lines in")
        if is_recording(file.parent):  # an episode_*.npz: its recording draws it, with the others
            raise ValueError(f"{file}: one episode of a recording; plot draws the recording's folder: "
                             f"{shell('robolearn', 'plot', file.parent)}")
        if run := run_above(file):  # <run>/metrics.jsonl, <run>/curves.png
            raise ValueError(f"{file}: a file in the run {run}; plot draws the run: {shell('robolearn', 'plot', run)}")
        raise ValueError(f"{file}: a file; plot takes run directories, folders of them, or a recording's folder")
    if args.out is not None and args.out.suffix.lower() != ".png":  # (it had written a PNG named a.txt)
        raise ValueError(f"--out {args.out}: plots are PNG images; give a .png path")
    if args.out is not None and (blocked := next((p for p in args.out.parents if p.exists() and not p.is_dir()), None)):
        raise ValueError(f"--out {args.out}: {blocked} is a file, not a folder")  # (not mkdir's bare "File exists")
    if len(args.runs) == 1 and is_recording(args.runs[0]):  # a deploy's (or any) recording: its joints' motion
        if args.mean or args.metrics:
            raise ValueError(f"{args.runs[0]} is a recording: its plot draws the joints; --mean and --metrics are "
                             "for runs' learning curves")
        print(f"recording: {plot_recording(args.runs[0], args.out)}")
        return 0
    if len(args.runs) > 1 and (recording := next((path for path in args.runs if is_recording(path)), None)):
        # (had been "no metrics.jsonl lines in ...: not a run directory", of recordings named as such)
        raise ValueError(f"{recording} is a recording: plot draws one recording at a time, and no runs beside it: "
                         f"{shell('robolearn', 'plot', recording)}, each into its own recording.png")
    for path in args.runs:  # <run>/export, <run>/checkpoints: no metrics.jsonl there, nor a recording
        if (run := run_above(path)) and not any(p.name == "metrics.jsonl" or p.match("episode_*.npz")
                                                for p in path.rglob("*")):
            raise ValueError(f"{path}: a folder inside the run {run}; plot draws the run: "
                             f"{shell('robolearn', 'plot', run)}")
    runs = find_runs(args.runs)
    recordings = sorted({f.parent for path in args.runs for f in path.glob("*/episode_*.npz")},
                        key=lambda folder: folder.stat().st_mtime)  # newest last, as `<time>-10` sorts before `-2`
    if recordings and not any((run / "metrics.jsonl").is_file() for run in runs):  # <run>/deploy: recordings in it
        newest, others = recordings[-1], recordings[:-1]
        also = f" (the newest; also {few(others[::-1])})" if others else ""  # newest first
        raise ValueError(f"{', '.join(map(str, args.runs))} holds recordings, not runs; plot one: robolearn plot "
                         f"{newest}{also}")
    empty = [run for run in runs if not read_metrics(run)]
    if empty and len(empty) < len(runs):  # nothing logged yet (starting, or stopped before its first line), named
        if stray := [run for run in empty if not any((run / name).is_file() for name in ("metrics.jsonl",
                                                                                          "config.yaml"))]:
            raise ValueError(f"{stray[0]}: not a run directory (no metrics.jsonl or config.yaml), nor a folder of "
                             "runs")  # (a mistyped folder, not a run that is starting)
        print(f"left out (no metrics.jsonl lines yet): {', '.join(map(str, empty))}")  # or found in a folder: not
        runs = [run for run in runs if run not in empty]  # the others (a named one had refused them all)
    # a run's own curves.png is its default plot, redrawn as the run draws it; another (--metrics, --mean) had
    # replaced it, so that one goes here, as several runs' do
    own = len(runs) == 1 and not args.metrics and not args.mean
    out = args.out or (runs[0] / "curves.png" if own else Path("curves.png"))
    print(f"curves: {plot_runs(runs, out, args.metrics, mean=args.mean)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from robolearn.export import FILENAMES, FORMATS
    from robolearn.runs import export_run

    formats = tuple(args.format or FORMATS)
    out = args.out or args.run / "export"
    older = {fmt: out / FILENAMES[fmt] for fmt in FORMATS if fmt not in formats and (out / FILENAMES[fmt]).is_file()}
    paths = export_run(args.run, formats, args.out, overwrite=args.overwrite)
    for name, path in paths.items():
        print(f"{name + ':':<13}{path}")
    for fmt, path in older.items():  # (removed: the controller.json beside it is no longer its controller's)
        if not path.exists():
            print(f"{'removed:':<13}{path} (of the controller exported before; --format {fmt} exports it again)")
    return 0


def _list(args: argparse.Namespace) -> int:
    import sims
    from policies import AGENTS
    from robolearn.run_lock import holder
    from robolearn.runs import find_run_dirs, run_status

    # before the listing (the error had come after it); a file named runs where the default folder goes too (it had
    # been "none yet"); the default folder not there yet is "none yet"
    if args.runs.exists() and not args.runs.is_dir():
        raise FileNotFoundError(f"{'--runs ' * (args.runs != Path('runs'))}{args.runs}: a file, not a folder of runs; "
                                "give the folder the runs are in, --runs DIR (default runs)")
    if not args.runs.exists() and args.runs != Path("runs"):
        raise FileNotFoundError(f"--runs {args.runs}: no such folder")
    print("configs:    " + " ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))))
    print("tasks:      " + " ".join(sorted(sims.TASKS)) + "  (and gym:<any Gymnasium id>, mjlab:<any mjlab task id>, module:Class for a Task of your own)")
    print("algorithms: " + " ".join(sorted(AGENTS)) + "  (and module:Class for an Agent of your own)")
    print("robots:     " + " ".join(sorted(p.stem for p in (CONFIG_DIR / "robots").glob("*.yaml")))
          + "  (robolearn deploy RUN --robot NAME; robolearn emulate dynamixel)")
    runs = find_run_dirs(args.runs)
    print("runs:" + ("" if runs else "       none yet (robolearn train)"))
    evaluations: dict[Path, list[tuple[Path, dict]]] = {}
    for run in runs:
        evaluation = run / "eval.json"
        summary = ""
        if evaluation.is_file():
            try:  # one damaged file must not hide the other runs
                e = json.loads(evaluation.read_text())
                summary = f"return {float(e['return_mean']):.1f}"
                if e.get("success_rate") is not None:
                    summary += f", success {100 * float(e['success_rate']):.0f}%"
                if e.get("normalized_score") is not None:  # offline runs: on the data's reference scale (x 100)
                    summary += f", normalized score {100 * float(e['normalized_score']):.1f}"
            except (OSError, ValueError, TypeError, KeyError) as err:
                summary = (f"(eval.json unreadable: {type(err).__name__}: {err}; "
                           f"{shell('robolearn', 'eval', run)} gives its numbers again)")
            else:
                evaluations.setdefault(run.parent, []).append((run, e))
        try:  # one damaged run must not hide the others
            status = f"training now ({trainer})" if (trainer := holder(run)) else run_status(run)
        except (ValueError, TypeError, KeyError, AttributeError, OSError, CheckpointError) as err:
            status = f"unreadable ({type(err).__name__}: {' '.join(str(err).split())[:120]})"
        print(f"  {run}  {status}  {summary}".rstrip())
    groups = {folder: [(run, e) for run, e in done if _config_readable(run)] for folder, done in evaluations.items()}
    groups = {folder: done for folder, done in groups.items() if len(done) > 1}
    if groups:
        print("groups:     evaluated runs of one folder, mean ± std (ddof 0) over them")
    for folder, done in groups.items():
        print(f"  {folder}  {_group_summary(done)}")
    return 0


def _config_readable(run: Path) -> bool:
    """Whether ``run``'s config.yaml reads as a mapping (a damaged one is said on the run's own line)."""
    try:
        return isinstance(read_yaml(run / "config.yaml"), dict)
    except (ValueError, OSError):
        return False


def _group_summary(done: list[tuple[Path, dict]]) -> str:
    """``n runs (seeds ...): return mean ± std[, success mean ± std]`` of runs' eval.json, when they are
    seeds of one setting; runs of one folder whose settings differ (overrides without name=) are named so, and
    a seed run more than once is said (its reruns would pass for a spread over seeds)."""
    import numpy as np

    settings = [flat_keys(read_yaml(run / "config.yaml")) for run, _ in done]  # (readable: _list checked)
    seeds = [str(flat.pop("seed", "?")) for flat in settings]
    for flat in settings:  # where it was written (run_dir, name: a run moved in, or resumed with name=) and how it
        for key in [k for k in flat if k.split(".")[0] in ("run_dir", "name", "logging")]:  # was logged: no change
            del flat[key]
    differ = sorted({key for flat in settings for key in flat if any(f.get(key) != flat.get(key) for f in settings)})
    if differ:
        return f"{len(done)} runs whose settings differ ({', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}): " \
               "not summed up (give each setting its own name=)"
    returns = np.array([e["return_mean"] for _, e in done])
    text = f"{len(done)} runs (seeds {' '.join(seeds)}): return {returns.mean():.1f} ± {returns.std():.1f}"
    successes = [e["success_rate"] for _, e in done if e.get("success_rate") is not None]
    if len(successes) == len(done):
        text += f", success {100 * np.mean(successes):.0f} ± {100 * np.std(successes):.0f}%"
    if repeated := [seed for seed in dict.fromkeys(seeds) if seed != "?" and seeds.count(seed) > 1]:
        text += (f"; seed {', '.join(repeated)} more than once: reruns of one seed, whose spread is not "
                 "the seeds' (a copied run, or runs of one seed= override)")
    return text


def _deploy(args: argparse.Namespace) -> int:
    from hardware.deploy import deploy, report
    from hardware.safety import parse_overrides

    _positive("--episodes", args.episodes)
    summary = deploy(args.run, args.robot, port=args.port, episodes=args.episodes, fmt=args.format,
                     target=tuple(args.target) if args.target else None, record=not args.no_record, seed=args.seed,
                     safety_overrides=parse_overrides(args.safety), retries=args.retries, progress=True)
    print(report(summary, fixed_target=bool(args.target)))
    if args.json:
        print(strict_json.dumps(summary, default=str))
    return 130 if summary["loop"]["interrupted"] else 0


def _replay(args: argparse.Namespace) -> int:
    from hardware.replay import recorded_control_dt, replay
    from hardware.safety import parse_overrides

    episode = Path(args.episode)  # an episode only: not said before the error of a missing one, or of deploy.json
    if episode.is_file() and episode.suffix == ".npz" and (dt := recorded_control_dt(episode)) \
            and _runs_at(args.robot, dt):  # (nor before a robot config of another rate is refused)
        print(f"rate:        {1 / dt:g} Hz, as recorded")
    result = replay(args.episode, args.robot, port=args.port, safety_overrides=parse_overrides(args.safety))
    print(f"replayed:    {result['steps']} steps of {args.episode}")
    print(f"divergence:  max {result['divergence_rad_max']:.4f} rad, mean {result['divergence_rad_mean']:.4f} rad "
          f"(start pose within {result['start_error_rad']:.4f} rad)")
    events = result["safety_events"]
    print("safety:      " + (", ".join(f"{rule} {n}" for rule, n in sorted(events.items())) or "no interventions"))
    if args.json:
        print(strict_json.dumps(result, default=str))
    return 0


def _runs_at(robot: str, dt: float) -> bool:
    """Whether robot config ``robot`` replays at control period ``dt``: it has none of its own, or that one (one it
    cannot read is left to replay's own error)."""
    from hardware.dxl_arm import load_robot_config
    from hardware.replay import runs_at

    try:
        return runs_at(load_robot_config(robot), dt)
    except (OSError, ValueError, TypeError, KeyError):
        return False


def _emulate(args: argparse.Namespace) -> int:
    from hardware.dxl_arm import robot_config_path
    from hardware.dynamixel.emulator import main as emulate

    argv = ["--robot", str(robot_config_path(args.robot)), "--latency", str(args.latency)]
    for name in ("mass_scale", "damping_scale", "friction_scale", "gain_scale"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    argv += ["--lockstep"] if args.lockstep else []
    argv += [f"--fault={fault}" for fault in args.fault]
    return emulate(argv + ([] if args.step_dt is None else [f"--step-dt={args.step_dt}"]))


def _bench(args: argparse.Namespace) -> int:
    """The scripts of benchmarks/ (they ship with the repository, not the package): each runs its
    peer and ours side by side and writes its section of BENCHMARKS.md."""
    import subprocess

    scripts = {p.stem: p for p in sorted([*BENCH_DIR.glob("*.py"), *BENCH_DIR.glob("*.sh")]) if p.stem != "common"}
    if not scripts:
        raise FileNotFoundError(f"{BENCH_DIR}: no benchmarks here; they ship with the repository (git clone it)")
    if args.name is None:
        print(f"benchmarks in {BENCH_DIR} (robolearn bench NAME --help):")
        for name, path in scripts.items():
            print(f"  {name:<24} {_first_line(path)}")
        return 0
    if args.name not in scripts:
        raise ConfigError(f"no benchmark '{args.name}'; there are: {', '.join(scripts)}")
    script = scripts[args.name]
    command = ["bash" if script.suffix == ".sh" else sys.executable, str(script), *args.args]
    return subprocess.call(command, cwd=BENCH_DIR.parent)


def _first_line(path: Path) -> str:
    """A script's summary: the first line of its docstring, or of its header comment (shell)."""
    import ast

    text = path.read_text()
    if path.suffix == ".py":
        return (ast.get_docstring(ast.parse(text)) or "").split("\n")[0]
    header = " ".join(line.lstrip("# ") for line in itertools.takewhile(lambda line: line.startswith("#"),
                                                                       text.splitlines()[1:]))
    return re.split(r":\s|\.\s| \(|:$", header)[0]  # its first clause


COMMANDS = {"train": _train, "eval": _eval, "play": _play, "plot": _plot, "export": _export, "deploy": _deploy,
            "replay": _replay, "emulate": _emulate, "list": _list, "dataset": dataset_command, "bench": _bench}

if __name__ == "__main__":
    sys.exit(main())
