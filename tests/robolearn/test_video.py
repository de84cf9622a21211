"""Filming: each episode's start is captioned with its number, so a reset does not look like a teleport."""

import imageio.v3 as iio
import numpy as np
import torch
from gymnasium import spaces

from robolearn.evaluate import caption, frame_step, record_video
from robolearn.interfaces import Step, VecEnv


class GrayRoom(VecEnv):
    """Plain gray frames; episodes of ``horizon`` steps of 0.1 s."""

    def __init__(self, horizon: int = 10, control_dt: float = 0.1) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = 1, torch.device("cpu"), control_dt, horizon
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


class Dimming(GrayRoom):
    """Each step a shade darker: no two frames alike (a GIF merges repeated frames into one)."""

    def render(self, index=0, width=320, height=240):
        return np.full((height, width, 3), 250 - int(self.t[0]), np.uint8)


class Still:
    def act(self, obs):
        return torch.zeros(1, 1)

    def reset(self, mask=None):
        pass


def test_each_episode_start_is_captioned_for_its_first_moments(tmp_path):
    path = record_video(Still(), GrayRoom(horizon=10), tmp_path / "film.mp4", seconds=2.5)
    frames = iio.imread(path)  # one frame per control step (0.1 s), episodes start at steps 0, 10 and 20
    corner = frames[:, 2:12, 2:30].astype(float)
    captioned = corner.mean(axis=(1, 2, 3)) < 100  # the caption's dark box on the gray room
    red, blue = corner[..., 0].mean(axis=(1, 2)), corner[..., 2].mean(axis=(1, 2))
    first = (red > 150) & (blue < 100)  # yellow: an episode's first frame
    assert (captioned | first).tolist() == [step % 10 < 6 for step in range(25)]  # 0.6 s of every episode
    assert first.tolist() == [step % 10 == 0 for step in range(25)]


def test_captions_show_their_text_in_the_corner_only():
    room = np.full((240, 320, 3), 160, np.uint8)
    one, two = caption(room, "episode 1"), caption(room, "episode 2")
    changed = (one != room).any(-1)
    rows, cols = changed.nonzero()
    assert rows.max() < 30 and cols.max() < 120, "a corner, not over the robot"
    assert (one != two).any(), "the number shows"
    assert (room == 160).all(), "the frame given is left as it was"


def test_films_play_in_real_time_gifs_in_whole_hundredths(tmp_path):
    """The hopper's 8 ms step filmed every 4th step had been written at round(31.25) = 31 fps (mp4: 0.8 % slow)
    and as 30 ms GIF frames (a GIF keeps hundredths of a second: 7 % fast)."""
    from PIL import Image

    assert (frame_step(0.008, 30), frame_step(0.008, 30, gif=True)) == (4, 5)
    assert frame_step(0.02, 30, gif=True) == 2 and frame_step(0.0165, 30, gif=True) == 2  # (none whole: as near)
    room = Dimming(horizon=1000, control_dt=0.008)
    assert iio.immeta(record_video(Still(), room, tmp_path / "film.mp4", seconds=0.5))["fps"] == 31.25
    with Image.open(record_video(Still(), room, tmp_path / "film.gif", seconds=0.5)) as gif:
        assert gif.info["duration"] == 40 and gif.n_frames == 13  # 62 steps, every 5th


class FreshFrames(GrayRoom):
    """A new frame array each call, as a renderer gives: a film held in memory grows with its length."""

    def render(self, index=0, width=320, height=240):
        return np.full((height, width, 3), 100 + int(self.t[0]) % 50, np.uint8)


def test_a_long_film_is_written_as_it_is_filmed_not_held_in_memory(tmp_path):
    # `robolearn play --seconds 3600` had kept every frame until the end (about 11 MB a filmed second at 320x240):
    # an hour's film ran the machine out of memory after filming for its whole length, and left nothing
    import tracemalloc

    tracemalloc.start()
    try:
        record_video(Still(), FreshFrames(horizon=50), tmp_path / "long.mp4", seconds=60)  # 600 frames, 138 MB held
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40e6, f"{peak / 1e6:.0f} MB held while filming"
    assert len(iio.imread(tmp_path / "long.mp4")) == 600
