"""Gymnasium in both directions.

- :class:`GymVecEnv`: any Gymnasium env (an id, a factory, or a
  ``gymnasium.vector.VectorEnv`` in same-step autoreset mode) as our
  :class:`~robolearn.interfaces.VecEnv`, so our learners train on it.
- :class:`VecEnvAsGymVector`: our VecEnv as a ``gymnasium.vector.VectorEnv``
  (numpy in and out, same-step autoreset), so peers' code (CleanRL-style loops)
  trains on our simulators.
"""

from __future__ import annotations

import inspect
import operator
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import mujoco
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

from robolearn.interfaces import UNSTABLE_LOG, Obs, Step
from robolearn.interfaces import VecEnv as OurVecEnv
from robolearn.plugins import import_module_of
from sims import _for_caller
from sims.adapters import group_space
from sims.task import checked_action


class GymVecEnv(OurVecEnv):
    """A Gymnasium env as a VecEnv: Box observations become group ``policy``.

    ``env`` is a Gymnasium id (made ``num_envs`` times with ``make_kwargs`` and
    ``render_mode="rgb_array"``), a factory of one env, or a ready
    ``VectorEnv`` whose ``metadata["autoreset_mode"]`` is ``SAME_STEP`` (the
    only mode that yields the true last observation of an episode). Actions are
    in the env's own units and are clipped to its Box. ``max_episode_steps``
    is the time limit the envs of an id or a factory are made with (Gymnasium's
    ``TimeLimit``); a ready ``VectorEnv`` keeps its own: give the one it has.

    A MuJoCo env of a ``SyncVectorEnv`` (an id's or a factory's) whose physics
    blows up ends its episode in that step, as our own tasks' do: MuJoCo
    resets it mid-step and Gymnasium goes on from there, a teleport the
    learner would credit to the action. It is terminated with reward 0, reset,
    and counted in ``info["log"]["sim/unstable_worlds"]``.
    """

    def __init__(
        self,
        env: str | Callable[[], gymnasium.Env] | VectorEnv,
        num_envs: int = 1,
        *,
        device: str | torch.device = "cpu",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        **make_kwargs: Any,
    ) -> None:
        if isinstance(env, VectorEnv):
            self.vec = env
        else:
            if isinstance(env, str) and ":" in env:  # gym:module:Id: Gymnasium imports the module, from the current
                import_module_of(env.split(":")[0], f"gym:{env}")  # directory too (as python -m does), or says so
            factory = _factory(env, max_episode_steps, make_kwargs)
            try:
                self.vec = SyncVectorEnv([factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
            except gymnasium.error.Error as err:  # an unknown id, a missing extra (box2d...): one line, what to do
                if isinstance(err, gymnasium.error.NamespaceNotFound) and str(env).startswith("dm_control/") \
                        and int(mujoco.__version__.split(".")[0]) >= 4:  # Gymnasium asks for the package: no help yet
                    err = (f"{err} (installing it would not help yet: dm_control through shimmy does not run on "
                           "MuJoCo 4; README, 'Tasks and algorithms')")
                raise ValueError(f"gym:{env}: {err}") from None
            except TypeError as err:  # a keyword the env does not take (env.kwargs)
                raise ValueError(f"gym:{env}: {err} (check env.kwargs)") from None
        self.device = torch.device(device)
        # A refusal closes the envs built here (they had stayed open under a caller that goes on, a sweep's); a
        # ready VectorEnv is the caller's to close
        try:
            if isinstance(env, str) and make_kwargs:
                _probe_settings(env, factory, make_kwargs)
            self._take(max_episode_steps, seed)
        except Exception:
            if not isinstance(env, VectorEnv):
                self.vec.close()
            raise

    def _take(self, max_episode_steps: int | None, seed: int | None) -> None:
        """Checks ``self.vec``'s spaces and time limit, and takes its specs (a refusal leaves it to close)."""
        if self.vec.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError("the VectorEnv must use autoreset_mode=AutoresetMode.SAME_STEP to report final observations")
        obs_space, action_space = self.vec.single_observation_space, self.vec.single_action_space
        if isinstance(obs_space, (spaces.Dict, spaces.Tuple)) and isinstance(action_space, spaces.Box):
            # (a goal env's observation, desired_goal...: continuous, but not one Box)
            raise ValueError(f"the observation space is a {type(obs_space).__name__}, and our agents read one Box: "
                             f"flatten it with gymnasium.wrappers.FlattenObservation, in an env id of your own "
                             f"(gymnasium.register in a module: env.task=gym:module:Id); got {obs_space}")
        if not isinstance(obs_space, spaces.Box) or not isinstance(action_space, spaces.Box):
            raise ValueError(f"only Box (continuous) observation and action spaces are supported, got {obs_space} "
                             f"and {action_space}: our agents act in continuous spaces")
        if not np.issubdtype(action_space.dtype, np.floating):  # our float actions would be cast: 0.9 -> 0, 2.9 -> 2
            raise ValueError(f"the action space {action_space} is a Box of {action_space.dtype} values: a discrete "
                             "space, and our agents act in continuous ones (their actions would be truncated to "
                             "whole numbers); wrap the env so that it takes float actions")

        self.num_envs = self.vec.num_envs
        self.control_dt = _control_dt(self.vec)
        spec = _attr(self.vec, "spec", None)
        limit = max_episode_steps or (spec.max_episode_steps if spec is not None else None)
        if limit is None:
            raise ValueError("the env has no time limit in its spec: pass max_episode_steps")
        self.max_episode_steps = int(limit)
        # a scalar observation or action (shape ()) as a vector of one: a flat controller reads and writes
        # (num_envs, width) (a scalar action had been refused as "expects a flat action_spec, got shape ()")
        self._obs_shape = obs_space.shape or (1,)
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, self._obs_shape, dtype=np.float32)}
        width = action_space.shape or (1,)
        self.action_spec = spaces.Box(np.reshape(action_space.low, width), np.reshape(action_space.high, width),
                                      dtype=np.float32)
        self._seed = seed
        self._physics = _mujoco_data(self.vec)
        self._bad_states = _bad_states(self._physics)

    def reset(self, seed: int | None = None) -> Obs:
        seed = self._seed if seed is None else operator.index(seed)  # a numpy integer: Gymnasium reads it as a list
        self._seed = None  # only the first reset uses the constructor's seed
        obs, _ = self.vec.reset(seed=seed)
        self._bad_states = _bad_states(self._physics)
        return {"policy": self._tensor(obs)}

    def step(self, action: torch.Tensor) -> Step:
        action = checked_action(action, self.num_envs, self.action_spec, self.device)  # numpy too, as our envs
        action = np.clip(action.detach().cpu().numpy(), self.action_spec.low, self.action_spec.high)
        gym_action = action.astype(self.vec.single_action_space.dtype).reshape(self.vec.action_space.shape)
        obs, reward, terminated, truncated, gym_info = self.vec.step(gym_action)
        final = obs.copy()
        if "final_obs" in gym_info:
            for i in np.flatnonzero(gym_info["_final_obs"]):
                final[i] = gym_info["final_obs"][i]
        log: dict[str, torch.Tensor] = {}
        if self._physics:
            unstable = self._end_unstable_episodes(obs, final, reward, terminated, truncated)
            log[UNSTABLE_LOG] = torch.tensor(float(unstable.sum()), device=self.device)
        info = {"final_obs": {"policy": self._tensor(final)}, "log": log}
        return Step(
            {"policy": self._tensor(obs)},
            torch.as_tensor(reward, dtype=torch.float32, device=self.device),
            torch.as_tensor(terminated, device=self.device),
            torch.as_tensor(truncated, device=self.device),
            info,
        )

    def _end_unstable_episodes(self, obs: np.ndarray, final: np.ndarray, reward: np.ndarray,
                               terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """End, in place, the episodes of the envs whose physics MuJoCo found bad (NaN, inf or beyond 1e10) in
        this step: terminated, reward 0, reset, their next episode's first observation as ``final_obs`` too (a
        terminated step bootstraps from none). An env Gymnasium reset in the step (its count back to 0) is
        not flagged: a blow-up in an episode's last step goes unseen."""
        counts = _bad_states(self._physics)
        unstable = counts > self._bad_states
        for i in np.flatnonzero(unstable):
            obs[i] = final[i] = self.vec.envs[i].reset()[0]
            counts[i] = _bad_states([self._physics[i]])[0]  # 0 after mj_resetData; an env that resets its state
            # by hand (gymnasium_robotics' do) keeps its counts, and had been flagged again at every step
        reward[unstable], terminated[unstable], truncated[unstable] = 0.0, True, False
        self._bad_states = counts
        return unstable

    def render(self, index: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        try:
            if isinstance(self.vec, SyncVectorEnv):
                frame = self.vec.envs[index].render()  # only the env asked for
            else:
                frame = (self.vec.render() or [None] * self.num_envs)[index]
        except NotImplementedError:  # gymnasium.Env's own render: an env made without render_mode
            raise NotImplementedError("the Gymnasium env renders no frames (its constructor takes no render_mode)") from None
        if frame is None:
            raise RuntimeError("the env was not made with render_mode='rgb_array'")
        return _resize(np.asarray(frame), height, width)

    def close(self) -> None:
        self.vec.close()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` as a tensor of its own: a VectorEnv made with ``copy=False`` hands out one buffer that its
        next step overwrites, which had turned each stored transition's ``obs`` into its next observation."""
        return torch.tensor(array, dtype=torch.float32, device=self.device).reshape(-1, *self._obs_shape)


class VecEnvAsGymVector(VectorEnv):
    """Our VecEnv as a ``gymnasium.vector.VectorEnv`` over numpy arrays.

    The observation is the group ``group`` (``policy``). Autoreset is
    same-step: a finished env's row of the returned observation already starts
    the next episode, and ``info["final_obs"][i]`` (with mask
    ``info["_final_obs"]``) holds its last observation, as Gymnasium's
    ``SyncVectorEnv(autoreset_mode=SAME_STEP)`` reports it.
    ``metadata["render_fps"]`` is the control rate, as in Gymnasium's MuJoCo envs: video
    recorders play frames in real time, and :class:`GymVecEnv` reads the control period back.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, env: OurVecEnv, group: str = "policy") -> None:
        self.env, self.group = env, group
        self.num_envs = env.num_envs
        self.metadata = {**type(self).metadata, "render_fps": 1.0 / env.control_dt}
        self.single_observation_space = group_space(env, group, "VecEnvAsGymVector")
        self.single_action_space = env.action_spec
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """``seed`` seeds the whole batch (our envs take one seed); Gymnasium's list of one seed per env is
        refused unless all are None, as no per-env seeding could honour it."""
        if isinstance(seed, (list, tuple)):
            if any(s is not None for s in seed):
                raise ValueError(f"VecEnvAsGymVector.reset(seed=...): one int seeds the whole batch; got a list of "
                                 f"{len(seed)} (pass seed={seed[0]!r}: our envs draw every world from one generator)")
            seed = None
        return _numpy(self.env.reset(seed)[self.group]), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        action = torch.as_tensor(np.asarray(actions), dtype=torch.float32, device=self.env.device)
        obs, reward, terminated, truncated, env_info = self.env.step(action)
        done = _numpy(terminated | truncated)
        final_obs = np.full(self.num_envs, None, dtype=object)
        final = _numpy(env_info["final_obs"][self.group])
        for i in np.flatnonzero(done):
            final_obs[i] = final[i]
        info: dict[str, Any] = {"final_obs": final_obs, "_final_obs": done}
        if "success" in env_info:
            info["success"], info["_success"] = _numpy(env_info["success"]), done
        return _numpy(obs[self.group]), _numpy(reward), _numpy(terminated), _numpy(truncated), info

    def render(self) -> tuple[np.ndarray, ...]:
        """One frame per env (all of them: keep ``num_envs`` small when recording)."""
        return tuple(self.env.render(i) for i in range(self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


def _factory(env: str | Callable[[], gymnasium.Env], max_episode_steps: int | None,
             make_kwargs: dict[str, Any]) -> Callable[[], gymnasium.Env]:
    """One env of ``env`` (an id or a factory) truncated at ``max_episode_steps`` when given, so that the
    limit the VecEnv reports is the one its episodes keep (it had been reported only: Pendulum-v1 told 50
    and ran 200). An id's env renders RGB frames where its constructor takes ``render_mode``."""
    if isinstance(env, str):
        kwargs = {**({} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}), **make_kwargs}

        def make() -> gymnasium.Env:
            try:
                return gymnasium.make(env, render_mode="rgb_array", **kwargs)
            except TypeError:  # an env whose constructor takes no render_mode: it trains, without frames
                return gymnasium.make(env, **kwargs)  # (a keyword it lacks in env.kwargs fails here too)
        return make
    if max_episode_steps is None:
        return env
    return lambda: gymnasium.wrappers.TimeLimit(env(), max_episode_steps)


def _probe_settings(env_id: str, factory: Callable[[], gymnasium.Env], make_kwargs: dict[str, Any]) -> None:
    """Reset and step one spare env, so that a setting of the wrong type (env.kwargs.g=abc: Gymnasium passes
    its settings on unchecked) is said here in one line, naming it, not as a traceback from the first rollout."""
    probe = factory()
    try:
        probe.action_space.seed(0)
        probe.reset(seed=0)
        probe.step(probe.action_space.sample())
    except (TypeError, ValueError) as err:
        defaults = {name: parameter.default for name, parameter in _signature(probe).parameters.items()}
        numbers = (int, float, np.number)
        suspects = [name for name, value in make_kwargs.items() if name in defaults and (
            isinstance(defaults[name], numbers) != isinstance(value, numbers)
            or isinstance(defaults[name], bool) != isinstance(value, bool))] or list(make_kwargs)
        said = ", ".join(f"{_for_caller(f'env.kwargs.{name}')}={make_kwargs[name]!r}"  # (make_env's keyword)
                         + (f" (its default: {defaults[name]!r})" if name in defaults else "") for name in suspects)
        raise ValueError(f"gym:{env_id}: {said} failed in the env's first step, where Gymnasium said: "
                         f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} "
                         "(Gymnasium passes an env's settings on unchecked: check their types)") from None
    finally:
        probe.close()


def _signature(env: gymnasium.Env) -> inspect.Signature:
    """The signature of the env's own constructor (under Gymnasium's wrappers), or an empty one."""
    try:
        return inspect.signature(type(env.unwrapped).__init__)
    except (TypeError, ValueError):
        return inspect.Signature()


def _control_dt(vec: VectorEnv) -> float:
    """Seconds per step: the env's ``dt`` (MuJoCo envs), else its real-time rendering rate
    (``metadata["render_fps"]``, e.g. the classic-control envs), else 1 s with a warning."""
    dt = _attr(vec, "dt", None)
    if dt is None:
        fps = vec.metadata.get("render_fps")  # a SyncVectorEnv's is its envs' (a VectorEnv of ours: its control rate)
        if fps:
            return 1.0 / float(fps)
        warnings.warn("the Gymnasium env has neither dt nor metadata['render_fps']: control_dt is taken as 1 s "
                      "(it paces `robolearn play` and real-time runs)", stacklevel=3)
        return 1.0
    return float(dt)


def _mujoco_data(vec: VectorEnv) -> list:
    """Each env's ``MjData`` where ``vec`` steps MuJoCo envs in this process (a ``SyncVectorEnv``), else []:
    an ``AsyncVectorEnv``'s live in its workers."""
    if not isinstance(vec, SyncVectorEnv):
        return []
    data = [getattr(env.unwrapped, "data", None) for env in vec.envs]
    return data if all(isinstance(d, mujoco.MjData) for d in data) else []


def _bad_states(physics: list) -> np.ndarray:
    """Per env, how many times MuJoCo found its state bad (NaN, inf or beyond ``mjMAXVAL`` in qpos, qvel or
    qacc) and reset it since its last reset: MuJoCo's own warning counts, which ``mj_resetData`` clears."""
    bad = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADQACC)
    return np.array([sum(data.warning[w].number for w in bad) for data in physics], dtype=np.int64)


def _attr(vec: VectorEnv, name: str, default: Any) -> Any:
    """Attribute ``name`` of the first sub-env (through its wrappers), or ``default``."""
    try:
        return vec.get_attr(name)[0]
    except AttributeError:
        return default


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """``frame`` scaled (nearest neighbour) to fit ``height`` x ``width`` with its own proportions, the rest
    filled with its corner's colour: Gymnasium envs fix their frame size at creation (Pendulum-v1's is 500 x
    500, which squeezed to 320 x 240 had drawn its rod a third longer lying than standing)."""
    scale = min(height / frame.shape[0], width / frame.shape[1])
    h, w = max(1, round(frame.shape[0] * scale)), max(1, round(frame.shape[1] * scale))
    rows, cols = np.arange(h) * frame.shape[0] // h, np.arange(w) * frame.shape[1] // w
    out = np.empty((height, width, *frame.shape[2:]), frame.dtype)
    out[...] = frame[0, 0]
    top, left = (height - h) // 2, (width - w) // 2
    out[top:top + h, left:left + w] = frame[rows][:, cols]
    return out
