"""Replay a recorded episode's actions on a VecEnv and measure how far it drifts from the record.

On our simulators (envs with ``get_state``/``set_state``) the episode's
recorded initial state row is restored first, so a deterministic simulation
reproduces the episode bit for bit: zero state divergence, identical return.
An episode with no state rows but D4RL's ``infos/qpos`` and ``infos/qvel``
starts from the env's reset state with those positions and velocities put in
(``start == "qpos/qvel"``): exact where they are the whole physical state.
Without state rows, the task's own state that its first recorded observation
reports (arm_reach's target: :meth:`sims.task.Task.state_from_observation`)
is put in too (``from_observation``), so a robot's recording replays towards
the target the robot reached for, not one the reset drew anew.
On any other VecEnv (a Gymnasium env, a robot) the env starts from its own
reset and the same actions are applied open loop; the divergence then says
how well the recording transfers. Every env of a batched env gets the same
actions; env 0 is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from robolearn.data.episode import DatasetError, Episode
from robolearn.data.recording_env import has_exact_state
from robolearn.evaluate import frame_step, video_target, write_frames
from robolearn.interfaces import VecEnv


@dataclass
class ReplayResult:
    steps: int  # actions applied
    recorded_steps: int
    restored: bool  # started from the recorded simulator state (or its qpos and qvel)
    recorded_return: float
    replayed_return: float
    qpos_divergence: np.ndarray | None  # per observation: max |qpos replayed - recorded|; None without qpos
    obs_divergence: np.ndarray  # per observation: max |observation replayed - recorded| over all groups
    group_divergence: dict[str, float]  # per observation group: its max |replayed - recorded| over the episode
    ended_early: bool  # the env ended the episode before the recorded actions ran out
    video: Path | None = None
    start: str = "reset"  # "state" (the recorded row), "qpos/qvel" (D4RL's infos), "reset" (the env's own)
    from_observation: tuple[str, ...] = ()  # state components the task read from the first recorded observation
    recorded_success: bool | None = None  # the episode's last ``infos/success``; None where it has none
    replayed_success: bool | None = None  # the env's success test after the last replayed step; None: no test

    @property
    def return_diff(self) -> float:
        return self.replayed_return - self.recorded_return

    @property
    def exact(self) -> bool:
        """The whole episode was reproduced bit for bit."""
        qpos_ok = self.qpos_divergence is None or not self.qpos_divergence.any()
        return (self.steps == self.recorded_steps and not self.ended_early and self.return_diff == 0.0
                and qpos_ok and not self.obs_divergence.any()
                and self.recorded_success in (None, self.replayed_success))

    def summary(self) -> dict[str, float | int | bool | str | None]:
        qpos = self.qpos_divergence
        return {"steps": self.steps, "recorded_steps": self.recorded_steps, "restored": self.restored,
                "start": self.start, "from_observation": list(self.from_observation),
                "recorded_return": self.recorded_return, "replayed_return": self.replayed_return,
                "return_diff": self.return_diff,
                "qpos_divergence_max": None if qpos is None else float(qpos.max()),
                "qpos_divergence_final": None if qpos is None else float(qpos[-1]),
                "obs_divergence_max": float(self.obs_divergence.max()), "group_divergence": self.group_divergence,
                "recorded_success": self.recorded_success, "replayed_success": self.replayed_success,
                "ended_early": self.ended_early,
                "exact": self.exact, "video": str(self.video) if self.video else None}


@torch.no_grad()
def replay(episode: Episode, env: VecEnv, *, restore: bool = True, seed: int | None = None,
           video: str | Path | None = None, fps: int = 30, progress: bool = False,
           final_copied: bool = False) -> ReplayResult:
    """Apply ``episode``'s actions on ``env`` (restoring its recorded state when the env and the
    episode allow and ``restore``); optionally film env 0 into ``video`` (mp4). ``progress``: a bar
    while filming (rendering is ~30x slower than stepping). ``final_copied``: the episode's last
    observation is a copy of the one before (a D4RL or LeRobot import's, whose source has none: its
    metadata's ``final_observation: "copied"``), not compared (it had read as a divergence of an exact replay)."""
    if not isinstance(episode, Episode):  # replay(dataset, 0) had been an AttributeError on 0.num_envs
        raise TypeError(f"replay(episode, env): give one episode (dataset[i]) and a VecEnv of its task, got "
                        f"{type(episode).__name__} and {type(env).__name__}")
    n = env.num_envs
    exact_env = has_exact_state(env)
    if exact_env:
        env.keep_final_state = True  # type: ignore[attr-defined]
    obs = env.reset(seed=seed)
    start, from_obs = "reset", ()
    if restore and exact_env:
        row, start, from_obs = _start_row(env, episode)
        if row is not None:
            obs = env.set_state(row.expand(n, -1))  # type: ignore[attr-defined]
    recorded_qpos = episode.infos.get("qpos")
    every = frame_step(env.control_dt, fps, gif=Path(video).suffix.lower() == ".gif") if video else 0
    frames = []

    obs_div = [_obs_divergence(obs, episode, 0)]
    qpos_div = [_qpos_divergence(env.get_state(), recorded_qpos, 0)] if exact_env else []  # type: ignore[attr-defined]
    rewards: list[float] = []
    ended_early, replayed_success = False, None
    bar = tqdm(total=len(episode.actions), desc="replay", unit="step",
               disable=None if progress and video else True)  # None: on a terminal only
    for t, action in enumerate(episode.actions):
        bar.update()
        if every and t % every == 0:
            frames.append(env.render(0))
        step = env.step(torch.as_tensor(action, device=env.device).expand(n, *action.shape))
        rewards.append(step.reward[0].item())
        if "success" in step.info:
            replayed_success = bool(step.info["success"][0])
        if not (final_copied and t + 1 == len(episode)):
            obs_div.append(_obs_divergence(step.info.get("final_obs", step.obs), episode, t + 1))
        if exact_env:
            qpos_div.append(_qpos_divergence(step.info["final_state"], recorded_qpos, t + 1))
        if bool(step.terminated[0] | step.truncated[0]) and t + 1 < len(episode):
            ended_early = True
            break
    bar.close()
    known = [d for d in qpos_div if d is not None]  # recorded qpos may lack the final row (D4RL)
    result = ReplayResult(steps=len(rewards), recorded_steps=len(episode), restored=start != "reset" or bool(from_obs),
                          start=start, from_observation=from_obs,
                          recorded_return=episode.episode_return,
                          replayed_return=float(np.sum(np.asarray(rewards, dtype=episode.rewards.dtype), dtype=np.float64)),
                          qpos_divergence=np.array(known) if known else None,
                          obs_divergence=np.array([max(row.values(), default=0.0) for row in obs_div]),
                          group_divergence={g: max(row[g] for row in obs_div) for g in obs_div[0]},
                          ended_early=ended_early, replayed_success=replayed_success,
                          recorded_success=episode.success)
    if video:
        result.video = _write_video(Path(video), frames, every * env.control_dt)
    return result


def _start_row(env: VecEnv, episode: Episode) -> tuple[torch.Tensor | None, str, tuple[str, ...]]:
    """The state row to start from, what it came from and the components the task read from the first
    observation: the recorded row; else the env's reset state with the recorded ``qpos`` and ``qvel``
    (D4RL's infos, a robot's joint_state) and the task's state from the observation put in; else
    ``(None, "reset", ())``."""
    now = env.get_state()  # type: ignore[attr-defined]
    if episode.state is not None:
        row = torch.as_tensor(episode.state[0], dtype=torch.float64)
        expected = now["state"].shape[1]
        if row.shape[0] != expected:
            raise DatasetError(f"recorded state rows have {row.shape[0]} numbers, this env's have {expected}: "
                               "the episode comes from another model or task arguments")
        return row, "state", ()
    sim = getattr(env, "sim", None)
    if sim is None:
        return None, "reset", ()
    row, start = now["state"][0].clone(), "reset"
    qpos, qvel = episode.infos.get("qpos"), episode.infos.get("qvel")
    if qpos is not None and qvel is not None:
        for name, recorded in (("qpos", qpos), ("qvel", qvel)):
            if np.shape(recorded)[1:] != tuple(now[name].shape[1:]):
                raise DatasetError(f"recorded {name} rows have shape {np.shape(recorded)[1:]}, this env's "
                                   f"{tuple(now[name].shape[1:])}: the episode comes from another model")
            row[sim.state_slice(name)] = torch.as_tensor(recorded[0], dtype=torch.float64)
        start = "qpos/qvel"
    from_obs = _task_state(env, sim, episode)
    for name, value in from_obs.items():
        row[sim.state_slice(name)] = value.to(row)
    return (row if start != "reset" or from_obs else None), start, tuple(from_obs)


def _task_state(env: VecEnv, sim: Any, episode: Episode) -> dict[str, torch.Tensor]:
    """The task's state components its first recorded observation reports (``Task.state_from_observation``),
    each flattened to its span of a state row; none for an env without such a task."""
    task = getattr(env, "task", None)
    read = getattr(task, "state_from_observation", None)
    if not callable(read):
        return {}
    obs = {}
    for group, space in env.observation_spec.items():
        if group in episode.observations:
            recorded = episode.observations[group]
            if recorded.shape[1:] != space.shape:
                raise DatasetError(f"recorded observation group '{group}' has rows of shape {recorded.shape[1:]}, "
                                   f"this env's {space.shape}: the episode comes from another task")
            obs[group] = torch.as_tensor(recorded[:1], device=env.device)
    try:
        state = read(obs)
    except KeyError as err:
        raise DatasetError(f"the episode has no observation group {err}, which {type(task).__name__} reads its "
                           f"state from (groups: {sorted(episode.observations)})") from None
    rows = {}
    for name, value in state.items():
        span = sim.state_slice(name)
        if value.numel() != (width := span.stop - span.start):
            raise ValueError(f"{type(task).__name__}.state_from_observation: '{name}' has {value.numel()} numbers, "
                             f"a state row holds {width}: return one (1, ...) row per world of it")
        rows[name] = value.detach().reshape(-1)
    return rows


def _obs_divergence(obs: dict[str, torch.Tensor], episode: Episode, row: int) -> dict[str, float]:
    """Per observation group both have: max |env 0's observation - recorded row|."""
    return {group: float(np.abs(obs[group][0].detach().cpu().numpy().astype(np.float64) - recorded[row]).max(initial=0.0))
            for group, recorded in episode.observations.items() if group in obs}


def _qpos_divergence(state: dict[str, torch.Tensor], recorded: np.ndarray | None, row: int) -> float | None:
    """max |qpos of env 0 - recorded qpos[row]|, or None without a recorded row."""
    if recorded is None or row >= len(recorded):
        return None
    return float(np.abs(state["qpos"][0].cpu().numpy() - recorded[row]).max(initial=0.0))


def _write_video(path: Path, frames: list[np.ndarray], seconds_per_frame: float) -> Path:
    """Frames to a video, written aside (:func:`video_target`'s temp file) and renamed: never half a video."""
    path, tmp = video_target(path)
    try:
        write_frames(tmp, frames, seconds_per_frame)
    except BaseException:  # ffmpeg refused a frame, a Ctrl+C or kill: no half film left (per pid, none is reused)
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path
