"""mjlab tasks as our VecEnv, run for real on Warp's CPU device.

mjlab 1.6 pins mujoco 3.11 but runs on our mujoco / mujoco-warp 4.0 when
installed with ``--no-deps`` (see the install commands in the README). The
first run on a machine compiles Warp kernels (cold: about 35 s per test on 2
cores; warm, from ~/.cache/warp: about 2 s), hence ``slow``.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("mjlab")
from mjlab.tasks.registry import load_env_cfg  # noqa: E402

from sims import make_env  # noqa: E402
from sims.adapters.mjlab import MjlabVecEnv  # noqa: E402

pytestmark = pytest.mark.slow


def test_cartpole_time_limit_gives_true_final_obs() -> None:
    cfg = load_env_cfg("Mjlab-Cartpole-Balance")
    cfg.episode_length_s = 3 * cfg.sim.mujoco.timestep * cfg.decimation  # 3 control steps
    with MjlabVecEnv(cfg, num_envs=3, seed=0, action_limit=1.0) as env:
        assert env.max_episode_steps == 3 and env.control_dt == pytest.approx(0.05)
        assert set(env.observation_spec) == {"policy", "critic"} and env.action_spec.shape == (1,)
        obs = env.reset(seed=0)
        assert obs["policy"].shape == (3, *env.observation_spec["policy"].shape)
        for t in range(3):
            previous = obs
            obs, reward, terminated, truncated, info = env.step(torch.full((3, 1), 5.0))  # clipped to 1
            assert reward.shape == (3,) and torch.isfinite(reward).all()
        assert truncated.all() and not terminated.any()
        final = info["final_obs"]["policy"]
        # The last observation continues the episode (the cart moved on from the previous one),
        # while the returned one starts a new episode near the reset pose.
        assert not torch.allclose(final, previous["policy"]) and not torch.allclose(final, obs["policy"])
        env.episode_step = torch.tensor([0, 2, 1])  # only env 1 reaches its time limit on the next step
        assert env.mjlab.episode_length_buf.tolist() == [0, 2, 1]  # (env.random_episode_start sets it so)
        step = env.step(np.zeros((3, 1)))  # numpy too, as our envs take it (it had failed on `.to`)
        assert step.truncated.tolist() == [False, True, False]
        final, fresh = step.info["final_obs"]["policy"], step.obs["policy"]
        torch.testing.assert_close(final[[0, 2]], fresh[[0, 2]])
        assert not torch.allclose(final[1], fresh[1])


def test_go1_velocity_task_through_make_env() -> None:
    with make_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go1", num_envs=2, seed=0, action_limit=3.0) as env:
        assert isinstance(env, MjlabVecEnv)
        assert env.observation_spec["policy"].shape == (48,) and env.observation_spec["critic"].shape == (72,)
        assert env.action_spec.shape == (12,) and env.control_dt == pytest.approx(0.02)
        obs = env.reset(seed=0)
        for _ in range(5):
            obs, reward, terminated, truncated, info = env.step(torch.zeros(2, 12))
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all()
        assert not (terminated | truncated).any()  # standing still: no fall, no time limit
        assert info["log"] and all(torch.isfinite(torch.as_tensor(v)).all() for v in info["log"].values())


def test_randomization_is_refused() -> None:
    with pytest.raises(ValueError, match="mjlab tasks randomize"):
        make_env("mjlab:Mjlab-Cartpole-Balance", num_envs=1, randomization={"friction": [0.5, 1.0]})


def test_a_setting_mjlab_does_not_take_is_refused_by_name_before_any_env() -> None:
    """Our Go1 config's env.kwargs on an mjlab task had ended in the adapter's TypeError traceback."""
    from sims import check_task

    for refuse in (lambda: make_env("mjlab:Mjlab-Cartpole-Balance", num_envs=1, policy_linvel=False),
                   lambda: check_task("mjlab:Mjlab-Cartpole-Balance", {"policy_linvel": False, "action_limit": 1.0})):
        with pytest.raises(ValueError, match=r"env.kwargs.policy_linvel: an mjlab task takes only action_limit"):
            refuse()
