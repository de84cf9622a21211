"""Filming: each episode's start is captioned with its number, so a reset does not look like a teleport."""

import imageio.v3 as iio
import numpy as np
import torch
from gymnasium import spaces

from robolearn.evaluate import caption, record_video
from robolearn.interfaces import Step, VecEnv


class GrayRoom(VecEnv):
    """Plain gray frames; episodes of ``horizon`` steps of 0.1 s."""

    def __init__(self, horizon: int = 10) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = 1, torch.device("cpu"), 0.1, horizon
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        self.action_spec = spaces.Box(-1, 1, (1,), np.float32)
        self.t = torch.zeros(1)

    def reset(self, seed=None):
        self.t.zero_()
        return {"policy": self.t.clone().unsqueeze(1)}

    def step(self, action):
        self.t += 1
        truncated = self.t >= self.max_episode_steps
        self.t[truncated] = 0
        obs = {"policy": self.t.clone().unsqueeze(1)}
        return Step(obs, torch.zeros(1), torch.zeros_like(truncated), truncated, {"final_obs": obs})

    def render(self, index=0, width=320, height=240):
        return np.full((height, width, 3), 160, np.uint8)


class Still:
    def act(self, obs):
        return torch.zeros(1, 1)

    def reset(self, mask=None):
        pass


def test_each_episode_start_is_captioned_for_its_first_moments(tmp_path):
    path = record_video(Still(), GrayRoom(horizon=10), tmp_path / "film.mp4", seconds=2.5)
    frames = iio.imread(path)  # one frame per control step (0.1 s), episodes start at steps 0, 10 and 20
    corner = frames[:, 2:12, 2:30].astype(float).mean(axis=(1, 2, 3))
    captioned = corner < 100  # the caption's dark box on the gray room
    assert captioned.tolist() == [step % 10 < 6 for step in range(25)]  # 0.6 s of every episode


def test_captions_show_their_text_in_the_corner_only():
    room = np.full((240, 320, 3), 160, np.uint8)
    one, two = caption(room, "episode 1"), caption(room, "episode 2")
    changed = (one != room).any(-1)
    rows, cols = changed.nonzero()
    assert rows.max() < 30 and cols.max() < 120, "a corner, not over the robot"
    assert (one != two).any(), "the number shows"
    assert (room == 160).all(), "the frame given is left as it was"
