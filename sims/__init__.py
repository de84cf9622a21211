"""Simulators: the CPU MuJoCo backend, tasks over it, and adapters to Gymnasium.

``make_env("hopper", num_envs=1024)`` builds one of our tasks on the batched
backend; ``make_env("gym:Pendulum-v1", num_envs=8)`` wraps a Gymnasium env and
``make_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go1", num_envs=8)`` an mjlab task.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import numbers
import os
import sys
import typing
import warnings
from typing import Any, Callable

from robolearn import pick_offscreen_gl

pick_offscreen_gl()  # before mujoco, which reads MUJOCO_GL on import: OSMesa on a headless machine
import mujoco  # noqa: E402
import torch

from robolearn.caller import outside_us
from robolearn.interfaces import ContractError, VecEnv
from sims.backend import MujocoBackend
from sims.task import Task, TaskEnv, check_settings_declared, checked_seed, setting_line
from sims.tasks.ant import Ant
from sims.tasks.ant_maze import ant_maze_large, ant_maze_medium
from sims.tasks.arm_reach import ArmReach
from sims.tasks.cartpole import Cartpole
from sims.tasks.go1 import Go1Rough, Go1Velocity
from sims.tasks.half_cheetah import HalfCheetah
from sims.tasks.hopper import Hopper
from sims.tasks.kitchen import Kitchen
from sims.tasks.pendulum import Pendulum
from sims.tasks.point_maze import point_maze_large, point_maze_medium
from sims.tasks.reacher import Reacher
from sims.tasks.walker2d import Walker2d

TASKS: dict[str, Callable[..., Task]] = {  # task classes, or factories of one
    "pendulum": Pendulum,
    "cartpole": Cartpole,
    "reacher": Reacher,
    "hopper": Hopper,
    "half_cheetah": HalfCheetah,
    "walker2d": Walker2d,
    "ant": Ant,
    "arm_reach": ArmReach,
    "go1_flat": Go1Velocity,
    "go1_rough": Go1Rough,
    "point_maze_medium": point_maze_medium,
    "point_maze_large": point_maze_large,
    "ant_maze_medium": ant_maze_medium,
    "ant_maze_large": ant_maze_large,
    "kitchen": Kitchen,
}

GYM_PREFIX = "gym:"
MJLAB_PREFIX = "mjlab:"
BACKENDS = ("mujoco", "warp")
WARP_BUFFERS = ("nconmax", "njmax")
"""``env.kwargs`` that any of our tasks takes: MuJoCo Warp's contacts and constraint rows per world
(``Task.nconmax``/``njmax``), to trade memory against overflow; ``backend=mujoco`` does not use them."""


MAX_ENVS = 2**31 - 1
"""The most worlds one env may have: MuJoCo's batch counts them in a C int."""


def make_env(
    task: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    num_threads: int | None = None,
    seed: int | None = None,
    randomization: dict[str, Any] | None = None,
    delay: dict[str, Any] | None = None,
    backend: str = "mujoco",
    **task_kwargs: Any,
) -> VecEnv:
    """A VecEnv of ``num_envs`` copies of ``task``.

    ``task`` is a name in :data:`TASKS` or ``module:Class``, a task of one's own
    (``task_kwargs`` go to its constructor; physics runs on ``num_threads``
    threads, all cores by default), ``gym:<Gymnasium id>`` (``task_kwargs`` go
    to ``gymnasium.make``; the envs step one after another in this thread) or
    ``mjlab:<task id>`` (an mjlab task on MuJoCo Warp). ``randomization``
    (``sims/randomization.py``) wraps our tasks in domain randomization, and
    ``delay`` (``sims/delay.py``) any of them in a fixed observation delay and
    action latency.
    A run's own env, with its settings: :func:`robolearn.make_env`.

    ``backend`` is ``mujoco`` (CPU threads) or ``warp`` (MuJoCo Warp on
    ``device``: a CUDA GPU, or Warp's slow CPU device for tests); ``warp`` on a
    GPU that is not there falls back to ``mujoco`` on the CPU with a warning,
    while ``device="cuda"`` with ``mujoco`` (or a ``gym:`` or ``mjlab:`` env) is
    refused there. Actions to ``step`` may be tensors, numpy arrays or lists.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or not 1 <= num_envs <= MAX_ENVS:
        # not MuJoCo's own words (above a C int: "incompatible constructor arguments" and a traceback)
        raise ValueError(f"num_envs: a whole number of worlds, from 1 to {MAX_ENVS} (env.num_envs, eval's --episodes, "
                         f"dataset record's --num-envs); got {num_envs!r}")
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral)
                                    or num_threads < 0):  # (-1 had run on all cores, 2.5 failed in MuJoCo's words)
        raise ValueError(f"num_threads: a whole number of physics threads, 0 or None for all the cores "
                         f"(env.num_threads); got {num_threads!r}")
    seed = checked_seed(seed)  # numpy integers too (np.arange's): torch's generators take Python ints only
    names = f"{', '.join(sorted(TASKS))}, module:Class, gym:<id>, mjlab:<id>"
    if isinstance(task, os.PathLike):
        raise ValueError(_path_refusal(task, names))
    if not isinstance(task, str):
        raise ValueError(f"task: a name ({names}); got {type(task).__name__} {task!r:.60}")
    if delay:
        from sims.delay import Delay, DelayedEnv

        inner = make_env(task, num_envs, device, num_threads, seed, randomization, backend=backend, **task_kwargs)
        return _wrapped(inner, DelayedEnv, Delay, delay, "env.delay", seed)
    if task.startswith(GYM_PREFIX):
        from sims.adapters.gymnasium import GymVecEnv

        if randomization:
            raise ValueError("env.randomization needs one of our tasks; Gymnasium envs cannot be randomized here "
                             "(a config that randomizes, run on a gym: task: add the override env.randomization={})")
        if backend != "mujoco":
            raise ValueError(f"env.backend={backend} needs one of our tasks; Gymnasium envs bring their own simulator")
        device = resolve_backend("mujoco", device)[1]  # a missing GPU is refused here, not at the first reset
        return GymVecEnv(task[len(GYM_PREFIX):], num_envs, device=device, seed=seed, **task_kwargs)
    if task.startswith(MJLAB_PREFIX):
        from sims.adapters.mjlab import MjlabVecEnv

        if randomization:
            raise ValueError("env.randomization needs one of our tasks; mjlab tasks randomize through their own events "
                             "(a config that randomizes, such as ppo_go1_flat, on an mjlab: task: add the override "
                             "env.randomization={})")
        _check_mjlab_settings(task_kwargs)
        device = resolve_backend("mujoco", device)[1]
        return MjlabVecEnv(task[len(MJLAB_PREFIX):], num_envs, device=device, seed=seed, **task_kwargs)
    buffers = {key: task_kwargs.pop(key) for key in WARP_BUFFERS if key in task_kwargs}
    spec = _build_task(task, task_kwargs)
    for key, value in buffers.items():  # every task takes them; the CPU backend sizes its buffers itself
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{_for_caller(f'env.kwargs.{key}')}: a positive whole number (per world), or null for "
                             f"MuJoCo Warp's own estimate; got {value!r}")
        setattr(spec, key, value)
    env = TaskEnv(spec, make_backend(backend, spec, num_envs, device, int(num_threads or 0) or None), seed=seed)
    if randomization:
        from sims.randomization import Randomization, RandomizedEnv

        env = _wrapped(env, RandomizedEnv, Randomization, randomization, "env.randomization", seed)
    return env


def _wrapped(env: VecEnv, wrapper: Callable[..., VecEnv], settings: type, given: dict[str, Any], key: str,
             seed: int | None) -> VecEnv:
    """``env`` wrapped in ``wrapper`` (RandomizedEnv for ``randomization=``, DelayedEnv for ``delay=``; ``key``: their
    config key) with ``given`` built as ``settings``. Their checks (Randomization's, Delay's, the wrappers') word a
    refusal for a config (``env.delay.obs_delay_steps``); it names the setting as the caller did
    (:func:`_for_caller`: ``delay.obs_delay_steps`` from one's own :func:`make_env` call). A refusal closes ``env``."""
    from robolearn.config import build_dataclass

    try:
        return wrapper(env, build_dataclass(settings, given, f"{key}."), seed=seed)
    except Exception as err:
        env.close()  # (built for the wrapper, it had stayed open under a caller that goes on, a sweep's)
        if not isinstance(err, ValueError):
            raise
        said = str(err)
        for config_key in ("env.randomization", "env.delay"):  # (a delay's refusal names both where they add up)
            said = said.replace(config_key, _for_caller(config_key))
        err.args = (said, *err.args[1:])
        raise


def _path_refusal(task: os.PathLike, names: str) -> str:
    """What to pass instead of the path ``task``: a run directory's env is :func:`robolearn.make_env`'s, a task
    file's class is named ``module:Class`` (``sims.make_env(result.run_dir, 4)`` had been told only of names)."""
    from pathlib import Path

    path = Path(task)
    if (path / "config.yaml").is_file():
        return (f"task: {str(path)!r} is a run directory: robolearn.make_env({str(path)!r}, num_envs) builds the env "
                f"it trained on; sims.make_env takes a task's name ({names})")
    if path.suffix == ".py":
        return (f"task: {str(path)!r} is a file: a task of your own is named by its module and class, "
                f"'{path.stem}:<its Task class>' for {path.name} (imported from the current folder or the Python path)")
    return f"task: {str(path)!r} is a path: sims.make_env takes a task's name ({names}), robolearn.make_env a run's"


def task_builder(task: str) -> Callable[..., Task]:
    """``TASKS[task]``, or for ``module:Name`` (a task of your own: a :class:`Task` subclass or a function
    returning one) ``Name`` from ``module``, imported (:func:`robolearn.plugins.import_named`: from the
    Python path or the current folder), so ``robolearn train ppo_reacher env.task=my_task:TwoLinkReach``
    runs ``my_task.py`` from here; the run's config keeps the name, so eval, play and export find it again."""
    from pathlib import Path

    from robolearn.plugins import import_named

    if task in TASKS:
        return TASKS[task]
    if ":" not in task:
        close = difflib.get_close_matches(task, TASKS, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        if task.endswith(".py"):  # a task's file: its module and class name it
            guess = f"a task of your own is named by its module and class, '{Path(task).stem}:<its Task class>'; "
        raise ValueError(f"unknown task {task!r} (env.task); {guess}known: {sorted(TASKS)}, "
                         f"'{GYM_PREFIX}<Gymnasium id>', "
                         f"'{MJLAB_PREFIX}<mjlab task id>', or 'module:Class' for a Task of your own")
    if task.partition(":")[0] in ("isaaclab", "isaacgym", "legged_gym"):  # read as a module, it would say "install"
        raise ValueError(f"env.task={task}: Isaac Lab and Isaac Gym envs have no task prefix here (installing them "
                         "would not change that): build one with its own launcher and wrap it in "
                         "sims.adapters.isaac.RslRlEnvAsVecEnv, from Python (README, 'Tasks and algorithms': Isaac Lab)")
    builder = import_named(task, "env.task")
    if not callable(builder) or (isinstance(builder, type) and not issubclass(builder, Task)):
        raise ValueError(f"env.task={task}: '{task.partition(':')[2]}' is not a sims.Task subclass "
                         "(nor a function returning one)")
    if not _task_like(builder, task.partition(":")[0]):
        # A run's config.yaml, a dataset's metadata and a controller.json name their task, and make_env calls what
        # it names with the file's env.kwargs: `os:system` with {command: ...} had run a shell command from a
        # downloaded run's config at `robolearn eval`, before "built a int, not a sims.Task" was said
        raise ValueError(f"env.task={task}: '{task.partition(':')[2]}' is not a sims.Task subclass, nor a function "
                         f"defined in {task.partition(':')[0]} itself (not the standard library's, an installed library's, "
                         "nor one it imports from elsewhere); only those are called to build a task")
    return builder


def _task_like(builder: Any, module_name: str) -> bool:
    """Whether ``builder``, named ``module_name:Name``, may be called with a config's settings: a Task subclass (or
    a partial of one), or a plain function of that module's own outside the standard library (a factory returning
    a Task). Builtins (``os:system``), functions a module re-exports (``torch:load``) and the standard library's
    (``subprocess:getoutput``, ``shutil:rmtree``) are not called."""
    if isinstance(builder, functools.partial):
        return _task_like(builder.func, module_name) and isinstance(builder.func, type)
    if isinstance(builder, type):
        return issubclass(builder, Task)
    return (inspect.isfunction(builder) and getattr(builder, "__module__", None) == module_name
            and module_name.partition(".")[0] not in sys.stdlib_module_names | set(OWN_PACKAGES)
            and not _in_installed_library(builder))


OWN_PACKAGES = ("robolearn", "sims", "policies", "hardware")
"""This stack's packages: their tasks are in TASKS or Task subclasses; none of their functions builds a task."""


def _in_installed_library(function: Callable[..., Any]) -> bool:
    """Whether ``function``'s code lies in the standard library or an installed package's folder (site-packages,
    a virtualenv's too): a library's own function (``yaml:unsafe_load``, which runs the Python its YAML names) is
    no task factory of the user's, however it is named. A function without a file counts as one."""
    import site
    import sysconfig
    from pathlib import Path

    try:
        path = Path(inspect.getfile(function)).resolve()
    except (TypeError, OSError):
        return True
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")} | set(site.getsitepackages())
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        roots.add(site.getusersitepackages())
    return any(path.is_relative_to(Path(root).resolve()) for root in roots if root)


def check_task(task: str, kwargs: dict[str, Any] | None = None) -> None:
    """Refuse an unknown task, or a setting it does not have, as :func:`make_env` would, without building a
    simulator: a launcher checks before it starts ranks that would each say it. ``gym:`` and ``mjlab:`` ids are
    their libraries' to check."""
    if task.startswith(MJLAB_PREFIX):
        _check_mjlab_settings(kwargs or {})
    elif not task.startswith(GYM_PREFIX):
        _build_task(task, {key: value for key, value in (kwargs or {}).items() if key not in WARP_BUFFERS})


def _check_mjlab_settings(kwargs: dict[str, Any]) -> None:
    """An mjlab task takes ``action_limit`` here; its other settings are its own config's. A config of our Go1
    (``policy_linvel``...) run on an mjlab task had ended in a TypeError traceback from the adapter."""
    if unknown := sorted(set(kwargs) - {"action_limit"}):
        raise ValueError(f"env.kwargs.{unknown[0]}: an mjlab task takes only action_limit here (its other settings "
                         "are its own config's); replace the config's env.kwargs, e.g. 'env.kwargs={action_limit: 4.0}'")


def _build_task(task: str, kwargs: dict[str, Any]) -> Task:
    """The task ``task`` names, built with ``kwargs``: a setting it does not have, or a value of the wrong
    type for a dataclass task's field, is an error naming it (and the settings it has)."""
    whole = task_builder(task)
    builder, fixed, allowed, takes_any = _parameters(whole)
    unknown = [] if takes_any else sorted(set(kwargs) - set(allowed))
    if set(unknown) & set(fixed):
        key = sorted(set(unknown) & set(fixed))[0]
        others = sorted(name for name, b in TASKS.items() if isinstance(b, functools.partial) and b.func is builder)
        raise ValueError(f"{_for_caller(f'env.kwargs.{key}')}: task {task!r} is the one with {key}={fixed[key]!r}; "
                         f"pick another by its task name ({', '.join(others)})")
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*allowed, *WARP_BUFFERS], n=1)
        meant = f" (did you mean '{_for_caller(f'env.kwargs.{close[0]}')}'?)" if close else ""
        raise ValueError(f"{_for_caller(f'env.kwargs.{unknown[0]}')}: task {task!r} has no such setting{meant}; it "
                         f"takes: {', '.join(allowed + list(WARP_BUFFERS))}{_undeclared_hint(builder, unknown[0])}")
    if dataclasses.is_dataclass(builder):  # checked now, not as a TypeError in the middle of a step
        from robolearn.config import check_value, checkable

        try:
            hints = typing.get_type_hints(builder)
        except (NameError, TypeError):  # annotations naming what only a type checker imports: unchecked
            hints = {}
        checked = {key: hint for key, hint in hints.items() if checkable(hint)}  # a Sequence, a Callable: as given
        kwargs = {key: check_value(value, checked[key], _for_caller(f"env.kwargs.{key}")) if key in checked else value
                  for key, value in kwargs.items()}
    if inspect.isclass(builder) and inspect.isabstract(builder):  # not Python's "Can't instantiate abstract class"
        missing = ", ".join(sorted(builder.__abstractmethods__))
        raise ContractError(f"env.task={task}: {builder.__name__} does not implement {missing}, which a sims.Task "
                            "must (sims/task.py says what each returns)")
    if inspect.isclass(builder):  # here too, for check_task, which builds no TaskEnv (which checks it again)
        check_settings_declared(builder, f"env.task={task}")
    spec = whole(**kwargs)
    if not isinstance(spec, Task):
        raise ValueError(f"env.task={task}: built a {type(spec).__name__}, not a sims.Task")
    for key in ("frame_skip", "max_episode_steps"):  # 0 physics steps fail inside MuJoCo; 0-step episodes teach nothing
        value = getattr(spec, key)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{_for_caller(f'env.kwargs.{key}')}: must be a whole number of at least 1, got {value!r}")
    return spec


def _undeclared_hint(builder: Callable[..., Task], name: str) -> str:
    """Why a task class's attribute ``name`` (one it sets, or sims.Task's ``frame_skip``) is no setting, and how it
    becomes one: a setting is a dataclass field, which takes the decorator and an annotation both (a task that set
    ``frame_skip = 10`` had been told to decorate its class only, after which it still was none). '' otherwise:
    for a method or property (``rewards`` had been told to declare ``rewards: function = <function ...>``), and for
    a task of ours (sims.tasks), which is no one's to edit."""
    if not inspect.isclass(builder) or not hasattr(builder, name) or builder.__module__.startswith("sims."):
        return ""
    if callable(value := inspect.getattr_static(builder, name)) or isinstance(value, (property, classmethod,
                                                                                     staticmethod)):
        return ""
    declare = f"declare {setting_line(builder, name)} in its body, as the README's my_task.py declares frame_skip"
    if not dataclasses.is_dataclass(builder):
        return (f" ({builder.__name__} is no dataclass, so its class attributes are not settings: decorate it with "
                f"@dataclass(kw_only=True) and {declare})")
    return f" ({builder.__name__}'s {name} is a class attribute without an annotation, not a setting: {declare})"


def task_settings(task: str) -> list[str]:
    """The settings (``env.kwargs``) our task or a task of one's own named ``task`` takes by name; none
    for ``gym:`` and ``mjlab:`` ids, whose ``make`` takes whatever their env does."""
    if task.startswith((GYM_PREFIX, MJLAB_PREFIX)):
        return []
    return _parameters(task_builder(task))[2]


def trained_settings(task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every plain setting of our task or one's own built with ``kwargs``, defaults included: bools, numbers
    and strings, and lists, tuples and str-keyed mappings of them (Go1's ``command_ranges`` and
    ``reward_weights``), as JSON gives them back (:func:`robolearn.evaluate.plain_setting`: tuples as lists).
    What an export records, so a controller is warned of an env whose settings differ even where the run
    left them at their defaults. Empty for ``gym:`` and ``mjlab:`` ids, or where the task fails to build (an
    export must not fail on it)."""
    from robolearn.evaluate import plain_setting

    if task.startswith((GYM_PREFIX, MJLAB_PREFIX)):
        return {}
    try:
        spec = _build_task(task, dict(kwargs))
    except Exception:  # noqa: BLE001 (a task of one's own that cannot be rebuilt here: its kwargs still say it)
        return {}
    names = ([f.name for f in dataclasses.fields(spec) if f.init]  # not the state a task fills in when built
             if dataclasses.is_dataclass(spec) else task_settings(task))
    # a setting JSON would not give back as it was (an array, a tensor, a callable, a mapping keyed by numbers)
    # is left out: recorded, it would fail the export's json.dumps or differ from the env's own every time
    settings = {name: plain_setting(getattr(spec, name, None)) for name in [*names, "frame_skip", "max_episode_steps"]}
    return {name: value for name, value in settings.items() if value is not None}


def _parameters(builder: Callable[..., Task]) -> tuple[Callable[..., Task], dict[str, Any], list[str], bool]:
    """``builder`` unwrapped from a ``functools.partial``, the settings the partial fixes, the settings it
    takes by name, and whether it passes any others on (a factory's ``**settings``)."""
    fixed: dict[str, Any] = {}
    if isinstance(builder, functools.partial):  # point_maze_medium = PointMaze with its layout fixed
        builder, fixed = builder.func, builder.keywords
    parameters = inspect.signature(builder).parameters.values()
    allowed = sorted(p.name for p in parameters if p.kind is not p.VAR_KEYWORD and p.name not in fixed)
    return builder, fixed, allowed, any(p.kind is p.VAR_KEYWORD for p in parameters)


_SAID: set[str] = set()  # notes said once per process (Python's own once-per-place is reset by catch_warnings)


def _asked_from_python(stacklevel: int) -> bool:
    """Whether the setting being checked (the device :func:`resolve_backend` resolves, a key :func:`_for_caller`
    words) is an argument of one's own Python call of :func:`make_env` or :func:`resolve_backend` (so that advice
    names that argument, not the config's ``env.device`` or ``env.kwargs.<key>``): ``stacklevel``,
    :func:`robolearn.caller.outside_us` from the function that calls this, leads past our packages' frames, and the
    last of them (the one the caller called) is one of those two."""
    entry = sys._getframe(stacklevel - 1)  # (the calling function's own frame stacklevel - 2: here, one deeper)
    return entry.f_code.co_filename == __file__ and entry.f_code.co_name in ("make_env", "resolve_backend")


def _for_caller(key: str) -> str:
    """A config key of the env (``env.kwargs.frame_skp``, ``env.delay.``) as the caller named it: from one's own
    Python call of :func:`make_env`, its argument (``frame_skp``, a keyword; ``delay.``, a key of ``delay=``), and
    the config's key where a config's env is built (a run, :func:`robolearn.make_env`, the launcher's check)."""
    return key.removeprefix("env.kwargs.").removeprefix("env.") if _asked_from_python(outside_us()) else key


def resolve_backend(backend: str, device: str | torch.device) -> tuple[str, torch.device]:
    """The backend and device that will run ``backend`` on ``device``: validated, and ``warp`` on a
    CUDA device this machine lacks falls back to ``mujoco`` on the CPU (with a warning)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {BACKENDS}")
    from_python = _asked_from_python(outside_us())  # advice names the device= argument, or the config's env.device
    given = str(device) if isinstance(device, torch.device) else device
    said, choices = ((f"device={given!r}", "'cpu', 'cuda' or 'cuda:N'") if from_python
                     else (f"device {str(given)!r} (env.device)", "cpu, cuda or cuda:N"))
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):  # (TypeError: None, a float, from Python; torch's is a list of signatures)
        raise ValueError(f"{said} is not a torch device: use {choices}") from None
    if device.type not in ("cpu", "cuda"):  # torch would fail deep in a task; Warp would quietly run on its CPU
        raise ValueError(f"{said}: robolearn's envs run on {choices}, not {device.type}")
    if device.type == "cpu":
        if backend == "warp":
            _warp_backend()  # missing packages said here, in one line, not as an ImportError traceback at the build
        if backend == "warp" and "warp-on-cpu" not in _SAID:  # once per process, not for every env a run builds
            _SAID.add("warp-on-cpu")
            warnings.warn("backend=warp device=cpu: MuJoCo Warp on Warp's CPU device, for tests, runs far slower than "
                          "backend=mujoco; on a GPU, device=cuda runs it there", stacklevel=outside_us())  # (eval and
            # make_env(run) say it too, which take no env.device: no "add env.device=" advice)
        return backend, device
    if not torch.cuda.is_available():
        if backend != "warp":
            fix = "use device='cpu'" if from_python else "use env.device=cpu"
            raise ValueError(f"device={device}: no CUDA GPU here (torch.cuda.is_available() is False); {fix}")
        warnings.warn(f"backend=warp device={device}: no CUDA GPU here (torch.cuda.is_available() is False); "
                      "falling back to backend=mujoco device=cpu, which a run's config.yaml then records (on a GPU, "
                      f"resume it with env.backend=warp env.device={device}). GPU configs have thousands of worlds: "
                      "lower env.num_envs here; env.device=cpu runs MuJoCo Warp on its CPU device (slow, for "
                      "tests).", stacklevel=outside_us())
        return "mujoco", torch.device("cpu")
    if (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    if backend == "warp":
        if problem := _warp_backend().cuda_problem():  # here, not as an "Invalid device identifier" deep inside Warp
            raise ValueError(f"backend=warp device={device}: {problem}")
    return backend, device


def _warp_backend() -> Any:
    """``sims.warp_backend``; where mujoco-warp or warp-lang is missing, a ValueError saying what to install (the
    command line's one error line; an ImportError had ended ``robolearn train env.backend=warp`` in a traceback)."""
    try:
        import sims.warp_backend as module
    except ImportError as err:
        raise ValueError(str(err)) from err
    return module


def make_backend(
    backend: str, spec: Task, num_worlds: int, device: str | torch.device, num_threads: int | None = None
) -> MujocoBackend:
    """The physics of ``num_worlds`` worlds of ``spec``'s model: ``mujoco`` (CPU) or ``warp``."""
    backend, device = resolve_backend(backend, device)
    if backend == "warp":
        model = _compiled(spec)
        try:
            return _warp_backend().WarpBackend(model, num_worlds, device=device, fields=spec.fields,
                                               nconmax=spec.nconmax, njmax=spec.njmax, light_reset=spec.light_reset)
        except NotImplementedError as err:  # mujoco_warp.put_model's refusal, had been a traceback deep in Warp
            raise ValueError(f"backend=warp: MuJoCo Warp cannot run {type(spec).__name__}'s model "
                             f"({str(err).rstrip('.')}); use env.backend=mujoco, which runs every MuJoCo model, "
                             "or change the model") from err
    return MujocoBackend(_compiled(spec), num_worlds, device=device, num_threads=num_threads, fields=spec.fields)


def _compiled(spec: Task) -> mujoco.MjModel:
    """``spec.model()``, its failures named by the task: MuJoCo's compiler speaks of elements and lines only."""
    try:
        model = spec.model()
    except ValueError as err:  # MuJoCo's XML and compiler errors
        raise ValueError(f"{type(spec).__name__}.model() did not compile: {' '.join(str(err).split())}") from None
    if not isinstance(model, mujoco.MjModel):
        raise ContractError(f"{type(spec).__name__}.model() must return a mujoco.MjModel (mujoco.MjModel.from_xml_path("
                            f"...)), got {type(model).__name__}")
    return model


__all__ = ["BACKENDS", "TASKS", "MujocoBackend", "Task", "TaskEnv", "make_backend", "make_env", "resolve_backend",
           "task_settings"]
