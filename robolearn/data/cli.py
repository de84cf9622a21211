"""``robolearn dataset list | info | record | recover | import | export | split | merge | replay``.

Registered by :mod:`robolearn.cli` through :func:`add_dataset_parser` and
:func:`dataset_command`. Bad input ends in one line (a :class:`DatasetError`)
and exit status 2; an interrupted ``record`` keeps its complete episodes and
exits 130; one killed outright leaves them for ``recover``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

from robolearn import strict_json
from robolearn.checkpoint import ShapeMismatch
from robolearn.data.importing import FORMATS as IMPORT_FORMATS, check_refs, settings_said, slug
from robolearn.listing import counted
from robolearn.runtime import say_what_the_stop_left
from robolearn.shell import shell


def seed_argument(text: str) -> int:
    """A command line's ``--seed``, as train's ``seed=`` takes it: a whole number in [0, 2**32 - 1] (-5 had been
    taken, and 99999999999999999999 had said only "Overflow when unpacking long long")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: a whole number") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"seed {value} must be in [0, 2**32 - 1] (numpy's and torch's seeds)")
    return value


def name_argument(text: str) -> str:
    """A command line's ``--name``: an empty one (``--name "$NAME"`` with NAME unset) had been taken as none given,
    so the dataset went under its default name (with --overwrite, replacing the dataset of that name)."""
    if not text:
        raise argparse.ArgumentTypeError("empty: give the dataset's name, or leave --name out for the default one")
    return text


def add_dataset_parser(commands: Any) -> None:
    """Add the ``dataset`` command and its subcommands to ``commands`` (argparse subparsers)."""
    parser = commands.add_parser("dataset", help="offline datasets: record, import, export, split, merge, replay")
    sub = parser.add_subparsers(dest="dataset_command", required=True)
    root = argparse.ArgumentParser(add_help=False)
    root.add_argument("--root", type=Path, help="datasets directory (default: $ROBOLEARN_DATASETS or ~/.robolearn/datasets)")
    refs = argparse.ArgumentParser(add_help=False)
    refs.add_argument("--ref-min", type=float, help="return of a random policy, for normalized scores")
    refs.add_argument("--ref-max", type=float, help="return of an expert policy, for normalized scores")
    refs.add_argument("--overwrite", action="store_true", help="replace a dataset of the same name")

    sub.add_parser("list", parents=[root], help="the datasets under the root")

    p = sub.add_parser("info", parents=[root], help="a dataset's metadata and return statistics")
    p.add_argument("name", help="the dataset's name (dataset list shows them)")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON, for scripts")

    p = sub.add_parser("record", parents=[root, refs], help="record a controller's episodes in simulation")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="a run directory: its task and latest checkpoint")
    source.add_argument("--controller", help="an exported controller.pt/.onnx, or 'random' (uniform actions)")
    p.add_argument("--task", help="task name or gym:<id> (default: the run's or the controller's)")
    p.add_argument("--episodes", type=int, required=True, help="how many whole episodes to record")
    p.add_argument("--num-envs", type=int, default=1, help="envs stepped together (default 1)")
    p.add_argument("--noise", type=float, default=0.0,
                   help="Gaussian action noise's standard deviation, in half action ranges (default 0: none)")
    p.add_argument("--name", type=name_argument, help="dataset name (default: <task>-<controller>)")
    p.add_argument("--seed", type=seed_argument, default=0, help="the episodes' and the noise's random stream (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("recover", parents=[root], help="make a dataset of the episodes a killed recording left")
    p.add_argument("folders", nargs="*", type=Path,
                   help="the recordings' temp folders (default: every one under the root; `dataset list` names them)")
    p.add_argument("--name", type=name_argument,
                   help="dataset name (default: the one the recording was writing, or its next version)")
    p.add_argument("--overwrite", action="store_true", help="replace a dataset of the --name given")

    p = sub.add_parser("import", parents=[root, refs], help="import a D4RL file, a LeRobot dataset or a deploy recording")
    p.add_argument("path", type=Path)
    p.add_argument("--format", choices=IMPORT_FORMATS, required=True)
    p.add_argument("--task", help="task name or gym:<id>: shapes are checked against it and replay uses it")
    p.add_argument("--name", type=name_argument, help="dataset name (default: the file or directory name)")
    p.add_argument("--done", choices=["terminal", "truncation"], default="terminal",
                   help="lerobot: what next.done marks: where the task ended (no bootstrap), or where the recording "
                        "stopped (a time limit); default terminal")

    p = sub.add_parser("export", parents=[root], help="write a dataset as a D4RL HDF5 file or a LeRobot v3 directory")
    p.add_argument("name")
    p.add_argument("--format", choices=["d4rl", "lerobot"], default="d4rl", help="default d4rl")
    p.add_argument("--out", type=Path, required=True, help="d4rl: the .hdf5 file; lerobot: the dataset's directory")
    p.add_argument("--fps", type=float, help="lerobot: frames per second (default: 1 / the dataset's control_dt)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file (or LeRobot dataset)")

    p = sub.add_parser("split", parents=[root], help="split a dataset's episodes into new datasets")
    p.add_argument("name")
    p.add_argument("--fractions", type=float, nargs="+", required=True,
                   help="each part's share of the shuffled episodes, summing to at most 1 (0.5 0.3: 20%% left out)")
    p.add_argument("--names", nargs="+", help="names of the parts (default: <name>-split<i>)")
    p.add_argument("--seed", type=seed_argument, default=0, help="the shuffle's random stream (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace datasets of the parts' names")

    p = sub.add_parser("merge", parents=[root], help="merge datasets of one task into a new one")
    p.add_argument("names", nargs="+", help="the datasets to merge")
    p.add_argument("--name", required=True, help="the merged dataset's name")
    p.add_argument("--overwrite", action="store_true", help="replace a dataset of that name")

    p = sub.add_parser("replay", parents=[root], help="replay an episode's actions in simulation and measure divergence")
    p.add_argument("name")
    p.add_argument("--episode", type=int, default=0, help="which episode (0 the first; negative counts from the end, -1 the last)")
    p.add_argument("--task", help="default: the dataset's task")
    p.add_argument("--video", type=Path, help="film the replay into this .mp4")
    p.add_argument("--json", action="store_true", help="end with one JSON line (with every step's divergence)")


def dataset_command(args: argparse.Namespace) -> int:
    if getattr(args, "task", None):
        _check_task_flag(args.task)
    return COMMANDS[args.dataset_command](args)


def _check_task_flag(task: str) -> None:
    """Refuse an unknown ``--task`` (or a ``module:Class`` that does not import) before anything is read or
    written, said as the flag given: sims' own message names the config key ``env.task``, which the dataset
    commands do not take. ``gym:`` and ``mjlab:`` ids are their libraries' to check, when the env is built."""
    import sims

    if task.startswith((sims.GYM_PREFIX, sims.MJLAB_PREFIX)):
        return
    try:
        sims.task_builder(task)
    except ValueError as err:
        raise ValueError(str(err).replace("(env.task)", "(--task)").replace("env.task=", "--task ")) from None


def _list(args: argparse.Namespace) -> int:
    from robolearn.data import Dataset, DatasetError, datasets_root, list_datasets

    if args.root is not None and not args.root.is_dir():  # a mistyped --root had said "none yet", as if they were gone
        said = "a file, not a folder" if args.root.exists() else "no such folder"
        raise FileNotFoundError(f"--root {args.root}: {said}; give the folder of the datasets (default: "
                                "$ROBOLEARN_DATASETS or ~/.robolearn/datasets)")
    if args.root is None and datasets_root().is_file():  # (as --root: it had said "none yet")
        raise FileNotFoundError(f"$ROBOLEARN_DATASETS {datasets_root()}: a file, not a folder; give the folder of the "
                                "datasets")
    ids = list_datasets(args.root)
    print(f"datasets in {datasets_root(args.root)}:" + ("" if ids else " none yet (robolearn dataset record | import)"))
    width = max([32, *map(len, ids)])
    for dataset_id in ids:
        try:
            ds = Dataset(datasets_root(args.root) / dataset_id)
            ds.check_readable()
            print(f"  {dataset_id:<{width}} {ds.task or '-':<18} {ds.num_episodes:>6} episodes {ds.num_steps:>9} steps")
        except DatasetError as err:  # one broken dataset does not hide the others
            print(f"  {dataset_id:<{width}} UNREADABLE: {err}")
    _say_uncommitted(args.root)
    return 0


def _say_uncommitted(root: Path | None) -> None:
    """The recordings killed before they committed, with their episode counts and the command that keeps them."""
    from robolearn.data.minari_store import uncommitted_episodes
    from robolearn.data.recover import uncommitted_recordings

    folders = uncommitted_recordings(root)
    if folders:
        recover = shell("robolearn", "dataset", "recover", *(["--root", root] if root else []))
        print(f"uncommitted: recordings killed before their end (`{recover}` makes datasets of them):")
        for folder in folders:
            print(f"  {folder}  {counted(uncommitted_episodes(folder), 'complete episode')}")


def _recover(args: argparse.Namespace) -> int:
    from robolearn.data.recover import recover, uncommitted_recordings

    folders = args.folders or uncommitted_recordings(args.root)
    if not folders:
        from robolearn.data import datasets_root

        print(f"nothing to recover: no recording under {datasets_root(args.root)} was left uncommitted")
        return 0
    if args.name and len(folders) > 1:
        raise ValueError(f"--name {args.name}: {len(folders)} recordings to recover; give one folder with it")
    for folder in folders:
        # each write sweeps the root and had warned, again for every folder, that those still to come were left
        # uncommitted: this loop commits them
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".* left uncommitted when it was killed or crashed")
            done = recover(folder, args.name, args.root, args.overwrite)
        cut = f" ({done.left_out} it was writing when killed left out)" if done.left_out else ""
        print(f"recovered:   {counted(done.dataset.num_episodes, 'episode')}, {done.dataset.num_steps} steps{cut} -> "
              f"{done.dataset.path}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from robolearn.data import Dataset

    summary = Dataset.load(args.name, args.root).summary()
    if args.json:
        print(strict_json.dumps(summary, default=str))
        return 0
    for key, value in summary.items():
        if key.startswith("normalized_score") and isinstance(value, float):  # x 100, as runs and D4RL's tables say it
            key, value = f"{key} (x100)", 100 * value
        text = f"{value:.4g}" if isinstance(value, float) else json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)
        print(f"{key + ':':<23} {text if len(text) <= 100 else text[:96] + ' ...'}")
    return 0


def _record(args: argparse.Namespace) -> int:
    import sims
    from robolearn.data.minari_store import DatasetWriter
    from robolearn.data.record import RandomController, env_metadata, record
    from robolearn.evaluate import settings_text
    from robolearn.export import read_controller_meta

    if args.episodes < 1 or args.num_envs < 1:
        raise ValueError("--episodes and --num-envs must be at least 1")
    if not (math.isfinite(args.noise) and args.noise >= 0):  # a negative std had recorded as noise -1, adding none
        raise ValueError(f"--noise is a standard deviation (in half action ranges), at least 0; got {args.noise:g}")
    check_refs(args.ref_min, args.ref_max)
    # The controller as a full path: the dataset says what made it wherever it is read from
    controller_name = args.controller if args.controller in (None, "random") else str(Path(args.controller).resolve())
    task, kwargs, algorithm = args.task, {}, None
    if args.run:
        from robolearn.config import load_run_config

        cfg = load_run_config(args.run)
        task, algorithm = task or cfg.env.task, cfg.algo
        if task == cfg.env.task:  # the run's task as it trained (episode length, limits); another's would not fit
            kwargs = dict(cfg.env.kwargs)
        if left_out := [f"env.{key}" for key in ("randomization", "delay") if getattr(cfg.env, key)]:
            warnings.warn(f"{' and '.join(left_out)} of the run left out: the episodes are recorded on the nominal "
                          "task, whose states replay exactly (robolearn eval RUN scores the run as it trained)",
                          stacklevel=2)
        controller_name = f"run:{Path(args.run).resolve()}"
    elif args.controller != "random":
        if not Path(args.controller).is_file():
            what = "a folder, not a file" if Path(args.controller).is_dir() else "no such file"
            raise FileNotFoundError(f"--controller {args.controller}: {what}; give an exported controller.pt or "
                                    ".onnx (`robolearn export RUN` writes RUN/export/), a run with --run, or 'random'")
        meta_path = Path(args.controller).parent / "controller.json"
        meta = read_controller_meta(meta_path, Path(args.controller)) if meta_path.is_file() else {}
        task = task or _task_a_file_names(meta.get("task"), str(meta_path))
        if task == meta.get("task"):  # the task as the controller was trained on it (episode length, limits)
            kwargs = dict(meta.get("task_kwargs") or {})
        if left_out := [f"env.{key} {settings_text(meta[key])}" for key in ("randomization", "delay") if meta.get(key)]:
            warnings.warn(f"the controller was trained with {' and '.join(left_out)} ({meta_path}), which the recording "
                          "leaves out: the episodes are recorded on the nominal task, whose states replay exactly",
                          stacklevel=2)
    if not task:
        if args.controller == "random":  # not trained on anything: the task says which actions to draw
            raise ValueError("--task is needed with --controller random: which task's episodes to record, e.g. "
                             "--task arm_reach (`robolearn list` names the tasks)")
        raise ValueError(f"--task is needed: no controller.json beside {args.controller} says which task it was "
                         "trained on")
    with sims.make_env(task, num_envs=args.num_envs, seed=args.seed, **kwargs) as env:
        if args.run:
            from robolearn.runs import load_agent

            try:
                controller = load_agent(args.run, env, cfg).controller().to(env.device).eval()
            except ShapeMismatch:  # said as the task the run did not train on
                if task == cfg.env.task:
                    raise
                raise ValueError(f"--task {task}: run {args.run} trained on '{cfg.env.task}', whose observations or "
                                 "actions differ; leave --task out to record the run's own task") from None
        elif args.controller == "random":
            controller = RandomController(env, seed=args.seed)
        else:
            from robolearn.export import ExportedController

            controller = ExportedController(args.controller)
            _check_controller_fits(controller.meta, args.controller, task, env.observation_spec)
        kind = algorithm or ("random" if args.controller == "random" else "exported")
        name = args.name or f"{slug(task)}-{kind}"
        metadata = env_metadata(env, task, kwargs, controller=controller_name, algorithm_name=kind, source="record",
                                noise=args.noise, seed=args.seed, ref_min_score=args.ref_min, ref_max_score=args.ref_max)
        with DatasetWriter(name, env.observation_spec, env.action_spec, metadata=metadata, root=args.root,
                           overwrite=args.overwrite, keep_partial=True) as writer:
            stats = record(controller, env, writer, args.episodes, noise=args.noise, seed=args.seed,
                           progress=not args.no_progress)
            if stats.interrupted and writer.episodes == 0:
                writer.discard()
                print("interrupted before the first episode ended: nothing saved", file=sys.stderr)
                return 130
    returns = stats.returns or [0.0]
    print(f"recorded:    {counted(stats.episodes, 'episode')}, {writer.steps} steps in {stats.seconds:.1f} s "
          f"-> {writer.target}")
    print(f"return:      {sum(returns) / len(returns):.2f} mean, {min(returns):.2f} min, {max(returns):.2f} max"
          + _success_said(stats.successes))
    if stats.interrupted:
        print(f"interrupted: kept {counted(stats.episodes, 'complete episode')}")
        return 130
    return 0


def _success_said(successes: list[bool]) -> str:
    """``", success 7/10"``: how many episodes ended in the task's success; "" where none says."""
    return f", success {sum(successes)}/{len(successes)}" if successes else ""


def _import(args: argparse.Namespace) -> int:
    import numpy as np

    from robolearn.data.importing import import_dataset

    with warnings.catch_warnings(record=True) as said:  # printed with the summary, as its lines are
        warnings.simplefilter("always", UserWarning)
        try:
            imported = import_dataset(args.path, args.format, args.task, args.name, args.root, args.overwrite,
                                      args.done, args.ref_min, args.ref_max)
        except KeyboardInterrupt as err:  # (a bare "interrupted" had left the user to look for a half-written one)
            if "; " in str(err):  # said already: it came once the dataset was written
                raise
            kept = "; the dataset it would have replaced is kept" if args.overwrite else ""
            say_what_the_stop_left(err, f"nothing was imported: a dataset is written whole or not at all{kept}")
            raise
    ds, returns, meta = imported.dataset, imported.returns, imported.dataset.info
    print(f"imported:    {counted(ds.num_episodes, 'episode')}, {ds.num_steps} steps, return {np.mean(returns):.4g} ± "
          f"{np.std(returns):.4g} (min {np.min(returns):.4g}, max {np.max(returns):.4g})"
          + _success_said(imported.successes) + f" -> {ds.path}")
    if cut := meta.get("interrupted_episodes"):  # a recording's run ended mid-episode: kept, ending in a time limit
        print(f"cut short:   episode(s) {', '.join(map(str, cut))} (the run ended in them; kept, their last step a "
              "time limit; `dataset info` lists them as interrupted_episodes)")
    if meta.get("next_done_on_last_frames_only"):  # LeRobot's usual layout: say which reading was taken
        read_as, other, were = {"terminal": ("the task's end (no bootstrap)", "truncation", "time limits"),
                                "truncation": ("a time limit (bootstrapped from)", "terminal", "the task's end")}[args.done]
        print(f"next.done:   on each episode's last frame, read as {read_as}; --done {other} if they are {were}")
    recorded = (meta.get("recording") or {}).get("task")
    task, settings, others = ds.task, imported.settings, imported.other_settings
    if imported.task_from_file:
        print(f"task:        {task} (the file's own metadata; --task names another)"
              + (f" as recorded: {settings_said(settings)}" if settings else ""))
    elif settings or others:  # a recording's, or an export's of ours
        print(f"task:        {task}" + (f" as recorded: {settings_said(settings)}" if settings else "")
              + (f" (not {task} settings, kept under recording only: {settings_said(others)})" if others else ""))
    elif isinstance(recorded, dict) and recorded and not task:
        print(f"task:        not named; the recording's settings ({settings_said(recorded)}) are kept under recording "
              "only: import with --task (the controller's) to replay and evaluate with them")
    elif not task:  # data of elsewhere, imported without --task: said, as a recording's settings are
        source = {"d4rl": "file", "lerobot": "LeRobot dataset", "recording": "recording"}[args.format]
        why = (f"the {source}'s {meta['recorded_task']} cannot be made here" if meta.get("recorded_task")
               else f"the {source} says none")
        print(f"task:        not named ({why}): import with --task NAME to replay its episodes and "
              "evaluate on it; a run on it names one with env.task")
    for warning in said:
        if issubclass(warning.category, UserWarning):
            print(f"warning:     {warning.message}")
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return 0


def _export(args: argparse.Namespace) -> int:
    from robolearn.data import Dataset
    from robolearn.data.d4rl import refuse_replacing_other_files, write_d4rl
    from robolearn.data.lerobot import write_lerobot
    from robolearn.data.minari_store import refuse_export_into_a_dataset

    if args.fps is not None and args.format != "lerobot":
        raise ValueError("--fps is for LeRobot datasets; a D4RL export keeps the dataset's control_dt as it is")
    if args.format == "lerobot":
        dataset = Dataset.load(args.name, args.root)
        path = write_lerobot(dataset, args.out, fps=args.fps, overwrite=args.overwrite)
        print(f"exported:    {counted(dataset.num_episodes, 'episode')}, {dataset.num_steps} frames -> {path} (LeRobot v3.0; "
              "LeRobotDataset(repo_id, root=...) loads it)")
        return 0
    refuse_export_into_a_dataset(args.out)  # these two said before --overwrite is asked for: it would not help
    refuse_replacing_other_files(args.out.resolve() if args.out.is_symlink() else args.out)
    if args.out.exists() and not args.out.is_dir() and not args.overwrite:  # write_d4rl refuses a directory
        raise FileExistsError(f"{args.out}: exists; pass --overwrite to replace it")
    path = write_d4rl(Dataset.load(args.name, args.root), args.out)
    print(f"exported:    {path}")
    return 0


def _split(args: argparse.Namespace) -> int:
    from robolearn.data import Dataset, split

    parts = split(Dataset.load(args.name, args.root), args.fractions, args.names, seed=args.seed, root=args.root,
                  overwrite=args.overwrite)
    for part in parts:
        print(f"{part.id + ':':<23} {counted(part.num_episodes, 'episode')}, {part.num_steps} steps")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from robolearn.data import Dataset, merge

    merged = merge([Dataset.load(name, args.root) for name in args.names], args.name, root=args.root,
                   overwrite=args.overwrite)
    print(f"{merged.id + ':':<24}{counted(merged.num_episodes, 'episode')}, {merged.num_steps} steps")
    return 0


def _task_a_file_names(task: Any, where: str) -> Any:
    """``task`` as a file (a dataset's metadata, a controller.json) names it, refused where building it would import
    code (``module:Class``, a Gymnasium ``module:id``): a file does not get to import code, as on import
    (:func:`robolearn.data.importing._buildable_from_a_file`); the user's --task may name it. A downloaded dataset
    whose metadata said ``os:system`` had run its ``task_kwargs`` command at `dataset replay`."""
    from robolearn.data.importing import _buildable_from_a_file, no_task_here

    if unknown := no_task_here(task):  # no code (it had been said to name code to import, and --task to trust it)
        raise ValueError(f"{where} says its task is {task!r}, which {unknown}: pass --task with the task it was "
                         "recorded on")
    if task and not _buildable_from_a_file(task):
        raise ValueError(f"{where} says its task is {task!r}, which names code to import; a file does not get to "
                         f"run code: if you trust it, pass --task {shell(str(task))}")
    return task


def _replay(args: argparse.Namespace) -> int:
    import sims
    from robolearn.data import Dataset
    from robolearn.data.replay import replay
    from robolearn.evaluate import video_target

    if args.video is not None:  # a path that cannot take the video is said now, not after the replay
        video_target(args.video)[1].unlink()
    ds = Dataset.load(args.name, args.root)
    ds.need_episodes("replay")  # (the range below had read "has 0 episodes (0 to -1; ...)")
    task = args.task or _task_a_file_names(ds.task, f"dataset '{ds.id}'")
    if not task:
        raise ValueError(f"dataset '{ds.id}' does not say its task; pass --task")
    if not -len(ds) <= args.episode < len(ds):
        raise ValueError(f"--episode {args.episode}: dataset '{ds.id}' has {counted(len(ds), 'episode')} "
                         f"(0 to {len(ds) - 1}; `{shell('robolearn', 'dataset', 'info', args.name)}`)")
    args.episode %= len(ds)  # -1: the last; reported by its own number
    episode = ds[args.episode].check(f"{ds.path}: episode {args.episode}")  # (a dataset written elsewhere)
    kwargs = dict(ds.info.get("task_kwargs") or {}) if task == ds.task else {}  # another task's would not fit
    if kwargs:
        print(f"task:        {task} with the dataset's settings: {settings_said(kwargs)}")
    elif task != ds.task and ds.info.get("task_kwargs"):
        print(f"task:        {task} with its default settings (the dataset's are for {ds.task})")
    with sims.make_env(task, num_envs=1, seed=0, **kwargs) as env:
        specs_ok = episode.actions.shape[1:] == env.action_spec.shape
        if not specs_ok:
            raise ValueError(f"dataset '{ds.id}' actions have shape {episode.actions.shape[1:]}, "
                             f"task {task}'s are {env.action_spec.shape}")
        copied = ds.final_copied(args.episode)  # (a D4RL or LeRobot source has no final one)
        result = replay(episode, env, video=args.video, progress=True, final_copied=copied)
    s = result.summary()
    start = {"state": "restored from the recorded state", "qpos/qvel": "started from the recorded qpos and qvel",
             "reset": "from the env's own reset"}[result.start]
    if result.from_observation:  # a target the task reads back from the recorded observation
        start += (f"{' and' if result.start != 'reset' else ', with'} the task's own state that the recorded "
                  f"observation reports ({', '.join(result.from_observation)}); the rest as the env's reset left it")
    elif result.start == "qpos/qvel":
        start += " (the rest of the task's state, such as a target, as the env's reset drew it)"
    elif result.start == "reset" and episode.state is not None:  # had said "no recorded state"
        start += f" (the recorded simulator state is not one {task} takes)"
    elif result.start == "reset":
        start += " (no recorded state)"
    print(f"episode {args.episode}: {result.steps}/{result.recorded_steps} steps replayed, {start}")
    print(f"return:      recorded {result.recorded_return:.6g}, replayed {result.replayed_return:.6g}, "
          f"diff {result.return_diff:.3g}")
    if result.qpos_divergence is not None:
        div = result.qpos_divergence
        marks = sorted({*range(0, len(div), max(1, len(div) // 8)), len(div) - 1})
        print(f"max |qpos diff|: {s['qpos_divergence_max']:.3g} (by step: "
              + " ".join(f"{i}:{div[i]:.2g}" for i in marks) + ")")
    groups = result.group_divergence
    by_group = f" ({', '.join(f'{g} {d:.3g}' for g, d in groups.items())})" if len(groups) > 1 else ""
    if unmatched := sorted(set(episode.observations) - set(groups)):  # a robot's joint_state
        by_group += f"; not compared: {', '.join(unmatched)} (the env has no such group)"
    if copied:
        by_group += "; the last observation not compared (the source has none: it is a copy of the one before)"
    print(f"max |obs diff|:  {s['obs_divergence_max']:.3g}{by_group}" + ("   exact replay" if result.exact else ""))
    if result.recorded_success is not None or result.replayed_success is not None:
        said = {True: "succeeded", False: "failed", None: "not known"}
        print(f"success:     recorded {said[result.recorded_success]}, replayed {said[result.replayed_success]}")
    if result.ended_early:
        print("ended early: the env ended the episode before the recorded actions ran out")
    if result.video:
        print(f"video:       {result.video}")
    if args.json:
        extra: dict[str, Any] = {"qpos_divergence": None if result.qpos_divergence is None else result.qpos_divergence.tolist(),
                                 "obs_divergence": result.obs_divergence.tolist()}
        print(strict_json.dumps({"dataset": ds.id, "episode": args.episode, **s, **extra}))
    return 0


def _check_controller_fits(meta: dict[str, Any], source: str, task: str, observation_spec: dict) -> None:
    """Refuse an exported controller whose observations (controller.json) the task does not give;
    warn when it was trained on another task of the same shapes."""
    import math

    groups = list(meta.get("obs_groups", ()))
    trained = meta.get("task")
    on = f"trained on '{trained}'" if trained else "exported"
    missing = [g for g in groups if g not in observation_spec]
    if missing:
        raise ValueError(f"--controller {source}: {on}, it reads observation group '{missing[0]}', which task "
                         f"'{task}' lacks (it has {sorted(observation_spec)})" + (f"; use --task {trained}" if trained else ""))
    size = sum(math.prod(observation_spec[g].shape) for g in groups)
    if meta.get("obs_size") is not None and int(meta["obs_size"]) != size:
        raise ValueError(f"--controller {source}: {on}, it expects observations of size {meta['obs_size']}, task "
                         f"'{task}' gives {size}" + (f"; use --task {trained}" if trained else ""))
    if trained and trained != task:
        print(f"warning: --controller {source} was trained on '{trained}', recording it on '{task}'", file=sys.stderr)


COMMANDS = {"list": _list, "info": _info, "record": _record, "recover": _recover, "import": _import, "export": _export,
            "split": _split, "merge": _merge, "replay": _replay}
