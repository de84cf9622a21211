"""Domain randomization: per-world physics, latency, delay, noise, automatic widening."""

import pytest
import torch

import sims
from robolearn.config import ConfigError
from sims.randomization import TERMS, Randomization, RandomizedEnv
from sims.worlds import Worlds


def _env(num_envs=6, **cfg):
    return sims.make_env("arm_reach", num_envs, seed=1, randomization=cfg)


def test_physics_fields_are_drawn_per_world_within_range():
    env = _env(mass_scale=[0.5, 2.0], gain_scale=[0.6, 0.9], damping_scale=[1.0, 3.0])
    nominal = sims.make_env("arm_reach", 1).sim
    mass = env.sim.get_model_field("body_mass")[:, 1:-1] / nominal.get_model_field("body_mass")[:, 1:-1]  # skip world and mocap target
    assert mass.min() >= 0.5 and mass.max() <= 2.0
    assert torch.allclose(mass, mass[:, :1].expand_as(mass))  # one scale per world
    assert mass[:, 0].unique().numel() == 6  # and different worlds differ
    kp = -env.sim.get_model_field("actuator_biasprm")[:, :, 1] / -nominal.get_model_field("actuator_biasprm")[:, :, 1]
    assert kp.min() >= 0.6 - 1e-6 and kp.max() <= 0.9 + 1e-6
    gain = env.sim.get_model_field("actuator_gainprm")[:, :, 0] / nominal.get_model_field("actuator_gainprm")[:, :, 0]
    torch.testing.assert_close(gain, kp)  # position servo: gain and bias scale together
    kv = env.sim.get_model_field("actuator_biasprm")[:, :, 2] / nominal.get_model_field("actuator_biasprm")[:, :, 2]
    torch.testing.assert_close(kv, kp)  # the servo's damping term with its stiffness
    inertia = env.sim.get_model_field("body_inertia")[:, 1:-1] / nominal.get_model_field("body_inertia")[:, 1:-1]
    torch.testing.assert_close(inertia, mass.unsqueeze(-1).expand_as(inertia))  # a body scaled as a whole
    damping = env.sim.get_model_field("dof_damping") / nominal.get_model_field("dof_damping")
    assert damping.min() >= 1.0 - 1e-6 and damping.max() <= 3.0 + 1e-6
    assert torch.allclose(damping, damping[:, :1].expand_as(damping)) and damping[:, 0].unique().numel() == 6


@pytest.mark.parametrize("pool", [0, 5], ids=["fresh-draws", "pool"])
def test_the_drawn_extremes_are_logged_as_the_worlds_hold_them(pool):
    """Nothing had said what a run's dynamics were drawn from (randomization draws were not logged)."""
    env = _env(num_envs=16, mass_scale=[0.5, 2.0], action_latency_s=[0.0, 0.04], obs_delay_steps=[0, 2],
               width=0.5, dynamics_pool=pool)
    log = env.step(torch.zeros(16, 4)).info["log"]
    nominal = sims.make_env("arm_reach", 1).sim.get_model_field("body_mass")[0, 1]
    mass = env.sim.get_model_field("body_mass")[:, 1] / nominal
    assert float(log["randomization/mass_scale_min"]) == pytest.approx(float(mass.min()), rel=1e-5)
    assert float(log["randomization/mass_scale_max"]) == pytest.approx(float(mass.max()), rel=1e-5)
    assert 0.75 - 1e-6 <= float(mass.min()) < float(mass.max()) <= 1.5 + 1e-6  # half of each range: width 0.5
    assert 0.0 <= float(log["randomization/action_latency_s_min"]) <= float(log["randomization/action_latency_s_max"]) <= 0.02 + 1e-6
    assert float(log["randomization/obs_delay_steps_max"]) <= 1.0
    assert "randomization/gain_scale_min" not in log  # a range left at nominal is not logged


def test_action_latency_delays_the_actuators():
    env = _env(num_envs=2, action_latency_s=[0.04, 0.04])  # two control steps of 0.02 s
    actions = [torch.full((2, 4), 0.1 * i) for i in range(1, 6)]
    for i, a in enumerate(actions):
        env.step(a)
        expected = actions[max(0, i - 2)]  # the first action fills the queue
        torch.testing.assert_close(env.sim.ctrl.float(), expected)


def test_latency_below_a_control_step_acts_within_the_physics_step():
    on_time = sims.make_env("arm_reach", 2, seed=4)
    late = _env(num_envs=2, action_latency_s=[0.01, 0.01])  # 5 of the 10 physics substeps
    late.env.reset(seed=4)
    on_time.reset(seed=4)
    torch.testing.assert_close(late.sim.qpos, on_time.sim.qpos)
    assert late.env.actuation_delay.tolist() == [5, 5]
    first = torch.full((2, 4), 0.1)
    late.step(first)  # an episode's first action acts at once (the reset left no control to hold; ctrl 0 would
    on_time.step(first)  # be a joint target, not "no command")
    torch.testing.assert_close(late.sim.qpos, on_time.sim.qpos)
    goal = torch.tensor([[0.25, 0.25, -0.05, 0.25]] * 2)  # within the task's goal-step limit of the first
    late.step(goal)
    on_time.step(goal)
    torch.testing.assert_close(late.sim.ctrl.float(), goal)  # the new goal acts by the end of the step
    lag = (late.sim.qpos - goal).abs().sum(1)
    assert bool((lag > (on_time.sim.qpos - goal).abs().sum(1) + 1e-3).all())  # but it started later


def test_observation_delay_shows_the_past():
    env = _env(num_envs=2, obs_delay_steps=[3, 3])
    inner = []
    step_inner = env.env.step

    def spy(action):
        out = step_inner(action)
        inner.append(out.info["final_obs"]["policy"].clone())
        return out

    env.env.step = spy
    first = env.reset(seed=0)["policy"].clone()
    seen = [env.step(torch.zeros(2, 4)).obs["policy"] for _ in range(6)]
    for t in range(3):  # the policy sees its episode's first frame until 3 steps have passed
        torch.testing.assert_close(seen[t], first)
    torch.testing.assert_close(seen[3], inner[0])
    torch.testing.assert_close(seen[5], inner[2])


def test_noise_perturbs_the_policy_observation_by_its_std():
    env = _env(num_envs=64, obs_noise_std=0.5)
    noisy = env.step(torch.zeros(64, 4)).obs["policy"]
    noise = noisy - env.env.task.observations(env.sim)["policy"]
    assert abs(float(noise.std()) - 0.5) < 0.05 and abs(float(noise.mean())) < 0.05


def test_auto_widens_while_successful_and_not_otherwise():
    always = _env(num_envs=4, mass_scale=[0.5, 2.0], auto=True, auto_success=0.0, auto_window=4, auto_step=0.25)
    never = _env(num_envs=4, mass_scale=[0.5, 2.0], auto=True, auto_success=1.0, auto_window=4, auto_step=0.25)
    assert always.width == never.width == 0.0
    for env in (always, never):
        for _ in range(3 * env.max_episode_steps):
            step = env.step(torch.zeros(4, 4))
    assert always.width == 0.75 and step.info["log"]["randomization/width"] == 0.0  # `never` logged last
    assert never.width == 0.0  # zeros never reach a target


def test_bad_randomization_config_names_the_key():
    with pytest.raises(ConfigError,
                       match=r"^unknown key .randomization.mass_scal. \(did you mean .randomization.mass_sc"):
        _env(mass_scal=[1, 2])
    with pytest.raises(ValueError, match="mass_scale"):
        Randomization(mass_scale=(2.0, 1.0))
    with pytest.raises(ValueError, match="our tasks"):
        sims.make_env("gym:Pendulum-v1", 1, randomization={"mass_scale": [1, 2]})


@pytest.mark.parametrize("settings, says", [
    ({"mass_scale": (0.0, 0.0)}, r"env.randomization.mass_scale: scales multiply .* need 0 < low"),  # trained "fine"
    ({"mass_scale": (-1.0, 1.0)}, r"env.randomization.mass_scale: scales multiply .* need 0 < low"),  # (had said 0 <=)
    ({"action_latency_s": (-0.01, 0.0)}, r"env.randomization.action_latency_s: need 0 <= low <= high"),
    ({"obs_noise_std": -1.0}, r"env.randomization.obs_noise_std must be >= 0, got -1"),
    ({"push_velocity": -2.0}, r"env.randomization.push_velocity must be >= 0"),
    ({"push_velocity": 0.5}, r"a push needs push_every_s .* and push_velocity .* both > 0, got 0.0 and 0.5"),
    ({"push_every_s": 10.0}, r"a push needs push_every_s .* and push_velocity .* both > 0, got 10.0 and 0.0"),
    ({"auto": True, "auto_step": -0.1}, r"auto_step must be > 0 and auto_window >= 1"),
    ({"auto_window": 0}, r"auto_step must be > 0 and auto_window >= 1"),
])
def test_settings_that_would_train_on_nothing_are_refused(settings, says):
    with pytest.raises(ValueError, match=says):
        Randomization(**settings)


def test_delays_no_episode_outlasts_are_refused_by_key():
    for delay, key in (({"randomization": {"obs_delay_steps": [0, 100]}}, "randomization.obs_delay_steps"),
                       ({"randomization": {"action_latency_s": [0.0, 20.0]}}, "randomization.action_latency_s"),
                       ({"delay": {"obs_delay_steps": 100}}, "delay.obs_delay_steps"),
                       ({"delay": {"action_latency_steps": 100}}, "delay.action_latency_steps")):
        with pytest.raises(ValueError, match=rf"^{key}: a delay of \d+ control steps is not shorter than an episode "
                                             r"\(100 steps\)"):
            sims.make_env("arm_reach", 2, seed=1, max_episode_steps=100, **delay)
    with pytest.raises(ValueError, match="^delay.action_latency_steps must be >= 0, got -1"):
        sims.make_env("arm_reach", 2, delay={"action_latency_steps": -1})
    # each shorter than an episode, together not (they add up: checked one at a time, they had trained)
    with pytest.raises(ValueError, match=r"^delay.obs_delay_steps with randomization's most: a delay of 120 "
                                         r"control steps is not shorter than an episode \(100 steps\)"):
        sims.make_env("arm_reach", 2, seed=1, max_episode_steps=100, delay={"obs_delay_steps": 60},
                      randomization={"obs_delay_steps": [60, 60]})
    sims.make_env("arm_reach", 2, seed=1, max_episode_steps=100, delay={"obs_delay_steps": 49},
                  randomization={"obs_delay_steps": [0, 50]}).close()


def test_every_randomization_at_once_steps_through_an_episode_end_with_finite_observations():
    """Latency, observation delay and pushes together (each is checked alone above), across a reset."""
    env = _env(num_envs=2, action_latency_s=[0.0, 0.05], obs_delay_steps=[0, 2], push_every_s=0.1, push_velocity=0.5)
    assert isinstance(env, RandomizedEnv)
    ended = torch.zeros(2, dtype=torch.bool)
    for _ in range(env.max_episode_steps + 5):
        step = env.step(torch.zeros(2, 4))
        assert step.obs["policy"].shape == (2, 14) and torch.isfinite(step.obs["policy"]).all()
        ended |= step.truncated
    assert ended.all()


def test_dynamics_drawn_once_stay_through_resets():
    from sims import make_env

    env = make_env("hopper", 4, seed=0, randomization={"mass_scale": [0.5, 1.5], "dynamics_every_episode": False})
    masses = env.sim.get_model_field("body_mass").clone()
    assert masses.std(0).max() > 0  # drawn per world at the start
    for _ in range(300):  # hopper episodes end within a few hundred random steps
        env.step(torch.rand(4, 3) * 2 - 1)
    torch.testing.assert_close(env.sim.get_model_field("body_mass"), masses)

    every = make_env("hopper", 4, seed=0, randomization={"mass_scale": [0.5, 1.5]})
    before = every.sim.get_model_field("body_mass").clone()
    for _ in range(300):
        every.step(torch.rand(4, 3) * 2 - 1)
    assert not torch.equal(every.sim.get_model_field("body_mass"), before)


def test_auto_widening_needs_dynamics_every_episode():
    from sims.randomization import Randomization

    with pytest.raises(ValueError, match="dynamics_every_episode"):
        Randomization(mass_scale=(0.8, 1.2), auto=True, dynamics_every_episode=False)


def test_filling_a_delay_line_by_mask_equals_filling_it_by_index():
    from sims.delay import DelayLine

    first = torch.arange(8.0).view(4, 2)
    by_index, by_mask = DelayLine(3, first), DelayLine(3, first)
    for line in (by_index, by_mask):
        line.push(first + 10)
    value, mask = -torch.ones(4, 2), torch.tensor([True, False, True, False])
    by_index.fill(mask.nonzero().squeeze(1), value[mask])
    by_mask.fill_where(mask, value)
    assert torch.equal(by_index.buffer, by_mask.buffer)
    assert torch.equal(by_mask.read(torch.tensor([2, 2, 0, 0])), torch.tensor([[-1.0, -1.0], [2.0, 3.0], [-1, -1], [16, 17]]))


def test_auto_on_a_task_without_success_is_refused():
    """It had stayed at width 0 for the whole run: no randomization, and no word of it."""
    with pytest.raises(ValueError, match="task Hopper reports no success: set fixed ranges"):
        sims.make_env("hopper", 2, randomization={"mass_scale": [0.5, 1.5], "auto": True})


def test_noise_on_a_task_without_a_policy_group_is_refused():
    """A task of one's own whose groups have other names had been 'randomized: obs_noise_std' with no noise."""
    from sims.tasks.pendulum import Pendulum

    class State(Pendulum):
        def observations(self, sim):
            return {"state": super().observations(sim)["policy"]}

    env = sims.TaskEnv(State(), sims.make_backend("mujoco", State(), 2, "cpu", 1))
    with pytest.raises(ValueError, match=r"obs_noise_std adds noise to the 'policy' observation group, and task State "
                                         r"has none \(its groups: \['state'\]\)"):
        RandomizedEnv(env, Randomization(obs_noise_std=0.01), seed=0)


def test_pushes_kick_some_worlds_within_the_bound_and_leave_the_rest_exactly():
    env = _env(num_envs=64, push_every_s=0.04, push_velocity=0.5)  # chance control_dt / 0.04 = 0.5 a step
    before = env.sim.qvel.clone()
    env._push()
    change = (env.sim.qvel - before).abs()
    pushed = change.amax(1) > 0
    assert 10 < int(pushed.sum()) < 54  # about half of them
    assert change.max() <= 0.5 and (change[~pushed] == 0).all()  # the others' velocities untouched, bit for bit


def test_a_dynamics_pool_draws_each_episode_from_variants_drawn_at_the_start():
    env = _env(num_envs=4, mass_scale=[0.5, 2.0], friction_scale=[0.5, 1.5], dynamics_pool=10)
    pool = env._pool
    assert set(pool) >= {"body_mass", "body_inertia", "geom_friction"} and len(pool["body_mass"]) == 10
    nominal = sims.make_env("arm_reach", 1).sim.get_model_field("body_mass")[0, 1:-1]
    scale = pool["body_mass"][:, 1:-1] / nominal
    assert scale.min() >= 0.5 and scale.max() <= 2.0 and scale[:, 0].unique().numel() == 10
    for _ in range(3):
        env._resample(Worlds(ids=torch.arange(4)))
        masses = env.sim.get_model_field("body_mass")
        variants = pool["body_mass"].to(masses.dtype)  # (as drawn, float64; the backend reports float32)
        assert all((variants == row).all(1).any() for row in masses)  # every world holds a variant
    with pytest.raises(ValueError, match="dynamics_pool: 0 .* or a number of variants"):
        Randomization(mass_scale=(0.8, 1.2), dynamics_pool=8, dynamics_every_episode=False)
    with pytest.raises(ValueError, match="set dynamics_pool: 0"):
        Randomization(mass_scale=(0.8, 1.2), dynamics_pool=8, auto=True)


def test_a_latency_of_a_whole_number_of_control_steps_is_all_of_them():
    """0.58 s / 0.02 s is 28.999... in floating point: the line once held 29 slots and applied 28 steps."""
    env = _env(num_envs=2, action_latency_s=[0.58, 0.58])
    assert env._latency.tolist() == [29, 29] and len(env._actions.buffer) == 30


def test_a_seeded_reset_draws_the_same_dynamics_again():
    """The randomization's own generator had been seeded once at construction: reset(seed=3) twice drew
    other masses, so one seed did not give one set of episodes (nor an evaluation its dynamics)."""
    env = sims.make_env("pendulum", 4, seed=0, randomization={"mass_scale": [0.5, 1.5]})
    env.reset(seed=3)
    first = env.sim.get_model_field("body_mass").clone()
    env.reset(seed=4)
    assert not torch.equal(env.sim.get_model_field("body_mass"), first)
    env.reset(seed=3)
    assert torch.equal(env.sim.get_model_field("body_mass"), first)
    env.close()


def test_per_robot_dynamics_stay_whatever_a_later_reset_seed():
    """dynamics_every_episode: false draws each world's dynamics once: a resume, which resets with another seed,
    had drawn other robots."""
    env = sims.make_env("pendulum", 4, seed=0, randomization={"mass_scale": [0.5, 1.5], "dynamics_every_episode": False})
    robots = env.sim.get_model_field("body_mass").clone()
    env.reset(seed=11)
    assert torch.equal(env.sim.get_model_field("body_mass"), robots)
    env.close()


def test_a_runs_env_is_built_nominal_from_python_as_eval_nominal_does(tmp_path):
    """`robolearn eval RUN --nominal` had been the CLI's alone: from Python, make_env(run) always randomized."""
    import yaml

    import robolearn
    from robolearn.config import load_config, to_dict
    from sims.delay import DelayedEnv

    cfg = load_config("ppo_arm_reach_dr", {"env.delay": {"obs_delay_steps": 1}})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    for run in (tmp_path, cfg):
        with robolearn.make_env(run, num_envs=2) as randomized, robolearn.make_env(run, num_envs=2, nominal=True) as nominal:
            assert isinstance(randomized, DelayedEnv) and isinstance(randomized.env, RandomizedEnv)
            assert isinstance(nominal, DelayedEnv) and not isinstance(nominal.env, RandomizedEnv)  # its delays kept
    assert cfg.env.randomization  # the config given is left as it was


def test_a_delayed_env_steps_when_built_as_the_env_it_wraps_does():
    """env.delay's wrapper had no observation history until reset(): a first step raised KeyError: 'policy'."""
    delay = {"obs_delay_steps": 1, "action_latency_steps": 1}
    built = sims.make_env("pendulum", 2, seed=0, delay=delay)
    reset = sims.make_env("pendulum", 2, seed=0, delay=delay)
    reset.reset(seed=0)
    for _ in range(3):
        action = torch.ones(2, 1)
        torch.testing.assert_close(built.step(action).obs["policy"], reset.step(action).obs["policy"])


@pytest.mark.parametrize("wrapper", [{"delay": {"action_latency_steps": 1}},
                                     {"randomization": {"action_latency_s": [0.0, 0.04]}}])
def test_the_delaying_wrappers_check_actions_as_the_env_does(wrapper):
    """A first action of another shape had set the delay line's (every later right action was then refused, named
    by the wrong one's shape); numpy actions had failed on .to(); a wrong shape in randomization was torch's error."""
    import numpy as np

    with sims.make_env("cartpole", 2, seed=0, **wrapper) as env:
        with pytest.raises(ValueError, match=r"action: expected shape \(2, 1\) \(num_envs, \*action_spec.shape\), "
                                             r"got \(2, 2\)"):
            env.step(torch.zeros(2, 2))
        env.step(torch.zeros(2, 1))
        env.step(np.zeros((2, 1), np.float64))
        with pytest.raises(ValueError, match="NaN or inf"):
            env.step(torch.full((2, 1), float("nan")))


def test_draws_scale_the_models_own_values_so_width_0_is_the_nominal_model():
    """The nominal values had been read back through the backend's float32 tensors, so every draw (a pool's
    variants too) scaled a rounded value: a scale of 1 was not the model's (half_cheetah's 6.25 kg torso 1.3e-7 kg off), and
    at width 0 (auto's start, said "nominal") half_cheetah's episodes came out otherwise than nominal ones
    (returns -502 against -397)."""
    randomized = sims.make_env("half_cheetah", 2, seed=0, randomization={"mass_scale": [0.5, 1.5],
                                                                           "friction_scale": [0.5, 1.5], "width": 0.0})
    nominal = sims.make_env("half_cheetah", 2, seed=0)
    for _ in range(30):
        action = torch.full((2, 6), 0.5)
        torch.testing.assert_close(randomized.step(action).obs["policy"], nominal.step(action).obs["policy"],
                                   rtol=0, atol=0)
    pooled = sims.make_env("half_cheetah", 2, seed=0, randomization={"mass_scale": [0.5, 1.5], "dynamics_pool": 3})
    model = torch.as_tensor(pooled.sim.model.body_mass)
    assert torch.equal(pooled._pool["body_mass"], model * pooled._pool_scales["mass_scale"].unsqueeze(1))


@pytest.mark.parametrize("wrapper", [{"delay": {"obs_delay_steps": 2}}, {"randomization": {"obs_delay_steps": [2, 2]}}])
def test_an_observation_delay_leaves_the_critics_privileged_state_as_it_is(wrapper):
    """The policy's observation lags; the critic's group (privileged sim-only state, never a deployed controller's
    input) had lagged with it, so the critic valued the state of two steps before."""
    with sims.make_env("go1_flat", 2, seed=0, **wrapper) as env:
        inner, step_inner = [], env.env.step

        def spy(action):
            out = step_inner(action)
            inner.append(out.info["final_obs"])
            return out

        env.env.step = spy
        first = env.reset(seed=0)
        seen = [env.step(torch.zeros(2, 12)) for _ in range(3)]
    for t, step in enumerate(seen):
        torch.testing.assert_close(step.obs["critic"], inner[t]["critic"])
        torch.testing.assert_close(step.info["final_obs"]["critic"], inner[t]["critic"])
        assert not torch.equal(step.obs["critic"], first["critic"])
    torch.testing.assert_close(seen[1].obs["policy"], first["policy"])  # the policy's first frame until 2 steps pass
    torch.testing.assert_close(seen[2].obs["policy"], inner[0]["policy"])


# Playground's Go1 recipe beyond one mass factor per world (mujoco_playground/_src/locomotion/go1/randomize.py)
PLAYGROUND = {"link_mass_scale": [0.9, 1.1], "torso_mass_kg": [-1.0, 1.0], "torso_com_m": [-0.05, 0.05],
              "armature_scale": [1.0, 1.05], "qpos0_offset": [-0.05, 0.05],
              "contact_friction_scale": [0.5, 1.25], "frictionloss_scale": [0.9, 1.1]}
TORSO = 1  # go1.xml's trunk: the floating-base body
EPS = 1e-6  # the backends report model fields in float32


def _go1(backend: str, seed: int = 0, num_envs: int = 8, **randomization):
    return sims.make_env("go1_flat", num_envs, seed=seed, backend=backend, device="cpu",
                         randomization={**PLAYGROUND, **randomization})


@pytest.mark.filterwarnings("ignore:backend=warp device=cpu")
@pytest.mark.parametrize("backend", ["mujoco", "warp"])
def test_playgrounds_go1_terms_change_every_world_within_their_ranges(backend):
    """Per-link masses, the torso's added mass and centre of mass, armature and qpos0, each drawn per world and
    per element, on CPU MuJoCo and on MuJoCo Warp (Warp's CPU device): only where and as far as the ranges say."""
    env = _go1(backend)
    model = env.sim.model

    def field(name: str) -> torch.Tensor:
        return env.sim.get_model_field(name).double().cpu()

    def compiled(name: str) -> torch.Tensor:
        return torch.as_tensor(getattr(model, name), dtype=torch.float64)

    def varies(values: torch.Tensor) -> bool:  # between worlds and between the elements of one world
        return bool(values.std(0).min() > 0) and bool(values.flatten(1).std(1).min() > 0)

    links = field("body_mass")[:, 2:] / compiled("body_mass")[2:]  # hips, thighs, calves
    assert 0.9 - EPS <= links.min() and links.max() <= 1.1 + EPS and varies(links)
    link_scale = env._drawn["link_mass_scale"].double().cpu()  # (the torso's factor, before its added mass)
    torso = field("body_mass")[:, TORSO] - compiled("body_mass")[TORSO] * link_scale[:, TORSO]
    assert -1.0 - 1e-5 <= torso.min() and torso.max() <= 1.0 + 1e-5 and torso.std() > 0.1
    torch.testing.assert_close(torso, env._drawn["torso_mass_kg"].double().cpu()[:, 0], atol=1e-5, rtol=0)
    # Playground changes body_mass alone: every inertia as compiled
    assert torch.equal(field("body_inertia"), compiled("body_inertia").float().double().expand(8, -1, -1))
    com = field("body_ipos") - compiled("body_ipos").float().double()
    assert com[:, TORSO].abs().max() <= 0.05 + EPS and varies(com[:, TORSO])  # x, y and z drawn apart
    assert (com[:, TORSO + 1:] == 0).all() and (com[:, 0] == 0).all()  # the other bodies' as compiled
    armature = field("dof_armature")[:, 6:] / compiled("dof_armature")[6:]  # the 12 leg joints
    assert 1.0 - EPS <= armature.min() and armature.max() <= 1.05 + EPS and varies(armature)
    assert (field("dof_armature")[:, :6] == 0).all()  # the free joint's (0 in go1.xml) stays 0
    qpos0 = field("qpos0") - compiled("qpos0").float().double()
    assert qpos0[:, 7:].abs().max() <= 0.05 + EPS and varies(qpos0[:, 7:])
    assert (qpos0[:, :7] == 0).all()  # the free joint's position and quaternion as compiled
    # The same seed draws the same robots, another seed others
    again, other = _go1(backend), _go1(backend, seed=1)
    for name in ("body_mass", "body_ipos", "dof_armature", "qpos0"):
        assert torch.equal(again.sim.get_model_field(name), env.sim.get_model_field(name)), name
        assert not torch.equal(other.sim.get_model_field(name), env.sim.get_model_field(name)), name
    for _ in range(3):  # and the robots step
        step = env.step(torch.zeros(8, 12))
        assert torch.isfinite(step.obs["policy"]).all() and torch.isfinite(step.obs["critic"]).all()
    # with the constants derived from each world's masses (MuJoCo Warp recomputes them before a step)
    torch.testing.assert_close(field("body_subtreemass")[:, 0], field("body_mass").sum(1), rtol=1e-5, atol=0)
    env.close()


@pytest.mark.filterwarnings("ignore:backend=warp device=cpu")
@pytest.mark.parametrize("backend", ["mujoco", "warp"])
def test_the_go1_terms_at_width_0_leave_the_model_as_compiled(backend):
    """Width 0 (automatic widening's start) draws scales of 1 and offsets of 0 for every world and writes them: the
    model fields and their derived constants must be the compiled ones, and on CPU MuJoCo the episodes the nominal
    env's, bit for bit."""
    randomized = _go1(backend, num_envs=4, width=0.0, mass_scale=[0.5, 1.5], friction_scale=[0.5, 1.5])
    nominal = sims.make_env("go1_flat", 4, seed=0, backend=backend, device="cpu")
    for name in ("body_mass", "body_inertia", "body_ipos", "dof_armature", "qpos0", "geom_friction",
                 "dof_frictionloss", "body_subtreemass", "body_invweight0", "dof_invweight0", "actuator_acc0"):
        assert torch.equal(randomized.sim.get_model_field(name), nominal.sim.get_model_field(name)), name
    assert randomized._drawn["torso_mass_kg"].abs().max() == 0 and randomized._drawn["link_mass_scale"].eq(1).all()
    assert randomized._drawn["contact_friction_scale"].eq(1).all() and randomized._drawn["frictionloss_scale"].eq(1).all()
    if backend == "mujoco":  # (MuJoCo Warp's float32 steps differ by ~1e-5 from the first, with mass_scale alone too)
        for _ in range(30):
            action = torch.full((4, 12), 0.5)
            torch.testing.assert_close(randomized.step(action).obs["critic"], nominal.step(action).obs["critic"],
                                       rtol=0, atol=0)


def test_the_go1_terms_are_logged_and_reported_as_the_other_ranges():
    """Each range's smallest and largest draw over the worlds and their elements (a link's, a dof's, an axis's) is
    logged, and an evaluation's report names the ranges."""
    from robolearn.config import EnvConfig
    from robolearn.registry import evaluation_dynamics

    env = _go1("mujoco", num_envs=6)
    log = env.step(torch.zeros(6, 12)).info["log"]
    for key, (low, high) in PLAYGROUND.items():
        drawn = env._drawn[key]
        assert float(log[f"randomization/{key}_min"]) == float(drawn.min()), key
        assert float(log[f"randomization/{key}_max"]) == float(drawn.max()), key
        assert low <= float(drawn.min()) < float(drawn.max()) <= high, key
    said = evaluation_dynamics(EnvConfig(task="go1_flat", randomization=PLAYGROUND))
    for key, value in PLAYGROUND.items():
        assert f"{key} {value}" in said


def test_offsets_may_be_negative_and_a_torso_left_without_mass_is_refused():
    Randomization(torso_mass_kg=(-1.0, 1.0), torso_com_m=(-0.05, 0.05), qpos0_offset=(-0.05, 0.05))
    with pytest.raises(ValueError, match=r"env.randomization.torso_com_m: need low <= high, got \[0.05, -0.05\]"):
        Randomization(torso_com_m=(0.05, -0.05))
    with pytest.raises(ValueError, match="armature_scale: scales multiply"):
        Randomization(armature_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"torso_mass_kg: \[-5.0, 0.0\] kg added to the torso would leave it "
                                         r"-0.316 kg at the ranges' lowest"):  # 5.204 kg x 0.9 - 5
        _go1("mujoco", num_envs=2, torso_mass_kg=[-5.0, 0.0])
    with pytest.raises(ValueError, match="^randomization.torso_com_m: the task's model has no floating-base body"):
        sims.make_env("pendulum", 2, randomization={"torso_com_m": [-0.05, 0.05]})


@pytest.mark.filterwarnings("ignore:backend=warp device=cpu")
def test_a_dynamics_pool_carries_the_go1_terms_and_their_constants_on_warp():
    """The pool's variants hold every new field, and the constants copied with them are what MuJoCo Warp's
    set_const computes for them (the torso's centre of mass, armature and qpos0 are set_const inputs too)."""
    env = _go1("warp", num_envs=4, dynamics_pool=6)
    assert {"body_mass", "body_ipos", "dof_armature", "qpos0"} <= set(env._pool)
    sim = env.sim
    for _ in range(2):
        env._resample(Worlds(ids=torch.arange(4)))
        for name in ("body_ipos", "dof_armature", "qpos0"):
            held = sim.get_model_field(name).double()
            assert all(bool((env._pool[name] - row).abs().amax(tuple(range(1, row.dim() + 1))).min() < 1e-7)
                       for row in held), name  # every world holds a variant (as float32)
        copied = {name: sim.get_model_field(name) for name in sim.constant_fields}
        sim._const_stale = True
        sim.refresh_constants()
        for name, value in copied.items():
            torch.testing.assert_close(sim.get_model_field(name), value, atol=1e-6, rtol=1e-5, msg=name)
        env.step(torch.zeros(4, 12))


def test_friction_scales_the_sliding_coefficient_and_the_joints_frictionloss_alone():
    """friction_scale is one factor per world on each geom's sliding friction (column 0 of geom_friction: the
    torsional and rolling ones as compiled) and on each joint's frictionloss."""
    env = _env(friction_scale=[0.5, 2.0])
    nominal = sims.make_env("arm_reach", 1).sim
    friction = env.sim.get_model_field("geom_friction") / nominal.get_model_field("geom_friction")
    sliding = friction[:, :, 0]
    assert 0.5 - 1e-6 <= sliding.min() and sliding.max() <= 2.0 + 1e-6 and sliding[:, 0].unique().numel() == 6
    torch.testing.assert_close(sliding, sliding[:, :1].expand_as(sliding))  # one factor per world
    torch.testing.assert_close(friction[:, :, 1:], torch.ones_like(friction[:, :, 1:]))
    loss = env.sim.get_model_field("dof_frictionloss") / nominal.get_model_field("dof_frictionloss")
    torch.testing.assert_close(loss, sliding[:, :1].expand_as(loss))


@pytest.mark.filterwarnings("ignore:backend=warp device=cpu")
@pytest.mark.parametrize("backend", ["mujoco", "warp"])
def test_contact_friction_and_frictionloss_each_change_their_field_alone(backend):
    """Playground's Go1 draws the contacts' friction and the joints' frictionloss apart (friction_scale scales both by
    one factor): contact_friction_scale is one factor per world on every geom's sliding friction, frictionloss_scale
    a factor per world and dof on dof_frictionloss; each leaves every other randomized field as compiled."""
    nominal = sims.make_env("go1_flat", 8, seed=0, backend=backend, device="cpu")
    for key, field, (low, high) in (("contact_friction_scale", "geom_friction", (0.5, 1.25)),
                                    ("frictionloss_scale", "dof_frictionloss", (0.9, 1.1))):
        env = sims.make_env("go1_flat", 8, seed=0, backend=backend, device="cpu", randomization={key: [low, high]})
        for other in dict.fromkeys(term.field for term in TERMS):
            if other != field:
                assert torch.equal(env.sim.get_model_field(other), nominal.sim.get_model_field(other)), (key, other)
        values = env.sim.get_model_field(field).double().cpu()
        compiled = torch.as_tensor(getattr(env.sim.model, field), dtype=torch.float64)
        drawn = env._drawn[key].double().cpu()
        if field == "geom_friction":  # (0.8 for every geom of go1.xml: floor, feet and trunk)
            scale = values[..., 0] / compiled[:, 0]
            torch.testing.assert_close(scale, scale[:, :1].expand_as(scale))  # one factor per world
            assert scale[:, 0].unique().numel() == 8 and drawn.shape == (8,)  # and the worlds' differ
            torch.testing.assert_close(scale[:, 0], drawn, rtol=1e-6, atol=0)
            # the torsional and rolling coefficients as compiled
            assert torch.equal(env.sim.get_model_field(field)[..., 1:], nominal.sim.get_model_field(field)[..., 1:])
        else:
            scale = values[:, 6:] / compiled[6:]  # the 12 leg joints (0.1 each)
            assert scale.std(0).min() > 0 and scale.std(1).min() > 0  # between worlds, and between one's joints
            torch.testing.assert_close(scale, drawn[:, 6:], rtol=1e-6, atol=0)
            assert (values[:, :6] == 0).all()  # the free joint's (0) stays 0
        assert low - EPS <= scale.min() and scale.max() <= high + EPS, key
        for _ in range(2):
            assert torch.isfinite(env.step(torch.zeros(8, 12)).obs["policy"]).all()
        env.close()


def test_friction_scale_and_the_split_ranges_multiply():
    """A config that sets friction_scale and contact_friction_scale or frictionloss_scale gets their product, in
    TERMS's order: the arm's servo frictionloss follows friction_scale's factor, times its own per dof."""
    env = _env(friction_scale=[2.0, 2.0], contact_friction_scale=[0.5, 1.0], frictionloss_scale=[0.9, 1.1])
    nominal = sims.make_env("arm_reach", 1).sim
    sliding = (env.sim.get_model_field("geom_friction") / nominal.get_model_field("geom_friction"))[:, :, 0]
    torch.testing.assert_close(sliding, 2 * env._drawn["contact_friction_scale"].unsqueeze(1).expand_as(sliding))
    loss = env.sim.get_model_field("dof_frictionloss") / nominal.get_model_field("dof_frictionloss")
    torch.testing.assert_close(loss, 2 * env._drawn["frictionloss_scale"])
    assert 1.8 - 1e-6 <= loss.min() and loss.max() <= 2.2 + 1e-6 and loss.std(1).min() > 0


def test_qpos0_offsets_shift_slide_joints_as_well_as_hinges():
    """A slide joint's qpos0 (a cart's position, in m) is offset as a hinge's is: cartpole's cart and pole."""
    env = sims.make_env("cartpole", 6, seed=1, randomization={"qpos0_offset": [0.1, 0.2]})
    shift = env.sim.get_model_field("qpos0").double() - torch.as_tensor(env.sim.model.qpos0).float().double()
    assert 0.1 - 1e-6 <= shift.min() and shift.max() <= 0.2 + 1e-6
    assert shift[:, 0].unique().numel() == 6 and shift[:, 1].unique().numel() == 6  # slide, then hinge
    assert bool((shift[:, 0] != shift[:, 1]).all())  # a draw per joint


@pytest.mark.parametrize("settings", [{"randomization": {"mass_scale": [2.0, 1.0]}},
                                      {"randomization": {"torso_com_m": [-0.1, 0.1]}},
                                      {"delay": {"obs_delay_steps": -1}, "randomization": {"mass_scale": [0.9, 1.1]}}])
def test_a_refused_randomization_or_delay_leaves_no_env_open(monkeypatch, settings):
    """The env make_env had built to randomize or delay stayed open where their settings were refused, under a
    caller that goes on (a sweep's)."""
    from sims.task import TaskEnv

    closed, close = [], TaskEnv.close
    monkeypatch.setattr(TaskEnv, "close", lambda self: (closed.append(self), close(self)))
    with pytest.raises(ValueError):
        sims.make_env("pendulum", 2, **settings)
    assert len(closed) == 1


def test_a_body_welded_to_the_world_is_no_floating_base():
    """The torso terms need a body on a free joint: arm_reach's base hangs from the world with no joint at all
    (and its mocap target too), which is not one."""
    with pytest.raises(ValueError, match="^randomization.torso_mass_kg: the task's model has no floating-base body"):
        sims.make_env("arm_reach", 2, randomization={"torso_mass_kg": [0.0, 1.0]})


def test_a_torso_left_with_exactly_no_mass_is_refused():
    """A mass of 0 is no body: a torso_mass_kg low of minus the torso's mass is refused as one below it is."""
    torso = float(sims.make_env("go1_flat", 1, device="cpu").sim.model.body_mass[TORSO])
    with pytest.raises(ValueError, match=r"torso_mass_kg: .* would leave it 0 kg at the ranges' lowest"):
        _go1("mujoco", num_envs=2, link_mass_scale=[1.0, 1.0], torso_mass_kg=[-torso, 0.0])


def test_a_latency_within_a_control_step_is_logged_with_its_physics_substeps():
    """0.03 s is a control step (0.02 s) and 5 physics substeps: logged as the 0.03 s applied, not 0.02."""
    env = _env(num_envs=3, action_latency_s=[0.03, 0.03])
    log = env.step(torch.zeros(3, 4)).info["log"]
    assert float(log["randomization/action_latency_s_min"]) == pytest.approx(0.03)
    assert float(log["randomization/action_latency_s_max"]) == pytest.approx(0.03)


def test_latency_and_delay_left_at_nominal_are_not_logged():
    """Only the ranges drawn away from nominal are logged: no latency or observation delay of 0 throughout."""
    log = _env(num_envs=2, mass_scale=[0.8, 1.2]).step(torch.zeros(2, 4)).info["log"]
    assert {key for key in log if key.startswith("randomization/")} == {
        "randomization/width", "randomization/mass_scale_min", "randomization/mass_scale_max"}


CHAIN = """<mujoco><option timestep="0.01"/><worldbody>
<body><joint name="a" type="hinge"/><geom type="capsule" size=".02" fromto="0 0 0 0 0 -.2" mass="1"/>
 <body pos="0 0 -.2"><joint name="b" type="ball"/><geom type="capsule" size=".02" fromto="0 0 0 0 0 -.2" mass="1"/>
  <body pos="0 0 -.2"><joint name="c" type="hinge"/><geom type="sphere" size=".03" mass="1"/></body></body></body>
</worldbody><actuator><motor joint="a" ctrlrange="-1 1"/><motor joint="c" ctrlrange="-1 1"/></actuator></mujoco>"""


def test_qpos0_offsets_of_joints_whose_positions_are_apart_reach_every_world():
    """A ball joint between two hinges puts their qpos at 0 and 5, not side by side: the rows are changed through
    a copy, which must be written back, the ball's quaternion left as compiled."""
    import mujoco

    from sims import make_backend
    from sims.task import Task, TaskEnv

    class Chain(Task):
        max_episode_steps = 10

        def model(self):
            return mujoco.MjModel.from_xml_string(CHAIN)

        def observations(self, sim):
            return {"policy": torch.cat([sim.qpos, sim.qvel], 1).float()}

        def rewards(self, sim, action):
            return {"still": -sim.qvel.abs().sum(1)}

    spec = Chain()
    env = RandomizedEnv(TaskEnv(spec, make_backend("mujoco", spec, 4, "cpu", 1), seed=0),
                        Randomization(qpos0_offset=(0.1, 0.2)), seed=0)
    shift = env.sim.get_model_field("qpos0").double() - torch.as_tensor(env.sim.model.qpos0).float().double()
    hinges = shift[:, [0, 5]]
    assert 0.1 - 1e-6 <= hinges.min() and hinges.max() <= 0.2 + 1e-6 and hinges.unique().numel() == 8
    assert bool((shift[:, 1:5] == 0).all())  # the ball's quaternion
