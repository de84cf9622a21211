"""Evaluate a controller on a VecEnv, and film it.

Both drive the controller exactly as a robot would: ``act`` every control step,
``reset(mask)`` for envs whose episode ended, so sequence and hierarchical
controllers evaluate unchanged.

Beside them, what they (and the training and deployment loops) share: the
NaN/inf guards (:func:`check_finite`; :class:`FiniteWatch`, the training loop's,
read once per iteration on a GPU), the warning for a controller run at another
rate or task settings than it was trained with (:func:`warn_if_trained_elsewhere`),
and the video writing (:func:`video_target`, :func:`frame_writer`, :func:`caption`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import numbers
import os
from pathlib import Path
from typing import Any, Iterator, Protocol

import numpy as np
import torch

from robolearn.caller import outside_us
from robolearn.interfaces import Obs, VecEnv, all_finite, host_reads_are_free
from robolearn.listing import few


class Actor(Protocol):
    """Anything with the Controller calling convention (a Controller or an exported one)."""

    def act(self, obs: Obs) -> torch.Tensor: ...
    def reset(self, mask: torch.Tensor | None = None) -> None: ...


def check_actor(controller: Any, who: str) -> None:
    """Refuse, in words, a ``controller`` without the Controller calling convention (``act`` and ``reset``): a plain
    function or a class of one's own without ``reset`` had failed as "'function' object has no attribute 'reset'"."""
    missing = [name for name in ("act", "reset") if not callable(getattr(controller, name, None))]
    if missing:
        raise TypeError(f"{who}: the controller must have act(obs) and reset(mask=None) (a robolearn.Controller, "
                        f"robolearn.load_controller(run)); {type(controller).__name__} has no {' or '.join(missing)}")


def action_of(controller: Actor, obs: Obs) -> torch.Tensor:
    """``controller.act(obs)``, refused in words unless a torch tensor: a numpy array had failed as "'numpy.ndarray'
    object has no attribute 'to'" inside the loop."""
    action = controller.act(obs)
    if not isinstance(action, torch.Tensor):
        raise TypeError(f"{type(controller).__name__}.act returned a {type(action).__name__}; it must return a torch "
                        "tensor of shape (num_envs, *action_spec.shape) (torch.as_tensor(...) converts an array)")
    return action


class NonFiniteError(RuntimeError):
    """NaN or inf reached the env or came out of it; ``sources`` says which kinds of value went bad
    (``"action"``, ``"observation"``, ``"reward"``...), for the hint of who made it."""

    def __init__(self, message: str, sources: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.sources = sources


def _labelled(what: str, value: torch.Tensor | Obs) -> Iterator[tuple[str, torch.Tensor]]:
    """``(label, tensor)`` for a tensor or each group of observations: ``observation['policy']``."""
    for group, tensor in (value.items() if isinstance(value, dict) else [("", value)]):
        yield (f"{what}[{group!r}]" if group else what), tensor


def check_finite(what: str, value: torch.Tensor | Obs) -> None:
    """Raise naming ``what`` (and the group) if ``value`` has NaN or inf."""
    for label, tensor in _labelled(what, value):
        if not all_finite(tensor):
            raise NonFiniteError(f"{label} contains NaN or inf{_bad_rows(tensor)}", (what,))


def _bad_rows(tensor: torch.Tensor) -> str:
    """`` (envs 0, 3 of 128)``: the rows (one per env) holding NaN or inf, where there are several rows."""
    if tensor.dim() == 0 or tensor.shape[0] <= 1:
        return ""
    rows = (~torch.isfinite(tensor)).reshape(tensor.shape[0], -1).any(1).nonzero().flatten().tolist()
    return f" (env{'s' if len(rows) > 1 else ''} {few(rows)} of {tensor.shape[0]})"


class FiniteWatch:
    """:func:`check_finite` for the training loop: at once on the CPU; on a GPU, where reading each
    verdict would be a host sync per env step, the verdicts stay on the device until :meth:`verify`
    (once per iteration, before an update or checkpoint could take the bad data in)."""

    def __init__(self, device: str | torch.device, deferred: bool | None = None) -> None:
        self.deferred = not host_reads_are_free(device) if deferred is None else deferred
        # (what, label) -> the sum of every value since the last verify, on the device: NaN or inf in any value
        # makes it NaN or inf (two kernels a step per tensor; isfinite-all-or would be four). Summed in float64,
        # which float32 values cannot overflow.
        self._sums: dict[tuple[str, str], torch.Tensor] = {}

    def __call__(self, what: str, value: torch.Tensor | Obs) -> None:
        if not self.deferred:
            check_finite(what, value)
            return
        for label, tensor in _labelled(what, value):
            total = tensor.detach().sum(dtype=torch.float64)
            key = (what, label)
            self._sums[key] = self._sums[key] + total if key in self._sums else total

    def verify(self) -> None:
        """Raise :class:`NonFiniteError` naming every value that was not finite since the last call (which
        went bad first is not kept: a NaN action makes NaN observations and rewards in the same step)."""
        if not self._sums:
            return
        keys, bad = list(self._sums), ~torch.isfinite(torch.stack(list(self._sums.values())))
        self._sums = {}
        if bool(bad.any()):  # the one host sync
            flagged = [key for key, flag in zip(keys, bad.tolist()) if flag]
            raise NonFiniteError(f"{', '.join(label for _, label in flagged)} contained NaN or inf during this iteration",
                                 tuple(dict.fromkeys(what for what, _ in flagged)))

    def forget(self) -> None:
        """Drop the verdicts not yet verified (of steps a Ctrl+C discards)."""
        self._sums = {}


def plain_setting(value: Any) -> Any:
    """``value`` as a controller.json gives it back: a bool, number or string as it is; a tuple or list of
    them (nested) as a list and a mapping of strings to them as a dict, so a task's tuple and the list JSON
    reads back compare equal. None for anything else: JSON would not give it back as it was (an array or a
    tensor is no JSON; a mapping keyed by numbers comes back keyed by strings; None itself was never a
    plain setting), so it is neither recorded nor compared, rather than warned about at every comparison;
    so is a NaN, which equals nothing, itself included."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [plain_setting(item) for item in value]
        return None if any(item is None for item in items) else items
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        entries = {key: plain_setting(item) for key, item in value.items()}
        return None if any(item is None for item in entries.values()) else entries
    return None


def setting_text(value: Any) -> str:
    """A plain setting as a message says it: a number or string as it is, a list or mapping as JSON
    (``[[-1.0, 1.0], [0.0, 0.0]]``, ``{"feet_air_time": 0.0}``), which an ``env.kwargs`` override reads."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def off_defaults(cls: type, given: Any) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` (sims' ``Randomization`` or ``Delay``) that ``given`` (a config's
    mapping, as ``env.randomization`` or controller.json holds it, or a ``cls``) sets off their defaults, as
    :func:`plain_setting` gives them: what an export records of ``env.randomization`` and ``env.delay``, and how
    they are compared (``{}``: none; ``{"obs_delay_steps": 0}`` is none too). A mapping ``cls`` refuses (a
    hand-edited file) is kept as its plain settings."""
    from robolearn.config import ConfigError, build_dataclass

    if not isinstance(given, cls):
        try:
            given = build_dataclass(cls, dict(given or {}), "")
        except (ConfigError, TypeError, ValueError):
            plain = {key: plain_setting(value) for key, value in dict(given or {}).items()}
            return {key: value for key, value in plain.items() if value is not None}
    default = cls()
    changed = {f.name: plain_setting(getattr(given, f.name)) for f in dataclasses.fields(cls)
               if plain_setting(getattr(given, f.name)) != plain_setting(getattr(default, f.name))}
    return {key: value for key, value in changed.items() if value is not None}


def settings_text(settings: dict[str, Any]) -> str:
    """``obs_delay_steps=2, action_latency_steps=1`` (:func:`setting_text` each); ``none`` for none."""
    return ", ".join(f"{key}={setting_text(value)}" for key, value in settings.items()) or "none"


def env_delay(env: VecEnv) -> dict[str, Any] | None:
    """``env``'s fixed delays (a ``sims.delay.DelayedEnv`` under or over any wrappers) as :func:`off_defaults`
    gives them, ``{}`` for an env of sims' without one; None for any other env (a robot, which has its own
    latency, unknown here; an env of one's own): nothing to compare."""
    from sims.delay import Delay, DelayedEnv

    ours = False
    for _ in range(32):  # (wrappers of wrappers; a cycle of .env would not end)
        if isinstance(env, DelayedEnv):
            return off_defaults(Delay, env.cfg)
        ours = ours or type(env).__module__.split(".")[0] == "sims"
        if (env := getattr(env, "env", None)) is None:
            break
    return {} if ours else None


def unwrapped_task(env: VecEnv) -> Any:
    """The task ``env`` steps, under any randomization or delay wrappers (``None`` for an env of no task of ours)."""
    while not hasattr(env, "task") and hasattr(env, "env"):
        env = env.env
    return getattr(env, "task", None)


def differing_settings(recorded: dict[str, Any] | None, env: VecEnv) -> dict[str, tuple[Any, Any]]:
    """The plain task settings (:func:`plain_setting`: numbers, strings, and lists and mappings of them) in
    ``recorded`` that ``env``'s task (under any wrappers) has otherwise, as ``{key: (recorded, env's)}``, both
    as :func:`plain_setting` gives them; settings the task does not have as attributes are skipped, and so are
    keys only one side has (a controller.json from before a setting was recorded says nothing of it)."""
    task = unwrapped_task(env)
    differ = {}
    for key, value in (recorded or {}).items():
        ours, theirs = plain_setting(value), plain_setting(getattr(task, key, None))
        if ours is not None and theirs is not None and ours != theirs:
            differ[key] = (ours, theirs)
    return differ


def warn_if_trained_elsewhere(controller: Any, env: VecEnv) -> None:
    """An exported controller says how it was trained (``meta``: ``control_dt``; ``task_settings``, every plain
    setting, or from older exports ``task_kwargs``; ``delay``, the run's ``env.delay``): warn when ``env`` steps
    at another rate, runs other task settings or other fixed delays (an env of sims'), say an env built with
    ``sims.make_env(task)`` (the task's defaults) for a run trained with ``env.kwargs`` or ``env.delay``, or one
    built with other settings for a run left at the defaults (``robolearn.make_env(run)`` builds its own). Other
    domain randomization (``meta``'s ``randomization``) is no warning: evaluating nominal (``--nominal``) or
    randomized is the caller's choice, which ``robolearn eval`` says. Exports from before a key was recorded
    say nothing of it. Said at the first caller's line outside robolearn."""
    import math
    import warnings

    stacklevel = outside_us()
    meta = getattr(controller, "meta", None) or {}
    trained_dt = meta.get("control_dt")
    if trained_dt and not math.isclose(trained_dt, env.control_dt, rel_tol=1e-6):
        warnings.warn(f"the controller was trained at {1 / trained_dt:g} Hz, the env steps at {1 / env.control_dt:g} Hz: "
                      "its actions will act for another time than they learned to", stacklevel=stacklevel)
    if differ := differing_settings(meta.get("task_settings") or meta.get("task_kwargs"), env):
        warnings.warn(f"the controller was trained with task settings "
                      f"{', '.join(f'{k}={setting_text(v)}' for k, (v, _) in differ.items())}, the env has "
                      f"{', '.join(f'{k}={setting_text(v)}' for k, (_, v) in differ.items())}: build the env as the run "
                      "did (robolearn.make_env(run), or sims.make_env(task, **settings))", stacklevel=stacklevel)
    if "delay" in meta and (delay := env_delay(env)) is not None:
        from sims.delay import Delay

        if (trained := off_defaults(Delay, meta["delay"])) != delay:  # steps the actions and observations come late
            warnings.warn(f"the controller was trained under env.delay {settings_text(trained)}, the env has "
                          f"{settings_text(delay)}: its observations and actions arrive other than it learned to make "
                          f"up for; build the env as the run did (robolearn.make_env(run), or sims.make_env(task, "
                          f"delay={json.dumps(trained)}))", stacklevel=stacklevel)


@torch.no_grad()
def evaluate(controller: Actor, env: VecEnv, episodes: int, seed: int = 0) -> dict[str, Any]:
    """Run until each of the first ``episodes`` envs (``env.num_envs`` at least) has finished one episode, from
    ``env.reset(seed=seed)``; returns ``{"episodes", "return_mean", "return_std", "length_mean"}``, and
    ``"success_rate"`` where the env reports success (``robolearn eval`` adds its own keys around these).

    Each env contributes its first complete episode, so long episodes are not
    under-sampled as they would be by counting the first N to finish.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, numbers.Integral) or episodes < 1:
        raise ValueError(f"evaluate at least 1 episode, a whole number (got {episodes!r})")
    if env.num_envs < episodes:
        raise ValueError(f"evaluate {episodes} episodes on at least as many envs (got {env.num_envs})")
    check_actor(controller, "evaluate")
    warn_if_trained_elsewhere(controller, env)
    obs = env.reset(seed=seed)
    controller.reset()
    returns = torch.zeros(env.num_envs, dtype=torch.float64)
    lengths = torch.zeros(env.num_envs, dtype=torch.long)
    finished = torch.zeros(env.num_envs, dtype=torch.bool)
    success = torch.zeros(env.num_envs, dtype=torch.bool)
    has_success = False
    step = 0
    while not bool(finished[:episodes].all()):
        try:  # a NaN reward had made the evaluation 'return nan', and eval.json a NaN that strict JSON cannot read
            check_finite("observation", obs)
            action = action_of(controller, obs)
            check_finite("action", action)
            obs, reward, terminated, truncated, info = env.step(action.to(env.device))
            check_finite("reward", reward)
        except NonFiniteError as err:
            who = ("the controller is broken (check its inputs and weights)" if err.sources == ("action",) else
                   "the env produced it (check the task's observations and rewards, or physics that diverged)")
            raise NonFiniteError(f"{err} at step {step} of the evaluation (counted from 0): {who}", err.sources) from None
        step += 1
        running = ~finished
        returns += torch.where(running, reward.double().cpu(), 0.0)
        lengths += running.long()
        done = (terminated | truncated).cpu()
        if "success" in info:
            has_success = True
            success |= running & done & info["success"].cpu()
        finished |= done
        controller.reset(done.to(env.device))
    r = returns[:episodes].numpy()
    result = {"episodes": episodes, "return_mean": float(r.mean()), "return_std": float(r.std()),
              "length_mean": float(lengths[:episodes].double().mean())}
    if has_success:
        result["success_rate"] = float(success[:episodes].double().mean())
    return result


@torch.no_grad()
def record_video(controller: Actor, env: VecEnv, path: Path, seconds: float = 8.0, fps: int = 30,
                 width: int = 320, height: int = 240, seed: int = 0, progress: bool = False) -> Path:
    """Film env 0 for ``seconds`` of env time into an mp4 (frames subsampled to ~``fps``); ``progress``: a
    bar of control steps on a terminal (filming is far slower than stepping). Each episode's first
    ``CAPTION_SECONDS`` carry its number, its first frame in yellow: a reset otherwise looks like the robot
    teleporting (and episodes shorter than the caption still show where each starts)."""
    from tqdm import tqdm

    check_actor(controller, "record_video")
    steps = int(seconds / env.control_dt)
    if steps < 1:
        raise ValueError(f"film at least one control step ({env.control_dt:g} s), got {seconds:g} s")
    path, tmp = video_target(path)
    every = frame_step(env.control_dt, fps, gif=path.suffix.lower() == ".gif")
    captioned = max(1, round(CAPTION_SECONDS / env.control_dt))  # control steps
    try:
        obs = env.reset(seed=seed)
        controller.reset()
        episode, started, fresh = 1, 0, True
        # each frame goes to the file as it is filmed: a list of them had held ~11 MB a filmed second (320x240),
        # and `play --seconds 3600` ran out of memory after filming for the whole hour
        with frame_writer(tmp, every * env.control_dt) as writer:
            for step in tqdm(range(steps), desc="filming", unit="step", disable=None if progress else True, leave=False):
                if step % every == 0:
                    frame = env.render(0, width=width, height=height)
                    if step - started < captioned:
                        frame, fresh = caption(frame, f"episode {episode}", first=fresh), False
                    writer.append_data(frame)
                obs, _, terminated, truncated, _ = env.step(action_of(controller, obs).to(env.device))
                done = terminated | truncated
                controller.reset(done)
                if bool(done[0]):  # a host sync per step: filming is bound by rendering, not by it
                    episode, started, fresh = episode + 1, step + 1, True
    except BaseException as err:  # a Ctrl+C, an env that cannot render: no temp file left
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and (err.errno == errno.EPIPE or "Broken pipe" in str(err)):
            # ffmpeg stopped (imageio says so as a broken pipe): not the CLI's quiet "output pipe closed"
            raise RuntimeError(f"{path}: ffmpeg stopped writing the video (its messages above say why)") from None
        raise
    tmp.replace(path)
    return path


def frame_step(control_dt: float, fps: float, gif: bool = False) -> int:
    """Control steps per video frame, for about ``fps`` frames a second. A GIF keeps each frame's duration in
    whole hundredths of a second: there, a step count near it whose duration is one (the hopper's 8 ms step:
    every 5th, 40 ms; every 4th, 32 ms, would be stored as 30 ms and play 7 % fast), where there is one."""
    every = max(1, round(1.0 / (fps * control_dt)))
    if gif:
        whole = [n for n in range(max(1, every // 2), 2 * every + 1)
                 if abs(n * control_dt * 100 - round(n * control_dt * 100)) < 1e-6]
        every = min(whole, key=lambda n: abs(n - every), default=every)
    return every


def write_frames(path: Path, frames: list[np.ndarray], seconds_per_frame: float) -> None:
    """``frames`` as the video ``path`` (its suffix picks the format), each shown ``seconds_per_frame``: the
    exact rate (31.25 fps for an 8 ms step filmed every 4th; a rounded one had played films off time). A GIF
    (Pillow) takes each frame's duration, and plays on and on, as a video on a page."""
    with frame_writer(path, seconds_per_frame) as writer:
        for frame in frames:
            writer.append_data(frame)


@contextlib.contextmanager
def frame_writer(path: Path, seconds_per_frame: float) -> Iterator[Any]:
    """An imageio writer of the video ``path`` (its suffix picks the format), each frame shown
    ``seconds_per_frame``; ``append_data`` one frame at a time (ffmpeg encodes them as they come). Closed on
    leaving, on an error too: imageio's own ``with`` closes only when nothing was raised, and a writer left open
    had its ffmpeg write the file after the caller removed it (at exit, or when the writer was collected)."""
    import imageio.v2 as imageio

    timing = ({"duration": 1000 * seconds_per_frame, "loop": 0} if path.suffix.lower() == ".gif"
              else {"fps": 1.0 / seconds_per_frame, "macro_block_size": 8})
    writer = imageio.get_writer(path, **timing)
    try:
        yield writer
    except BaseException:
        with contextlib.suppress(Exception):  # (ffmpeg may be gone already: the error said is the one raised)
            writer.close()
        raise
    writer.close()


CAPTION_SECONDS = 0.6  # how long an episode's number shows at its start


@functools.lru_cache(maxsize=4)
def _font(size: int) -> Any:
    """Pillow's own font at ``size`` (no font files needed), loaded once: 7 ms a frame otherwise."""
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def caption(frame: np.ndarray, text: str, first: bool = False) -> np.ndarray:
    """``frame`` (H, W, 3 uint8) with ``text`` in white on a dark box in its top-left corner (``first``: black
    on yellow, an episode's first frame)."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    font = _font(max(8, min(frame.shape[:2]) // 16))
    left, top, right, bottom = draw.textbbox((5, 3), text, font=font)
    draw.rectangle((0, 0, right + 5, bottom + 4), fill=(235, 185, 20) if first else (20, 20, 20))
    draw.text((5, 3), text, font=font, fill=(0, 0, 0) if first else (255, 255, 255))
    return np.asarray(image)


VIDEO_SUFFIXES = (".mp4", ".gif", ".mkv", ".mov", ".avi")  # what imageio's ffmpeg (H.264) or Pillow writes


def video_target(path: str | Path) -> tuple[Path, Path]:
    """``path`` checked before any filming (which takes minutes on big tasks): a file name with a video
    suffix in a folder that can be written. Returns it and the temp file beside it the video is written to,
    then renamed from: never half a video."""
    path = Path(path)
    if not path.name or path.is_dir():
        raise ValueError(f"video {path}: a folder; give the video's file name, e.g. {path / 'video.mp4'}")
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ValueError(f"video {path}: give a file ending in {', '.join(VIDEO_SUFFIXES)} (the suffix picks the format)")
    if blocked := next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None):
        raise ValueError(f"video {path}: {blocked} is a file, not a folder")
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")  # two films of one name: two temps
    try:  # a read-only or full folder fails here, not after the filming, and by the path given (not the temp's)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.open("wb").close()
    except OSError as err:
        raise ValueError(f"video {path}: cannot write there ({err.strerror})") from None
    return path, tmp
