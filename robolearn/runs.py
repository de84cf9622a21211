"""A run's folder: where runs are, the files a runner keeps there besides its checkpoints (config, failure),
how far a run trained and what state it is in, and its controller read back.

Each run is self-contained::

    runs/<name>/<time>/
        config.yaml          resolved config (what `robolearn eval <run>` rebuilds from)
        config.superseded-<n>.yaml  what a resume with changed settings replaced
        metrics.jsonl        one line per iteration
        checkpoints/latest.pt  (+ replay.pt for off-policy runs), written atomically
        export/controller.{pt,onnx,json}
        eval.json, video.mp4, wandb/
        run.lock             while a process trains it (robolearn/run_lock.py): a second one is refused
        failed.txt           why it stopped, where an error stopped it

The runners (``robolearn/runner.py`` and the offline ones) write it, its config and failure through this
module; ``eval``, ``play``, ``export``, ``list``, ``deploy`` and ``robolearn.load_controller`` read it here.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import json
import os
import re
import traceback
import warnings
import zipfile
from datetime import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from robolearn import distributed
from robolearn.caller import outside_us
from robolearn.checkpoint import (CheckpointError, ShapeMismatch, atomic_write_bytes, changed_activations,
                                  check_compatible, load_agent_state, load_checkpoint, settings_said,
                                  unchangeable_on_resume)
from robolearn.config import (ConfigError, EnvConfig, LoggingConfig, TrainConfig, flat_keys, is_run_folder,
                              load_run_config, read_yaml, run_config_path, to_dict, torch_settings_kept)
from robolearn.export import FORMATS, ExportedController, export_controller, task_meta
from robolearn.interfaces import Agent, Controller, VecEnv
from robolearn.listing import few
from robolearn.logger import originals_wandb, read_metrics, wandb_sessions
from robolearn.recording import unique_directory
from robolearn.registry import at_trained_width, make_agent, make_env, resolve_backend
from robolearn.run_lock import holder
from robolearn.shell import shell, train_anew


def new_run_dir(cfg: TrainConfig) -> Path:
    """``<run_dir>/<run_name>/<time>``, made now; ``<time>-1``, ``-2``... when two runs start in the same second."""
    return unique_directory(Path(cfg.run_dir) / cfg.run_name / datetime.now().strftime("%Y%m%d-%H%M%S"))


def run_ended(run_dir: Path, eval_episodes: int) -> bool:
    """Whether ``run_dir``'s end (:func:`finish_run`) left its files: the export, and ``eval.json`` where the
    config asks for an evaluation (a Ctrl+C during it leaves the export alone)."""
    run_dir = Path(run_dir)
    return (run_dir / "export" / "controller.json").is_file() and (eval_episodes <= 0 or (run_dir / "eval.json").is_file())


def refuse_finished(run_dir: Path, counted: str, done: int, total: int, eval_episodes: int) -> bool:
    """A resume of a run that already reached ``runner.total_steps`` and ended (:func:`run_ended`) would
    train nothing and only rewrite its config, exports and video: refuse it, saying how to go on. One whose
    end was cut short (a Ctrl+C during the evaluation) resumes: it trains nothing and finishes. Returns whether
    it trains on (a raised budget, or an early end), whose earlier ``eval.json`` the resume sets aside once it has
    written its config (:func:`robolearn.runner.write_config_or_undo`)."""
    if done < total:  # it trains on
        return True
    if run_ended(run_dir, eval_episodes):
        more = max(2 * total, _round_up(done + max(total, 1)))  # (a budget of 0 had suggested 0 again)
        raise ConfigError(f"{run_dir}: already finished ({done:,} of runner.total_steps={total:,} {counted}) and "
                          f"exported; to train on, raise it: {shell('robolearn', 'train', '--resume', run_dir)} "
                          f"runner.total_steps={more} "
                          f"(from Python: robolearn.train(resume={str(run_dir)!r}, "
                          f"overrides={{'runner.total_steps': {more}}}))")
    return False


def set_aside_evaluation(run_dir: Path) -> None:
    """A resume that trains on: the earlier end's evaluation is of another controller, kept aside as
    ``eval.superseded.json`` so that `list` does not call the run ended, nor a resume refuse it."""
    evaluation = Path(run_dir) / "eval.json"
    if distributed.is_main() and evaluation.is_file():
        evaluation.replace(evaluation.with_name("eval.superseded.json"))


def _round_up(n: int) -> int:
    """``n`` rounded up to two significant digits: a total a person would type."""
    step = 10 ** max(0, len(str(n)) - 2)
    return -(-n // step) * step


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    atomic_write_bytes(run_dir / "config.yaml", lambda f: f.write(yaml.safe_dump(to_dict(cfg), sort_keys=False).encode()))


def find_run_dirs(root: Path) -> list[Path]:
    """The run directories under ``root`` (or ``root`` itself) at any depth: folders with a config.yaml,
    not W&B's own copies inside a run's ``wandb/``."""
    if (root / "config.yaml").is_file():
        return [root]
    return sorted(config.parent for config in root.rglob("config.yaml") if "wandb" not in config.relative_to(root).parts)


def load_agent(run_dir: Path, env: VecEnv, cfg: TrainConfig | None = None) -> Agent:
    """Rebuild the agent of ``run_dir`` from its config and latest checkpoint."""
    cfg = cfg or load_run_config(run_dir)
    if why := no_checkpoint(Path(run_dir), cfg):
        raise CheckpointError(why)
    agent = make_agent(cfg, env)
    payload = load_checkpoint(Path(run_dir) / "checkpoints" / "latest.pt")
    check_compatible(agent.state_dict(), payload["agent"])
    saved, now = (payload.get("config") or {}).get("agent") or {}, to_dict(cfg)["agent"]
    if changed := changed_activations(saved, now):  # (it had loaded, and acted through another function)
        raise CheckpointError(f"{run_dir}/config.yaml was changed since its checkpoint: "
                              f"{settings_said(changed, saved, now)} (an activation has no weights: the checkpoint's "
                              "would run through another function); put it back as the run trained")
    load_agent_state(agent, payload["agent"], saved, now,
                     f"{run_dir}/config.yaml was changed since: put those settings back as the run trained")
    if getattr(agent, "pretrains", False) and payload.get("progress", {}).get("pretrained") is False:
        agent.end_pretraining()  # saved inside its pretraining: act through the skills so far, as its export does
    return agent


def no_checkpoint(run_dir: Path, cfg: TrainConfig) -> str | None:
    """Why ``run_dir`` has no checkpoint to evaluate, film, export or record from (None when it has one):
    a run still before its first, or one that stopped before it (a bare missing file said neither)."""
    if (run_dir / "checkpoints" / "latest.pt").is_file():
        return None
    if trainer := holder(run_dir):
        return (f"{run_dir}: no checkpoint yet: the run is still training ({trainer}) and saves its first after "
                f"runner.checkpoint_every={cfg.runner.checkpoint_every} iteration(s)")
    return checkpoint_missing(run_dir)


def checkpoint_missing(run_dir: Path, none: str = "no checkpoint") -> str:
    """Why a run that nobody trains now has no ``checkpoints/latest.pt``, and what to do (``none``: how a run
    that never saved one is said, a resume's "no checkpoint to resume from")."""
    # a run's end leaves these (metrics lines alone do not: logged every iteration, saved every checkpoint_every)
    exported = (run_dir / "export" / "controller.json").is_file()
    if exported or (run_dir / "eval.json").is_file():
        still = " (its exported files still evaluate: robolearn eval RUN --exported onnx)" if exported else ""
        return (f"{run_dir}: {run_dir / 'checkpoints' / 'latest.pt'} is missing, though the run trained and ended: "
                f"restore it from a copy{still}")
    return (f"{run_dir}: {none}: the run stopped before its first one was saved; train it anew "
            f"({train_anew(run_dir)}), then remove this folder")


def saved_progress(run: Path, strict: bool = False) -> dict[str, Any]:
    """The progress in ``run``'s checkpoint, or {} where there is none or (unless ``strict``: then the
    CheckpointError) it cannot be read (a resume then says why)."""
    path = run / "checkpoints" / "latest.pt"
    if not path.is_file():
        return {}
    try:
        progress = load_checkpoint(path).get("progress")
    except (CheckpointError, PermissionError):
        if strict:
            raise
        return {}
    return progress if isinstance(progress, dict) else {}


def new_run_id() -> str:
    """A run's own id, made when it starts (random: two runs of one config, seed and second share all else) and
    kept in its checkpoints and its export's controller.json: an export copied in from another run is told
    apart from the run's own, however the folders were moved or renamed."""
    return os.urandom(8).hex()


def copied_from(run_dir: Path) -> Path | None:
    """The run that ``run_dir`` is a copy of (a run folder copied whole, which keeps its run_id): its checkpoint was
    saved in another folder that still holds a run of that id. None for a moved run (its old folder is gone, or
    holds another run), the same folder by another path (a link, a mount), and checkpoints saved before
    ``saved_at`` was kept."""
    try:
        payload = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    except CheckpointError:
        return None
    saved_at = payload.get("saved_at")
    if not isinstance(saved_at, str) or not isinstance(payload["progress"].get("run_id"), str):
        return None
    original = Path(saved_at).parent.parent
    try:
        if original.samefile(run_dir):
            return None
    except OSError:  # gone: the run was moved
        return None
    return original if saved_progress(original).get("run_id") == payload["progress"]["run_id"] else None


TRAINED_COUNTERS = ("env_steps", "updates", "pretrain_updates", "online_updates")  # online_updates: a fine-tune's


def trained_counts(progress: dict[str, Any]) -> dict[str, int]:
    """How far a run had trained, from its progress (a checkpoint's): what its export records
    (``controller.json``'s ``trained``), so that an export older than the checkpoint is told apart."""
    return {key: int(value) for key in TRAINED_COUNTERS
            if isinstance(value := progress.get(key), int) and not isinstance(value, bool) and value > 0}


def export_meta(run_dir: Path, env: EnvConfig, control_dt: float, progress: Any) -> dict[str, Any]:
    """What a run's export records beside the controller: its task (``task_meta``; automatic randomization at
    the width it reached, as the run is evaluated), the run it came from and how far that had trained
    (``progress``: a checkpoint's, as an object or a dict)."""
    progress = progress if isinstance(progress, dict) else vars(progress)
    env = at_trained_width(env, progress.get("env_adaptation"))
    run_id = {"run_id": progress["run_id"]} if isinstance(progress.get("run_id"), str) else {}  # (older checkpoints)
    return task_meta(env, control_dt) | {"run": str(Path(run_dir).resolve()), **run_id,
                                         "trained": trained_counts(progress)}


def export_behind(run_dir: Path, meta: dict[str, Any]) -> str | None:
    """Why ``run_dir``'s export (``meta``: its controller.json) is not its checkpoint's controller: another
    run's (its ``run_id`` is not the checkpoint's: copied in), an older one (a resume trained on and stopped
    before its end exported again), or one the run goes on training past (it trains now); else None."""
    saved = saved_progress(Path(run_dir))
    exported_id, own_id = meta.get("run_id"), saved.get("run_id")
    if isinstance(exported_id, str) and isinstance(own_id, str) and exported_id != own_id:
        source = f" ({meta['run']} when exported)" if isinstance(meta.get("run"), str) else ""
        return (f"{run_dir}: its export was made from another run{source}, not from this run's checkpoint (copied "
                f"in?); {shell('robolearn', 'export', run_dir)} exports this run's own controller")
    trained = meta.get("trained")
    if trainer := holder(Path(run_dir)):
        so_far = ", ".join(f"{int(count):,} {key.replace('_', ' ')}" for key, count in trained.items()) \
            if isinstance(trained, dict) and trained else "an earlier point"
        return (f"{run_dir}: still training ({trainer}); its export is of {so_far}, and the run exports again "
                f"when it ends")
    if not isinstance(trained, dict):  # exports of before this was recorded: not known
        return None
    now = trained_counts(saved)
    ahead = [f"{count:,} {key.replace('_', ' ')} (the export: {int(trained.get(key) or 0):,})"
             for key, count in now.items() if count > int(trained.get(key) or 0)]
    if not ahead:
        return None
    return (f"{run_dir}: its export is older than its checkpoint, which has trained to {', '.join(ahead)}; the run "
            f"trained on and stopped before its end exported again: {shell('robolearn', 'export', run_dir)} "
            "exports the checkpoint's controller")


def load_controller(run_dir: str | Path, env: VecEnv | None = None, exported: str | None = None,
                    cfg: TrainConfig | None = None) -> Controller | ExportedController:
    """``run_dir``'s controller, ready to ``act``: from its latest checkpoint (on ``env``'s device; without
    an env, one world of the run's task is built for the specs and closed), or with ``exported``
    (``"torchscript"`` or ``"onnx"``) its exported file, as a robot would run it (with ``env``: said where env
    steps at another rate or with other task settings than the file was trained with). It computes under the
    caller's torch settings: within :func:`run_torch_settings` under the run's, as ``robolearn eval`` does."""
    from robolearn.export import FILENAMES

    run_dir = Path(run_dir)
    if env is not None and not isinstance(env, VecEnv):  # env="cartpole" had been an AttributeError
        raise ValueError(f"env: a VecEnv (robolearn.make_env(cfg), sims.make_env(task, n)) or None; got "
                         f"{type(env).__name__} {env!r:.60}")
    if exported:
        if exported not in FILENAMES:
            raise ValueError(f"exported={exported!r}: choose one of {sorted(FILENAMES)}")
        if not (run_dir / "export").is_dir():  # export/ itself, a folder of runs, no folder: said what it is (else
            run_config_path(run_dir)           # '<it>/export/export: no exported controller; robolearn export <it>')
        controller = ExportedController(run_dir / "export" / FILENAMES[exported])
        if behind := export_behind(run_dir, controller.meta):
            warnings.warn(behind, stacklevel=2)
        if env is not None:  # the file holds no weights to fit to env: its rate and task settings are said
            from robolearn.evaluate import warn_if_trained_elsewhere

            warn_if_trained_elsewhere(controller, env)
        return controller
    cfg = cfg or load_run_config(run_dir)
    if env is None:  # one CPU world of the task, for its specs: the controller comes back on the CPU
        with make_env(dataclasses.replace(cfg.env, backend="mujoco", device="cpu"), num_envs=1) as spec_env:
            return load_agent(run_dir, spec_env, cfg).controller().eval()
    try:
        agent = load_agent(run_dir, env, cfg)
    except ShapeMismatch as error:  # the env given is another task's: say which the run learned
        if not _another_task(env, cfg.env.task):  # (the run's own env: its checkpoint is what does not fit)
            raise
        from robolearn.evaluate import unwrapped_task

        raise ShapeMismatch(f"{run_dir} trained on task {cfg.env.task!r}, the env given runs "
                            f"{type(unwrapped_task(env)).__name__} ({error}); build the run's env with "
                            "robolearn.make_env(run)") from None
    return agent.controller().to(env.device).eval()


@contextlib.contextmanager
def run_torch_settings(run_dir: str | Path) -> Iterator[None]:
    """Within the block this process computes under ``run_dir``'s torch settings (``runner.torch_threads``,
    ``runner.matmul_precision``, ``runner.flush_denormal``), as ``robolearn eval`` and ``play`` do for the whole
    command (an export traces at "highest" precision whatever the settings); the caller's come back on leaving.
    ``evaluate(load_controller(run, env), env, ...)`` alone computes under the caller's: a run trained at
    ``matmul_precision: medium`` (bf16 matmuls on CPUs with AMX or AVX512-BF16, TF32 on NVIDIA GPUs) then gives other
    returns than ``robolearn eval``; within this block the same ones."""
    cfg = load_run_config(run_dir)  # (a path that is no run: said before anything changes)
    with torch_settings_kept():
        cfg.runner.apply_torch_settings()
        yield


def _another_task(env: VecEnv, task: str) -> bool:
    """Whether ``env`` steps a task of another class than ``task`` builds (False where that cannot be told)."""
    import sims
    from robolearn.evaluate import unwrapped_task

    try:
        builder = sims.task_builder(task)
    except (ValueError, ImportError):
        return False
    stepped = unwrapped_task(env)
    return isinstance(builder, type) and stepped is not None and not isinstance(stepped, builder)


def export_run(run_dir: str | Path, formats: tuple[str, ...] | None = FORMATS, out: str | Path | None = None,
               overwrite: bool = False) -> dict[str, Path]:
    """``robolearn export RUN``: ``run_dir``'s latest checkpoint exported (``formats``, default TorchScript and ONNX;
    None: the default, as out=None is) with the ``controller.json`` that deploy and ``eval --exported`` need (the
    task, its settings and rate, how far the run trained), into ``out`` (default ``<run>/export``); returns the paths,
    as ``RunResult.exported``. A file of a format left out is removed from ``out`` (it would be older than the json
    beside it); another run's export in ``out`` is replaced only with ``overwrite``. A run's folder (``out=run_dir``,
    or another run's) is refused: the files would lie among its config.yaml and checkpoints, where nothing looks for
    them (``<run>/export``)."""
    run_dir = Path(run_dir)
    if isinstance(formats, str):  # export_run(run, "onnx") would be read letter by letter
        formats = (formats,)
    formats = FORMATS if formats is None else formats  # (had been "'NoneType' object is not iterable")
    if out is not None and Path(out).suffix in (".pt", ".onnx", ".json"):
        raise ValueError(f"--out {out}: give a directory; the export writes controller.pt, controller.onnx "
                         "and controller.json into it (their names are fixed: deploy and eval look for them)")
    out = Path(out) if out is not None else run_dir / "export"
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out}: a file; give a directory for the exported files")
    if (same := out.resolve() == run_dir.resolve()) or is_run_folder(out):  # (it had written them there)
        whose = "the run's own folder" if same else "another run's folder"
        raise ValueError(f"--out {out}: {whose}, where the exported files would lie among its config.yaml and "
                         f"checkpoints; the run's export goes to {run_dir / 'export'} (the default, without --out), "
                         "or give a folder of their own")
    own = out.resolve() == (run_dir / "export").resolve()
    if (out / "controller.json").is_file() and not own and not overwrite:  # another run's is not replaced unasked
        try:
            meta = json.loads((out / "controller.json").read_text())
            source, source_id = meta.get("run"), meta.get("run_id")
        except (OSError, ValueError, AttributeError):
            source = source_id = None
        # this run's own earlier export, from its folder, or from where it was before it moved (its id, and no run
        # left there: a copy of a run keeps the id, and its export is not the original's to replace unasked)
        moved = (isinstance(source, str) and isinstance(source_id, str) and not Path(source).exists()
                 and source_id == saved_progress(run_dir).get("run_id"))
        if source != str(run_dir.resolve()) and not moved:
            raise FileExistsError(f"--out {out}: holds the export of {'run ' + source if source else 'another run'}; "
                                  "pass --overwrite (overwrite=True) to replace it, or give a new directory")
    cfg = load_run_config(run_dir)
    cfg.env = trained_env_config(run_dir, cfg)
    with make_env(cfg.env, num_envs=1) as env:
        controller = load_agent(run_dir, env, cfg).controller()
        return export_controller(controller, out, tuple(formats),
                                 extra=export_meta(run_dir, cfg.env, env.control_dt, saved_progress(run_dir)))


def trained_env_config(run_dir: str | Path, cfg: TrainConfig) -> EnvConfig:
    """``cfg.env`` as ``run_dir``'s latest checkpoint trained on it: automatic randomization at the width it
    reached (``at_trained_width``), which a new env would restart at 0; any other env config as it is. A run
    trained on a GPU is evaluated, filmed and exported on the CPU of a machine without one (said once)."""
    env = on_this_machine(run_dir, cfg.env)
    randomization = env.randomization or {}
    path = Path(run_dir) / "checkpoints" / "latest.pt"
    if not randomization.get("auto") or not path.is_file():
        return env
    return at_trained_width(env, load_checkpoint(path).get("progress", {}).get("env_adaptation"))


def on_this_machine(run_dir: str | Path, env: EnvConfig) -> EnvConfig:
    """``env`` moved to the CPU where it asks for CUDA and this machine has none: the same task and model on
    CPU MuJoCo (a warp run's physics within the backends' stated tolerance), so that a GPU run can be looked at
    anywhere. Training decides for itself (``resolve_backend``: warp falls back, which the run's config then
    records; MuJoCo asked to run on a missing GPU is refused)."""
    import torch

    import sims

    if not env.device.startswith("cuda") or torch.cuda.is_available():
        return env
    ours = not env.task.startswith((sims.GYM_PREFIX, sims.MJLAB_PREFIX))
    moved = dataclasses.replace(env, device="cpu", backend="mujoco" if ours else env.backend)
    warnings.warn(f"{run_dir} trained on backend={env.backend} device={env.device}; no CUDA GPU here: its env "
                  f"runs on backend={moved.backend} device=cpu", stacklevel=outside_us())
    return moved


def config_changes(before: dict[str, Any], after: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    """The settings (flat keys) in which ``after`` differs from ``before``, said ``key old -> new`` (eight at
    most), leaving out keys that start with one of ``skip``; "" when none differ."""
    changed = [key for key in sorted(set(before) | set(after))
               if before.get(key) != after.get(key) and not key.startswith(skip)]
    return few([f"{key} {before.get(key)!r} -> {after.get(key)!r}" for key in changed], 8) if changed else ""


def warn_if_config_differs(cfg: TrainConfig, run: Path) -> None:
    """Say each setting in which ``cfg`` differs from ``run``'s own ``config.yaml`` (a resume from Python given
    a freshly loaded config: the run's seed, name and overrides would be replaced without a word)."""
    if not (run / "config.yaml").is_file():
        return  # the runner says what is missing
    resolved = copy.deepcopy(cfg.env)  # the run recorded what ran: warp on a missing GPU is MuJoCo on the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback is said when the run is built
        resolve_backend(resolved)
    own, given = flat_keys(to_dict(load_run_config(run))), flat_keys(to_dict(dataclasses.replace(cfg, env=resolved)))
    if said := config_changes(own, given):
        warnings.warn(f"resuming {run} with a config that differs from its own config.yaml: {said}; "
                      "train(resume=run, overrides={...}) goes on with the run's own settings", stacklevel=3)


NOT_TRAINING = ("runner.total_steps", "runner.max_minutes", "agent.total_updates", "runner.eval_episodes",
                "runner.video_seconds", "runner.checkpoint_every", "runner.log_every", "logging.", "run_dir", "name")
"""Settings a resume may change without changing how the steps so far trained: the budget (raised to train on;
IQL's schedule span follows it), the end's evaluation and film, how often it saves and logs, where and how (``name``:
a new run's folder, and W&B's name; a resumed run stays in its folder)."""


def take_checkpoints_settings(run_dir: Path, cfg: TrainConfig, warn: bool = True) -> TrainConfig:
    """``cfg`` with the checkpoint's value of each agent setting a resume may not change
    (:func:`robolearn.checkpoint.unchangeable_on_resume`) where ``cfg`` has the value ``run_dir``'s config.yaml
    records and the checkpoint another: a resume that changed one (which older versions let through) and was stopped
    before it saved had recorded it, and every plain resume was then refused as if it had been given ('resume
    without that override'). Said where ``warn``; the resume's config.yaml then records the checkpoint's value."""
    from policies import agent_entry

    try:
        saved = load_checkpoint(run_dir / "checkpoints" / "latest.pt")["config"].get("agent") or {}
        recorded = read_yaml(run_dir / "config.yaml").get("agent") or {}
    except (CheckpointError, OSError, ValueError, AttributeError):
        return cfg  # the resume says what is wrong with them
    now = to_dict(cfg).get("agent") or {}
    stale = [key for key in unchangeable_on_resume(agent_entry(cfg.algo)[1], cfg.algo, saved, now)
             if key in recorded and recorded[key] == now[key]]
    if not stale or not dataclasses.is_dataclass(cfg.agent):  # (a config of plain data: validated later, as given)
        return cfg
    if warn:
        warnings.warn(f"{run_dir / 'config.yaml'} records {', '.join(f'agent.{key}={now[key]!r}' for key in stale)}, "
                      f"its checkpoint {', '.join(f'agent.{key}={saved[key]!r}' for key in stale)} (a resume that "
                      "changed it was stopped before it saved; a resume may not change it): the resume goes on with "
                      "the checkpoint's", stacklevel=3)
    return dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, **{key: saved[key] for key in stale}))


def keep_replaced_config(run_dir: Path, cfg: TrainConfig) -> None:
    """A resume whose training settings differ from the run's ``config.yaml`` (:data:`NOT_TRAINING` aside)
    says which, and keeps that config as ``config.superseded-<n>.yaml``: the steps so far trained with it. A setting
    config.yaml records but its checkpoint does not, which the resume puts back to the checkpoint's
    (:func:`take_checkpoints_settings`), is none: no step trained with it."""
    path = run_dir / "config.yaml"
    try:
        before = flat_keys(read_yaml(path))
    except (OSError, ValueError):
        return  # the resume was built from it, so it reads; if not, there is nothing to compare
    after = flat_keys(to_dict(cfg))
    if not (said := config_changes(before, after, NOT_TRAINING)):
        return
    try:
        trained = flat_keys(load_checkpoint(run_dir / "checkpoints" / "latest.pt")["config"])
    except CheckpointError:
        trained = {}
    # (key by key: a skip of keys is by prefix, and agent.target_noise's had hidden agent.target_noise_clip's change)
    trained_with = {key: trained[key] if key in trained and trained[key] == after.get(key) else value
                    for key, value in before.items()}
    if not (said := config_changes(trained_with, after, NOT_TRAINING)):
        return
    earlier = [path.with_name(f"config.superseded-{n}.yaml") for n in itertools.takewhile(
        lambda n: path.with_name(f"config.superseded-{n}.yaml").exists(), itertools.count(1))]
    if earlier and earlier[-1].read_bytes() == path.read_bytes():
        kept = earlier[-1]  # by a resume killed before it replaced the config: not kept twice
    else:
        kept = path.with_name(f"config.superseded-{len(earlier) + 1}.yaml")
        atomic_write_bytes(kept, lambda f: f.write(path.read_bytes()))
    print(f"resumed with changed settings: {said}; the steps so far trained with the earlier ones, whose config "
          f"is kept as {kept}")


def refuse_task_change(run_dir: Path, cfg: TrainConfig) -> None:
    """A resume goes on with its run's task: another of the same shapes had trained on, its curves, recent returns
    and checkpoint mixing two tasks (only a change of shapes had been refused). Refused before anything is built."""
    try:
        trained = (read_yaml(run_dir / "config.yaml").get("env") or {}).get("task")
    except (OSError, ValueError, AttributeError):
        return  # the resume says what is wrong with its config
    if trained is not None and trained != cfg.env.task:
        raise ConfigError(f"env.task: {run_dir} trained on '{trained}'; a resume goes on with its task, not "
                          f"'{cfg.env.task}': train a new run for that task")


WANDB_IDENTITY = ("project", "group")  # what a W&B run is filed under, besides its id


def refuse_wandb_move(run_dir: Path, cfg: TrainConfig) -> None:
    """A resume logs on in its run's W&B run (the id its first session took: ``robolearn.logger._wandb_id``), under
    that run's project and group. Another ``logging.project`` had started a W&B run of that id in the other project
    (`wandb sync` splitting the run's history over two projects); another group would refile the run, or part of
    it. Refused, before anything is built, once the run has logged to W&B (not a run trained with it disabled).
    A copy whose W&B sessions are its original's alone may change them: it sets those aside and starts a W&B run of
    its own (:func:`robolearn.logger.set_aside_wandb`)."""
    if not (sessions := wandb_sessions(run_dir)):
        return
    try:
        trained = read_yaml(run_dir / "config.yaml").get("logging") or {}
    except (OSError, ValueError, AttributeError):
        return  # the resume says what is wrong with its config
    changed = [(key, before, getattr(cfg.logging, key)) for key in WANDB_IDENTITY
               if (before := trained.get(key, getattr(LoggingConfig(), key))) != getattr(cfg.logging, key)]
    if not changed or len(originals_wandb(run_dir, copied_from(run_dir))) == len(sessions):
        return  # (a copy whose sessions are all its original's: set aside, it starts a W&B run of its own)
    key, before, now = changed[0]
    filed = f"{key} {before!r}" if before else f"no {key}"
    raise ConfigError(f"logging.{key}: {run_dir} logs to W&B with {filed} ({run_dir / 'wandb'}); a resume goes on "
                      f"in that W&B run, so it keeps its {key}, not {now!r}: drop logging.{key}=, or train a new run "
                      "with it")


def refuse_other_pretraining(run_dir: Path, asked: int, done: int, past: bool, phase: str = "pretraining",
                             new_run: str = "pretrain a new run") -> None:
    """A resume goes on from the ``done`` pretraining updates its checkpoint holds (a skill run's pretraining, a
    fine-tune's offline ``phase``): ``agent.pretrain_updates`` ``asked`` below them is refused (a resume does not
    undo updates), and once ``past`` the phase so is any other count (a resume does not go back to it). Either had
    gone on as trained while config.yaml recorded the new count, and a skill run's online W&B steps, which start
    after that count, moved by the difference. Refused, naming the count to resume with."""
    if done > asked or (past and done != asked):
        why = f"is past its {phase}, which a resume does not go back to" if past else "a resume does not undo updates"
        raise ConfigError(f"agent.pretrain_updates={asked}: {run_dir} has pretrained {done:,} updates and {why}; "
                          f"resume with agent.pretrain_updates={done}{'' if past else ' or more'} (or without the "
                          f"override), or {new_run}")


def warn_of_pretraining_changes(run_dir: Path, cfg: TrainConfig) -> None:
    """A resume past its pretraining phase reads no dataset and pretrains no more: a changed ``dataset`` or
    ``agent.pretrain_*`` setting is said to change nothing (it had been listed among the changed settings as if it
    took effect); another ``agent.pretrain_updates`` is :func:`refuse_other_pretraining`'s, but for a run that took
    another's skills (``agent.skills_from``), which pretrained none."""
    try:
        before = flat_keys(read_yaml(run_dir / "config.yaml"))
    except (OSError, ValueError):
        return
    now = flat_keys(to_dict(cfg))
    moot = [key for key in sorted(set(before) | set(now)) if (key == "dataset" or key.startswith("agent.pretrain_"))
            and before.get(key) != now.get(key)]
    if moot:
        warnings.warn(f"{', '.join(moot)}: {run_dir} is past its pretraining, whose skills its checkpoint holds; the "
                      "resume reads no dataset and pretrains no more, so these change nothing (pretrain again in a "
                      "new run)", stacklevel=3)


FAILURE_FILE = "failed.txt"  # why a run stopped on an error: `robolearn list` shows its first line


def check_same_folder(run_dir: Path, started: os.stat_result | None) -> None:
    """Refuse to write into ``run_dir`` once it was moved or deleted while the run trained (``started``: its
    ``os.stat`` when the run wrote its config): a checkpoint written there would make a new folder of that name holding no config
    and no metrics, and the run would end as if nothing had happened."""
    if started is None:
        return
    try:
        same = os.path.samestat(started, os.stat(run_dir))
    except FileNotFoundError:
        same = False
    if not same:
        raise FileNotFoundError(f"{run_dir} was moved or deleted while the run trained: stopped before writing into "
                                "a new folder of that name; a moved run resumes where it went (robolearn train "
                                "--resume <its path>)")


def record_failure(run_dir: Path, err: BaseException) -> None:
    """Write ``err`` (its one-line summary, then the traceback) to ``run_dir/failed.txt``, so that a run
    that crashed is told apart from one that was killed. Never raises: the error itself matters more."""
    summary = " ".join(f"{type(err).__name__}: {err}".split())
    # without terminal colours (torch.export's errors carry them): the file and `robolearn list` are read as text
    text = re.sub(r"\x1b\[[0-9;]*m", "", summary + "\n\n" + "".join(traceback.format_exception(err)))
    if not Path(run_dir).is_dir():  # moved or deleted: a new folder holding only failed.txt would mislead
        return
    try:
        atomic_write_bytes(Path(run_dir) / FAILURE_FILE, lambda f: f.write(text.encode()))
    except OSError:  # a full disk, a removed folder
        pass


def run_status(run: Path) -> str:
    """``done``, or where an unfinished run stands (from its last metrics line and its config's budget)
    and how to go on. An export alone does not make a run done: ``robolearn export`` exports unfinished ones."""
    exported = (run / "export" / "controller.json").is_file()
    failed = failure_line(run)
    if not (run / "checkpoints" / "latest.pt").is_file():
        if exported:
            return "exported, no checkpoint"
        return f"{failed or 'incomplete'}: no checkpoint (nothing to resume)"
    try:
        raw = read_yaml(run / "config.yaml")
    except (ValueError, OSError) as err:  # (ConfigError is a ValueError) a damaged file: said, no resume offered
        said = " ".join(str(err).replace(f"{run / 'config.yaml'}: ", "").split())
        return f"config.yaml unreadable ({said[:120]})"
    try:
        last = read_metrics(run)[-1]
    except (IndexError, ValueError):  # no line yet, or a line cut short
        last = {}
    if not isinstance(raw, dict):
        return "config.yaml unreadable (its top level is not a mapping of settings)"
    resume = shell("robolearn", "train", "--resume", run)
    agent, runner = raw.get("agent") or {}, raw.get("runner") or {}
    ended = run_ended(run, runner.get("eval_episodes") or 0)
    if not last and ended:  # its end left its files (runner.total_steps=0, or metrics.jsonl lost): as resume says
        return "done (no metrics lines)"
    # Where a resume goes on from (the metrics may run past it: a kill). Not read for a run whose end
    # left its files: loading every run's checkpoint would make list slow.
    checkpoint, trains_on = run / "checkpoints" / "latest.pt", f"{resume} trains on"
    try:
        saved = {} if ended else saved_progress(run, strict=True)
        if not os.access(checkpoint, os.R_OK):  # (is_zipfile would read a denied file as no zip)
            raise PermissionError("permission denied: fix its permissions")
        if not zipfile.is_zipfile(checkpoint):  # (cheap: its end record only) cut short, or not torch.save's
            raise CheckpointError("cut short or not a checkpoint")
    except (CheckpointError, PermissionError) as err:  # a resume would be refused: not offered
        saved, said = {}, str(err).replace(f"{checkpoint}: ", "")
        resume = trains_on = f"its checkpoints/latest.pt does not load, so it cannot resume ({said[:160]})"
    if not last:  # (a second Ctrl+C saves mid-iteration: say how far its checkpoint holds)
        counts = ", ".join(f"{value:,} {key}" for key, value in trained_counts(saved).items())
        return f"{failed or 'incomplete'}: {f'saved at {counts}, ' if counts else ''}stopped before its first " \
               f"logged iteration; {resume}"
    phase = last.get("phase")
    if saved.get("phase") == "online":  # a fine-tune past its offline phase
        phase = "online"
    elif phase == "pretrain" and saved.get("pretrained"):  # past the pretraining phase, online not logged yet
        phase = None
    if phase in ("pretrain", "offline"):  # skill pretraining, or a fine-tune's offline phase
        counter, total = ("pretrain_updates" if phase == "pretrain" else "updates"), agent.get("pretrain_updates")
    else:
        counter = "env_steps" if "env_steps" in last or phase == "online" else "updates"
        total = runner.get("total_steps")
    logged = last.get(counter, 0) if last.get("phase", phase) == phase else 0
    done = int(saved.get(counter, logged))  # (a logged count may read back as a float: 1000.0)
    pretrain_only = phase == "offline" and runner.get("total_steps") == 0  # a fine-tune given no online steps
    if (phase not in ("pretrain", "offline") or pretrain_only) and isinstance(total, int) and done >= total:
        # Trained to its budget; stopped in the export, evaluation or video that end a run, if not exported.
        if ended:
            return "done"
        evaluated = (run / "eval.json").is_file() or not runner.get("eval_episodes")
        missing = " or ".join(what for what, there in (("exported", exported), ("evaluated", evaluated)) if not there)
        return f"{failed + ': ' if failed else ''}trained ({done:,} {counter}), not yet {missing}; {resume}"
    where = f"{phase + ' ' if phase else ''}{done:,} of {total:,} {counter}" if isinstance(total, int) and total else \
        f"{done:,} {counter}"
    if ended and (run / "eval.json").is_file() and not failed:  # its end ran (export, evaluation) before the budget
        return f"ended early at {where} (a stop callback or runner.max_minutes); {trains_on}"
    if logged > done:
        where += f" saved ({logged:,} logged past the checkpoint: a resume does them again)"
    return f"{failed or 'incomplete'}: {where}; {resume}"


def failure_line(run: Path, width: int = 100) -> str:
    """``failed (<error>)`` from the first line of a run's ``failed.txt`` (cut to ``width``), or ""."""
    try:
        summary = (run / FAILURE_FILE).read_text(errors="replace").partition("\n")[0].strip()
    except OSError:
        return ""
    if len(summary) > width:
        summary = summary[:width - 3] + "..."
    return f"failed ({summary}; {run / FAILURE_FILE})"
