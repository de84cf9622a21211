"""robolearn: batched simulation, learning algorithms and robot drivers behind one Controller interface.

Start with :mod:`robolearn.interfaces`. Python entry points::

    from robolearn import export_run, load_config, load_controller, make_env, train
    result = train(load_config("ppo_cartpole", ["runner.total_steps=200000"]))
    controller = load_controller(result.run_dir)          # or exported="onnx": the file a robot runs
    export_run(result.run_dir)                            # `robolearn export RUN`: export/ from the latest checkpoint
    env = make_env(result.run_dir, num_envs=4)            # the run's own env, its settings included
    train(resume=result.run_dir, overrides={"runner.total_steps": 400_000})   # go on
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING


def pick_offscreen_gl() -> None:
    """MuJoCo picks its OpenGL backend when first imported. Without a display, use OSMesa (software, Debian's
    libosmesa6) unless the user chose one (e.g. egl on a GPU). Called on import, here and by ``sims`` before it
    imports mujoco."""
    global GL_PICKED_TOO_LATE
    if sys.platform.startswith("linux") and "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        GL_PICKED_TOO_LATE = "mujoco" in sys.modules  # a script's `import mujoco` came first: it took GLFW
        os.environ["MUJOCO_GL"] = "osmesa"
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
        # Gymnasium's classic-control renderer (pygame) films offscreen; without a display SDL would print
        # "XDG_RUNTIME_DIR is invalid or not set", which reads like one of ours
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


GL_PICKED_TOO_LATE = False
"""Whether mujoco was imported (and chose GLFW, which needs a display) before :func:`pick_offscreen_gl` chose OSMesa
for it: its renderer then fails, which :class:`sims.backend.FrameRenderer` explains."""

pick_offscreen_gl()

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable

    from robolearn.config import TrainConfig, load_config
    from robolearn.export import ExportedController
    from robolearn.interfaces import Agent, Controller, Obs, Step, VecEnv
    from robolearn.runner import RunResult
    from robolearn.runs import export_run

_LAZY = {"load_config": "robolearn.config", "export_run": "robolearn.runs",
         **{name: "robolearn.interfaces" for name in ("Agent", "Controller", "Obs", "Step", "VecEnv")}}
"""Names imported on first use (PEP 562), so that importing the package does not import torch: the
``robolearn`` command can then say "interrupted" to a Ctrl+C during its first second (robolearn.entry)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'robolearn' has no attribute '{name}'")


def __dir__() -> list[str]:
    """The lazy names too, so that tab completion and ``dir(robolearn)`` show them."""
    return sorted(set(globals()) | set(_LAZY))


def train(cfg: TrainConfig | None = None, resume: str | Path | None = None,
          stop: Callable[[dict[str, float]], bool] | None = None, overrides: Any = (),
          fresh_replay: bool = False) -> RunResult:
    """Train ``cfg`` until ``runner.total_steps`` or until ``stop(metrics)`` is true; export, evaluate and
    film it. See :func:`robolearn.runner.train` (imported lazily: it pulls in sims and policies).

    ``resume``: a run directory to go on with, as ``robolearn train --resume RUN [key=value ...]`` does:
    ``train(resume=run)`` takes the run's own ``config.yaml`` with ``overrides`` applied
    (``overrides={"runner.total_steps": 2_000_000}``); a ``cfg`` given instead is used as it is, and
    each setting in which it differs from the run's is said.

    ``stop`` gets each iteration's metrics as its ``metrics.jsonl`` line holds them, less the clock's (``time``
    and the rate: ``fps``, ``updates_per_s``): ``env_steps`` (offline runs: ``updates``),
    ``iteration``, losses, and ``return`` / ``success_rate`` only once episodes have ended (offline runs:
    ``eval/return`` at an evaluation), so read those with ``.get``: ``stop=lambda m: m.get("return", -1e9) > 150``.

    A Ctrl+C (or a kill's SIGTERM, a closed terminal's SIGHUP) while it trains raises no ``KeyboardInterrupt``: the
    run is checkpointed, the line to resume it printed, and ``train`` returns with ``result.interrupted`` True
    (``result.trained`` says how far; nothing exported or evaluated), so a script that goes on after it (several
    runs in a loop) checks that first. A second one while that checkpoint is written, or one while the run is built
    or after its training ended (exporting, evaluating, filming), raises ``KeyboardInterrupt``.

    ``fresh_replay`` (with ``resume``, as ``--fresh-replay``): an off-policy run whose ``checkpoints/replay.pt`` is
    lost or damaged goes on with an empty replay buffer, which the agent's own actions refill (``runner.random_steps``
    env steps; a fine-tune's ``agent.warmup_steps``) before updates go on."""
    from pathlib import Path

    from robolearn.config import TrainConfig, load_config, refuse_algo_change, refuse_none_sections, run_config_path
    from robolearn.runner import train as _train
    from robolearn.runs import take_checkpoints_settings, warn_if_config_differs

    if cfg is None:
        if resume is None:
            raise TypeError("train() needs a config, load_config(...), or resume=<run directory>")
        refuse_algo_change(resume, overrides)
        cfg = load_config(run_config_path(resume), overrides)
    elif not isinstance(cfg, TrainConfig):  # a name or a dict had failed five frames down on `cfg.algo`
        how = f"load_config({cfg!r})" if isinstance(cfg, (str, Path)) else \
            "robolearn.config.config_from_dict(...)" if isinstance(cfg, dict) else "load_config(name)"
        raise TypeError(f"train() takes a TrainConfig, got {type(cfg).__name__}: give it {how} "
                        "(or resume=<run directory>)")
    elif overrides:
        raise TypeError("overrides go with resume= alone; apply them to a config with load_config(name, overrides)")
    elif resume is not None:
        refuse_none_sections(cfg, resume=True)  # (before the warning, which would list every setting as changed)
        warn_if_config_differs(cfg, Path(resume))
    if resume is not None:
        cfg = take_checkpoints_settings(Path(resume), cfg)
    return _train(cfg, resume=Path(resume) if resume is not None else None, stop=stop, fresh_replay=fresh_replay)


def make_env(run: str | Path | TrainConfig, num_envs: int | None = None, seed: int | None = None,
             nominal: bool = False) -> VecEnv:
    """The env a run trained on (a run directory, or a config from :func:`load_config`): its task settings
    (``env.kwargs``), randomization (for a run directory, automatic randomization at the width it reached), delays
    and backend,
    as ``robolearn eval`` builds it. ``sims.make_env(task)`` builds the task's defaults instead. ``num_envs``:
    default the config's. ``nominal``: without its domain randomization (its delays kept), as ``eval --nominal``."""
    import dataclasses
    import os
    from pathlib import Path

    from robolearn.config import TrainConfig, load_run_config
    from robolearn.registry import make_env as _make_env
    from robolearn.runs import trained_env_config

    def build(env: Any) -> VecEnv:
        return _make_env(dataclasses.replace(env, randomization={}) if nominal else env, num_envs=num_envs, seed=seed)

    if isinstance(run, TrainConfig):
        return build(run.env)
    if not isinstance(run, (str, os.PathLike)):  # (pathlib's "expected str, bytes or os.PathLike object, not int")
        raise TypeError(f"make_env(run): a run directory or a config from load_config; got {type(run).__name__} "
                        f"{run!r:.60} (sims.make_env(task, num_envs) builds a task with its defaults)")
    if isinstance(run, str) and not Path(run).exists():
        from sims import TASKS

        if run in TASKS:  # (the call said whole: sims.make_env takes num_envs too, which it had left out)
            worlds = "num_envs" if num_envs is None else f"num_envs={num_envs!r}"
            raise FileNotFoundError(f"{run}: no such run; '{run}' is a task: sims.make_env({run!r}, {worlds}) builds "
                                    "it with its defaults, robolearn.make_env(load_config(name)) as a config sets it")
    return build(trained_env_config(run, load_run_config(run)))


def load_controller(run_dir: str | Path, env: VecEnv | None = None,
                    exported: str | None = None) -> Controller | ExportedController:
    """A run's controller, ready to ``act`` (``reset(mask)`` where episodes end): the trained ``torch.nn.Module``
    from the latest checkpoint, or with ``exported`` (``"torchscript"``, ``"onnx"``) the exported file as a robot
    runs it; see :func:`robolearn.runs.load_controller`. It computes under the script's torch settings: for
    ``robolearn eval``'s numbers, act within :func:`robolearn.runs.run_torch_settings` (the run's threads and matmul
    precision)."""
    from robolearn.runs import load_controller as _load_controller

    return _load_controller(run_dir, env, exported)


__all__ = ["Agent", "Controller", "Obs", "Step", "VecEnv", "export_run", "load_config", "load_controller", "make_env",
           "train"]
