"""Isaac Lab / Isaac Gym envs as our VecEnv.

Neither simulator runs without an NVIDIA GPU and Isaac Sim, so the adapter is
tested against test doubles that follow each contract exactly as the real
code does (Isaac Lab's ``RslRlVecEnvWrapper``, legged_gym's ``LeggedRobot``):
reset inside ``step``, observations computed after the reset, ``time_outs`` in
``extras`` (legged_gym: a stale tensor when nothing resets). Then a real round
trip: our task -> RSL-RL adapter -> this adapter behaves like our task.
"""

import numpy as np
import pytest
import torch

import tensordict  # noqa: E402, F401  (rsl-rl-lib's dependency) the Isaac Lab double returns TensorDicts, as the real wrapper does
from tensordict import TensorDict  # noqa: E402

from sims import make_env  # noqa: E402
from sims.adapters.isaac import RslRlEnvAsVecEnv  # noqa: E402


class PointMass:
    """x' = x + a per step; terminates at |x| > 1, times out after ``max_episode_length`` steps.
    ``policy`` sees x, ``critic`` sees (x, steps); every episode starts at x = 0."""

    num_actions, dt = 1, 0.1

    def __init__(self, num_envs: int, max_episode_length: int = 4) -> None:
        self.num_envs, self.max_episode_length, self.device = num_envs, max_episode_length, "cpu"
        self.x = torch.zeros(num_envs)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.time_out_buf = torch.zeros(num_envs, dtype=torch.bool)
        self.extras: dict = {}

    def physics(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps, resets finished envs in place (as Isaac envs do) and returns (rewards, dones)."""
        self.x += actions[:, 0]
        self.episode_length_buf += 1
        terminated = self.x.abs() > 1
        self.time_out_buf = self.episode_length_buf >= self.max_episode_length  # rebinds, as legged_gym does
        dones = terminated | self.time_out_buf
        rewards = -self.x.abs()
        self.pre_reset = self.groups()  # the finished episodes' last observations, which a reset overwrites
        ids = dones.nonzero().flatten()
        if len(ids):  # legged_gym's reset_idx returns early when nothing resets
            self.x[ids] = 0
            self.episode_length_buf[ids] = 0
            self.extras["time_outs"] = self.time_out_buf
            self.extras["episode"] = {"rew_x": rewards[ids].mean()}
        return rewards, dones

    def groups(self) -> dict[str, torch.Tensor]:
        return {"policy": self.x[:, None].clone(),
                "critic": torch.stack([self.x, self.episode_length_buf.float()], 1)}


class IsaacLabWrapper(PointMass):
    """Isaac Lab's ``RslRlVecEnvWrapper`` (rsl-rl-lib >= 3): TensorDict groups, 4-tuple step."""

    clip_actions = 2.0

    def get_observations(self) -> TensorDict:
        return TensorDict(self.groups(), batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple:
        rewards, dones = self.physics(actions)
        extras = {"time_outs": self.time_out_buf & dones, "log": {"Metrics/x": self.x.mean()}}
        return self.get_observations(), rewards, dones.long(), extras


class IsaacLabKeepingFinalObs(IsaacLabWrapper):
    """Isaac Lab built with ``compute_final_obs=True``: the pre-reset observation groups in ``extras["final_obs"]``
    (left there, stale, on steps where nothing resets)."""

    def step(self, actions: torch.Tensor) -> tuple:
        obs, rewards, dones, extras = super().step(actions)
        return obs, rewards, dones, {**extras, "final_obs": TensorDict(self.pre_reset, batch_size=[self.num_envs])}


class LeggedGymRobot(PointMass):
    """legged_gym's ``LeggedRobot``: tensor observations, privileged ones apart, 5-tuple step."""

    def get_observations(self) -> torch.Tensor:
        return self.groups()["policy"]

    def get_privileged_observations(self) -> torch.Tensor:
        return self.groups()["critic"]

    def step(self, actions: torch.Tensor) -> tuple:
        rewards, dones = self.physics(actions)
        return self.get_observations(), self.get_privileged_observations(), rewards, dones, self.extras


@pytest.mark.parametrize("fake", [IsaacLabWrapper, LeggedGymRobot])
def test_dones_split_into_terminated_and_truncated(fake: type[PointMass]) -> None:
    env = RslRlEnvAsVecEnv(fake(num_envs=2))
    assert env.control_dt == pytest.approx(0.1) and env.max_episode_steps == 4
    assert env.observation_spec["policy"].shape == (1,) and env.observation_spec["critic"].shape == (2,)
    assert env.reset()["policy"].shape == (2, 1)
    # env 0 walks out (terminates at step 3), env 1 stands still (times out at step 4).
    actions = torch.tensor([[0.4], [0.0]])
    seen = []
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(actions)
        seen.append((terminated.tolist(), truncated.tolist()))
    assert seen == [([False, False], [False, False]), ([False, False], [False, False]),
                    ([True, False], [False, False]), ([False, False], [False, True]),
                    ([False, False], [False, False])]  # the last step: legged_gym's time_outs are stale
    # each simulator's scalars reach the log: Isaac Lab's extras["log"], legged_gym's extras["episode"] (kept
    # from its last reset, as legged_gym leaves it)
    assert set(info["log"]) == ({"Metrics/x"} if fake is IsaacLabWrapper else {"rew_x"})


def test_final_obs_of_finished_envs_is_the_previous_observation() -> None:
    """What we can honestly give: the env's last pre-step observation, not s_T."""
    env = RslRlEnvAsVecEnv(LeggedGymRobot(num_envs=2))
    actions = torch.tensor([[0.4], [0.0]])
    env.step(actions)
    before = env.step(actions).obs  # x = 0.8 in env 0
    step = env.step(actions)  # env 0 goes to 1.2, terminates and resets to 0
    assert step.terminated.tolist() == [True, False]
    assert step.obs["policy"][0, 0] == 0 and step.info["final_obs"]["policy"][0, 0] == pytest.approx(0.8)
    torch.testing.assert_close(step.info["final_obs"]["critic"][0], before["critic"][0])
    torch.testing.assert_close(step.info["final_obs"]["policy"][1], step.obs["policy"][1])


def test_final_obs_that_isaac_lab_keeps_is_the_last_observation_of_the_episode() -> None:
    """Isaac Lab's extras["final_obs"] (compute_final_obs=True) holds s_T: it had gone unread, the pre-step
    observation given instead."""
    env = RslRlEnvAsVecEnv(IsaacLabKeepingFinalObs(num_envs=2))
    actions = torch.tensor([[0.4], [0.0]])
    env.step(actions)
    env.step(actions)
    step = env.step(actions)  # env 0 goes from 0.8 to 1.2, terminates and resets to 0
    assert step.terminated.tolist() == [True, False] and step.obs["policy"][0, 0] == 0
    torch.testing.assert_close(step.info["final_obs"]["policy"][0], torch.tensor([1.2]))
    torch.testing.assert_close(step.info["final_obs"]["critic"][0], torch.tensor([1.2, 3.0]))
    torch.testing.assert_close(step.info["final_obs"]["critic"][1], step.obs["critic"][1])  # not finished: obs
    step = env.step(actions)  # env 1 times out at x = 0; env 0's stale final_obs (1.2) is not read
    assert step.truncated.tolist() == [False, True]
    torch.testing.assert_close(step.info["final_obs"]["critic"], torch.tensor([[0.4, 1.0], [0.0, 4.0]]))


def test_actions_are_clipped_to_the_env_clip() -> None:
    env = RslRlEnvAsVecEnv(IsaacLabWrapper(num_envs=1, max_episode_length=100))
    assert env.action_spec.high[0] == 2.0
    env.step(torch.tensor([[0.5]]))
    step = env.step(torch.tensor([[-9.0]]))
    assert step.terminated.item() and step.reward.item() == pytest.approx(-1.5)  # -|0.5 - 2|: clipped, not 0.5 - 9
    assert RslRlEnvAsVecEnv(LeggedGymRobot(num_envs=1)).action_spec.high[0] == float("inf")


def test_a_numpy_action_steps_and_a_wrong_shape_is_said_as_our_envs_say_it() -> None:
    """A numpy action had failed on ``.to`` ('numpy.ndarray' object has no attribute 'to'); our envs take it."""
    env = RslRlEnvAsVecEnv(IsaacLabWrapper(num_envs=2, max_episode_length=100))
    step = env.step(np.array([[0.5], [-0.25]]))
    assert step.reward.tolist() == pytest.approx([-0.5, -0.25])
    with pytest.raises(ValueError, match=r"action: expected shape \(2, 1\).*got \(2,\)"):
        env.step(torch.zeros(2))


def test_round_trip_through_rsl_rl_behaves_like_our_task() -> None:
    """ours -> VecEnvAsRslRl -> RslRlEnvAsVecEnv steps like ours; only final_obs of
    finished episodes is the documented approximation."""
    import rsl_rl  # noqa: F401  (a declared dependency: missing, a failure)
    from sims.adapters.rsl_rl import VecEnvAsRslRl

    direct = make_env("hopper", num_envs=4, seed=0, max_episode_steps=20)
    direct_obs = direct.reset(seed=3)
    inner = VecEnvAsRslRl(make_env("hopper", num_envs=4, seed=0, max_episode_steps=20), seed=3)
    round_trip = RslRlEnvAsVecEnv(inner, action_limit=1.0)
    assert round_trip.control_dt == direct.control_dt and round_trip.max_episode_steps == 20
    assert round_trip.observation_spec["policy"].shape == direct.observation_spec["policy"].shape
    torch.testing.assert_close(round_trip.reset()["policy"], direct_obs["policy"])
    generator = torch.Generator().manual_seed(0)
    previous = direct_obs
    ended = 0
    for _ in range(45):
        action = torch.rand(4, 3, generator=generator) * 2 - 1
        a, b = direct.step(action), round_trip.step(action)
        torch.testing.assert_close(a.obs["policy"], b.obs["policy"])
        torch.testing.assert_close(a.reward, b.reward)
        assert torch.equal(a.terminated, b.terminated) and torch.equal(a.truncated, b.truncated)
        done = a.terminated | a.truncated
        expected = torch.where(done[:, None], previous["policy"], a.info["final_obs"]["policy"])
        torch.testing.assert_close(b.info["final_obs"]["policy"], expected)
        previous, ended = a.obs, ended + int(done.sum())
    assert ended >= 8  # terminations and time limits both happened
    direct.close()
    round_trip.close()


@pytest.mark.parametrize("task", ["isaaclab:Isaac-Velocity-Flat-Anymal-C-v0", "isaacgym:anymal", "legged_gym:a1"])
def test_an_isaac_task_name_says_there_is_no_prefix_and_what_to_use(task) -> None:
    """It had been read as a module of one's own: 'no module isaaclab...; add it to PYTHONPATH'."""
    from sims import make_env

    with pytest.raises(ValueError, match=rf"env.task={task}: Isaac Lab and Isaac Gym envs have no task prefix here "
                                         r".*sims.adapters.isaac.RslRlEnvAsVecEnv"):
        make_env(task, num_envs=1)


def test_an_env_without_seed_is_reset_unseeded_with_a_word_so_evaluate_runs() -> None:
    """legged_gym's envs have no seed(): evaluate (seed 0 by default) had failed, "cannot be seeded"."""
    import warnings

    from robolearn.evaluate import evaluate

    class Resettable(LeggedGymRobot):
        def reset(self) -> None:
            self.x.zero_()
            self.episode_length_buf.zero_()

    class Still(torch.nn.Module):
        def act(self, obs: dict) -> torch.Tensor:
            return torch.zeros(obs["policy"].shape[0], 1)

        def reset(self, mask=None) -> None:
            pass

    env = RslRlEnvAsVecEnv(Resettable(num_envs=2))
    with pytest.warns(UserWarning, match=r"Resettable has no seed\(\): reset\(seed=0\) resets it unseeded"):
        result = evaluate(Still(), env, 2)
    assert result["episodes"] == 2 and result["return_mean"] == 0.0  # standing at x = 0 for 4 steps
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        env.reset(seed=1)
    with pytest.raises(ValueError, match=r"LeggedGymRobot has neither seed\(\) nor reset\(\)"):
        RslRlEnvAsVecEnv(LeggedGymRobot(num_envs=2)).reset(seed=0)
