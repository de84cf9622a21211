"""A task of the user's own, outside the package: ``env.task=module:Class`` from the command line and
from Python, through training, evaluation and export; and the mistakes such a task is told about."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import sims
from robolearn.cli import main
from robolearn.interfaces import ContractError

SLIDER = '''
from dataclasses import dataclass

import mujoco
import torch

from sims.task import Task

XML = """<mujoco><option timestep="0.02"/><worldbody>
<body name="cart"><joint name="x" type="slide" axis="1 0 0" damping="1"/><geom type="box" size=".1 .1 .1" mass="1"/></body>
</worldbody><actuator><motor name="push" joint="x" RANGE/></actuator></mujoco>"""


@dataclass(kw_only=True)
class Slider(Task):
    """A cart on a rail, to be pushed to ``target``."""
    target: float = 0.5
    max_episode_steps: int = 20
    reward_shape: str = "flat"

    def model(self):
        return mujoco.MjModel.from_xml_string(XML)

    def observations(self, sim):
        return {"policy": torch.cat([sim.qpos - self.target, sim.qvel], 1).double()}  # float64, as users may

    def rewards(self, sim, action):
        distance = -(sim.qpos[:, 0] - self.target).abs()
        return {"distance": distance[:, None] if self.reward_shape == "column" else distance}


def not_a_task():
    return 3
'''


@pytest.fixture
def own_module(tmp_path, monkeypatch, request):
    """``<unique>.py`` in a folder that is the current directory, not on sys.path: as a user runs it."""
    name = f"user_slider_{request.node.name[:20].replace('[', '_').replace(']', '_')}_{len(sys.modules)}"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / f"{name}.py").write_text(SLIDER.replace("RANGE", 'ctrlrange="-1 1"'))
    (folder / f"{name}_nolimit.py").write_text(SLIDER.replace("RANGE", ""))
    passive = SLIDER.replace('<actuator><motor name="push" joint="x" RANGE/></actuator>', "")
    (folder / f"{name}_noactuator.py").write_text(passive)
    (folder / f"{name}_huge.py").write_text(SLIDER.replace("RANGE", 'ctrlrange="-1e30 1e30"'))
    (folder / f"{name}_edge.py").write_text(SLIDER.replace("RANGE", 'ctrlrange="-1e10 1e10"'))
    (folder / f"{name}_reversed.py").write_text(SLIDER.replace("RANGE", 'ctrlrange="1 -1"'))
    (folder / f"{name}_unlimited.py").write_text(SLIDER.replace("RANGE", 'ctrllimited="false" ctrlrange="-1 1"'))
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(folder))])
    yield name
    for module in (name, f"{name}_nolimit", f"{name}_noactuator", f"{name}_huge", f"{name}_edge",
                   f"{name}_reversed", f"{name}_unlimited"):
        sys.modules.pop(module, None)


def test_an_own_task_trains_evaluates_and_exports_from_the_command_line(own_module, tmp_path, capfd):
    task = f"{own_module}:Slider"
    assert main(["train", "ppo_pendulum", "--no-wandb", f"env.task={task}", "env.kwargs.target=0.3",
                 f"run_dir={tmp_path / 'runs'}", "env.num_envs=4", "env.num_threads=1", "runner.total_steps=256",
                 "agent.num_steps=32", "runner.eval_episodes=2", "runner.video_seconds=0", "logging.progress=false"]) == 0
    run = next((tmp_path / "runs").glob("*/*/config.yaml")).parent
    assert run.parent.name == f"ppo_pendulum_{own_module}_Slider"
    capfd.readouterr()
    sys.modules.pop(own_module)  # a later command, another process: it imports the task again by its name
    assert main(["eval", str(run), "--episodes", "2", "--json"]) == 0
    assert '"episodes": 2' in capfd.readouterr().out
    with sims.make_env(task, num_envs=2, target=0.3) as env:
        assert env.observation_spec["policy"].shape == (2,) and env.max_episode_steps == 20
        assert env.observation_spec["policy"].dtype == np.float32 == env.reset()["policy"].numpy().dtype  # cast


def test_an_own_task_from_python_and_its_mistakes_said_by_name(own_module):
    with sims.make_env(f"{own_module}:Slider", num_envs=3, target=0.2) as env:
        obs, reward, *_ = env.step(torch.zeros(3, 1))
        assert reward.shape == (3,) and torch.allclose(obs["policy"][:, 0], torch.full((3,), -0.2, dtype=obs["policy"].dtype))
    with pytest.raises(ValueError, match=r"^target: expected float, got 'abc'"):
        sims.make_env(f"{own_module}:Slider", num_envs=1, target="abc")
    with pytest.raises(ContractError, match=r"term 'distance' must be a \(num_envs=2,\) tensor; got \(2, 1\)"):
        with sims.make_env(f"{own_module}:Slider", num_envs=2, reward_shape="column") as env:
            env.step(torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"Slider: actuator\(s\) \['push'\] have no ctrlrange"):
        sims.make_env(f"{own_module}_nolimit:Slider", num_envs=1)
    with pytest.raises(ValueError, match=r"Slider: actuator\(s\) \['push'\] have no ctrlrange \(MuJoCo ignores the "
                                         r"ctrlrange of push \[1.0, -1.0\]: its low must be below its high\)"):
        sims.make_env(f"{own_module}_reversed:Slider", num_envs=1)  # (it had been said to have none, given one)
    with pytest.raises(ValueError, match=r"\(MuJoCo ignores the ctrlrange of push \[-1.0, 1.0\]: it is not ctrllimited "
                                         r"\(ctrllimited=\"false\", or <compiler autolimits=\"false\"/>: set "
                                         r"ctrllimited=\"true\"\)\)"):
        sims.make_env(f"{own_module}_unlimited:Slider", num_envs=1)  # (it had been said to be reversed)
    with pytest.raises(ValueError, match=r"Slider: the model has no actuators, so there is nothing to act on"):
        sims.make_env(f"{own_module}_noactuator:Slider", num_envs=1)  # PPO had trained on until its std was NaN
    with pytest.raises(ValueError, match=r"Slider: actuator\(s\) push \[-1e\+30, 1e\+30\] have a ctrlrange beyond "
                                         r"1e\+10, MuJoCo's largest control"):
        sims.make_env(f"{own_module}_huge:Slider", num_envs=1)  # MuJoCo had zeroed the controls without a word
    with sims.make_env(f"{own_module}_edge:Slider", num_envs=2) as env:  # up to 1e10 a control acts as given
        env.step(torch.tensor([[1e10], [0.0]]))
        assert env.sim.ctrl[0, 0] == 1e10 and env.sim.qvel[0, 0] > 1e8 and env.sim.qvel[1, 0] == 0
    with pytest.raises(ValueError, match=r"no module 'nowhere_xyz' on the Python path or in "):
        sims.make_env("nowhere_xyz:Slider", num_envs=1)
    with pytest.raises(ValueError, match=rf"module '{own_module}' \(.*\) has no 'Slidr'"):
        sims.make_env(f"{own_module}:Slidr", num_envs=1)
    with pytest.raises(ValueError, match=r"built a int, not a sims.Task"):
        sims.make_env(f"{own_module}:not_a_task", num_envs=1)
    with pytest.raises(ValueError, match=r"unknown task 'slider' \(env.task\); known: .*'module:Class' for a Task of your own"):
        sims.make_env("slider", num_envs=1)


def test_observations_that_are_not_batched_groups_are_told_so():
    from sims.tasks.pendulum import Pendulum

    class Bare(Pendulum):
        def observations(self, sim):
            return sim.qpos

    class Flat(Pendulum):
        def observations(self, sim):
            return {"policy": sim.qpos[:, 0]}

    class Flags(Pendulum):  # integer and boolean groups keep their dtype, within its range
        def observations(self, sim):
            return {**super().observations(sim), "up": sim.qpos[:, :1].cos() > 0.9, "count": sim.qpos[:, :1].to(torch.uint8)}

    with sims.TaskEnv(Flags(), sims.make_backend("mujoco", Flags(), 2, "cpu", 1)) as env:
        spec = env.observation_spec
        assert (spec["up"].dtype, spec["count"].dtype, spec["policy"].dtype) == (np.bool_, np.uint8, np.float32)
        assert env.reset()["up"].dtype == torch.bool and spec["count"].high.max() == 255
    for task, said in ((Bare(), r"Bare.observations must return a dict of observation groups"),
                       (Flat(), r"Flat.observations: group 'policy' must be a \(num_envs=2, ...\) tensor .*got \(2,\)")):
        with pytest.raises(ContractError, match=said):
            sims.TaskEnv(task, sims.make_backend("mujoco", task, 2, "cpu", 1))


def test_reward_terms_and_metrics_that_are_flags_counts_or_float64_are_logged_as_float32():
    """A bool term alone (a success flag) or a count had failed the step as torch's "mean(): could not infer
    output dtype"; a float64 term had made the whole reward float64."""
    from sims.tasks.pendulum import Pendulum

    class Terms(Pendulum):
        def rewards(self, sim, action):
            up = sim.qpos[:, 0].cos() > 0.9
            return {"up": up, "count": up.long(), "precise": sim.qpos[:, 0].double()}

        def metrics(self, sim):  # a flag as a metric had failed alike
            return {"upright": sim.qpos[:, 0].cos() > 0.9}

    with sims.TaskEnv(Terms(), sims.make_backend("mujoco", Terms(), 2, "cpu", 1)) as env:
        _, reward, _, _, info = env.step(torch.zeros(2, 1))
        assert reward.dtype == torch.float32 and info["log"]["reward/up"].dtype == torch.float32
        assert info["log"]["metrics/upright"].dtype == torch.float32


def test_outcomes_resets_models_and_missing_methods_of_an_own_task_are_told_by_name():
    """success/terminated of the wrong shape or dtype had trained the whole run and crashed its evaluation;
    a wrong reset, a model that does not compile and a missing method were raw errors naming no task."""
    from robolearn.interfaces import ContractError
    from sims.task import Task
    from sims.tasks.pendulum import Pendulum

    class Column(Pendulum):
        def success(self, sim):
            return super().success(sim)[:, None]

    class Counts(Pendulum):
        def terminated(self, sim):
            return torch.zeros(sim.num_worlds)

    class Wide(Pendulum):
        def reset(self, sim, ids, generator):
            qpos, qvel = super().reset(sim, ids, generator)
            return torch.cat([qpos, qpos], 1), qvel

    class Broken(Pendulum):
        def model(self):
            import mujoco
            return mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><joint/></body></worldbody></mujoco>")

    class PathOnly(Pendulum):
        def model(self):
            return "pendulum.xml"

    def env(task):
        return sims.TaskEnv(task, sims.make_backend("mujoco", task, 2, "cpu", 1))

    for task, said in ((Column(), r"Column.success must return a \(num_envs=2,\) bool tensor, one flag per world; "
                                  r"got torch.bool \(2, 1\)"),
                       (Counts(), r"Counts.terminated must return a \(num_envs=2,\) bool tensor.*got torch.float32")):
        with env(task) as e, pytest.raises(ContractError, match=said):
            e.step(torch.zeros(2, 1))
    with pytest.raises(ContractError, match=r"Wide.reset must return \(qpos, qvel\) tensors of shapes \(len\(ids\), "
                                            r"nq=1\) and \(len\(ids\), nv=1\); qpos is \(2, 2\)"):
        env(Wide())

    class Undeclared(Pendulum):  # had been a KeyError saying to pass fields= to the backend: a traceback
        def rewards(self, sim, action):
            return {"force": -sim.field("actuator_force")[:, 0].abs()}

    with env(Undeclared()) as e, pytest.raises(ContractError, match=r"field 'actuator_force' was not requested: a "
                                                                    r"task declares .* fields = \('actuator_force',\)"):
        e.step(torch.zeros(2, 1))

    class QposOnly(Pendulum):  # had been Python's "not enough values to unpack (expected 2, got 1)"
        def reset(self, sim, ids, generator):
            return super().reset(sim, ids, generator)[0]

    with pytest.raises(ContractError, match=r"QposOnly.reset must return a pair \(qpos, qvel\) .*; got Tensor"):
        sims.TaskEnv(QposOnly(), sims.make_backend("mujoco", QposOnly(), 1, "cpu", 1))
    with pytest.raises(ValueError, match=r"^Broken.model\(\) did not compile: "):
        env(Broken())
    with pytest.raises(ContractError, match=r"PathOnly.model\(\) must return a mujoco.MjModel.*got str"):
        env(PathOnly())

    class NoRewards(Task):
        def model(self):
            return Pendulum().model()

        def observations(self, sim):
            return {}

    class Plain(Task):  # settings as class attributes, not a dataclass
        target = 0.5
        model, observations, rewards = Pendulum.model, Pendulum.observations, Pendulum.rewards

    sys.modules["user_no_rewards"] = type(sys)("user_no_rewards")
    sys.modules["user_no_rewards"].NoRewards, sys.modules["user_no_rewards"].Plain = NoRewards, Plain
    try:
        with pytest.raises(ContractError, match=r"env.task=user_no_rewards:NoRewards: NoRewards does not implement "
                                                r"rewards, which a sims.Task must"):
            sims.make_env("user_no_rewards:NoRewards", num_envs=1)
        with pytest.raises(ValueError, match=r"^target: .* \(Plain is no dataclass, so its class attributes "
                                             r"are not settings: decorate it with @dataclass\(kw_only=True\)"):
            sims.make_env("user_no_rewards:Plain", num_envs=1, target=1.0)
    finally:
        del sys.modules["user_no_rewards"]


def test_a_plain_subclass_setting_a_dataclass_tasks_field_is_told_to_be_a_dataclass():
    """class Heavier(Pendulum): max_episode_steps = 100 had silently kept the base's 500 (its __init__ sets it)."""
    from sims.tasks.pendulum import Pendulum

    class Shorter(Pendulum):
        max_episode_steps = 100

    @dataclass(kw_only=True)  # decorated as the error says, but not annotated: still the base's 500, silently
    class Bare(Pendulum):
        max_episode_steps = 100

    @dataclass(kw_only=True)
    class Annotated(Pendulum):
        max_episode_steps: int = 100

    sys.modules["user_shorter"] = type(sys)("user_shorter")
    sys.modules["user_shorter"].Shorter = Shorter
    sys.modules["user_shorter"].Bare = Bare
    sys.modules["user_shorter"].Annotated = Annotated
    try:
        with pytest.raises(ValueError, match=r"env.task=user_shorter:Shorter: Shorter sets max_episode_steps as a class "
                                             r"attribute, .*: decorate Shorter with @dataclass\(kw_only=True\) and "
                                             r"annotate it \(max_episode_steps: int = 100\)"):
            sims.make_env("user_shorter:Shorter", num_envs=1)
        with pytest.raises(ValueError, match=r"env.task=user_shorter:Bare: Bare sets max_episode_steps without an "
                                             r"annotation, .*: annotate it \(max_episode_steps: int = 100\)"):
            sims.make_env("user_shorter:Bare", num_envs=1)
        with sims.make_env("user_shorter:Annotated", num_envs=1) as env:
            assert env.max_episode_steps == 100
    finally:
        del sys.modules["user_shorter"]
    # built in Python, TaskEnv(Shorter()) had run the base's 500-step episodes without a word
    for cls, why in ((Shorter, "as a class attribute"), (Bare, "without an annotation")):
        with pytest.raises(ValueError, match=rf"^TaskEnv\({cls.__name__}\(\)\): {cls.__name__} sets max_episode_steps "
                                             rf"{why}, .*\(max_episode_steps: int = 100\)"):
            sims.TaskEnv(cls(), sims.make_backend("mujoco", cls(), 1, "cpu", 1))
    task = Annotated()
    with sims.TaskEnv(task, sims.make_backend("mujoco", task, 1, "cpu", 1)) as env:
        assert env.max_episode_steps == 100


LOOSE = '''
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from {module} import Slider


@dataclass(kw_only=True)
class Loose(Slider):
    """Settings whose types the config checker does not know are passed as given."""
    targets: Sequence[float] = (0.5,)
    shaping: Callable | None = None
    pair: tuple[str, float] = ("a", 1.0)


def factory(**settings):
    return Loose(**settings)
'''


def test_settings_of_every_kind_reach_an_own_task_and_a_factory_takes_any(own_module):
    import numpy as np

    with open(f"{own_module}_loose.py", "w") as f:
        f.write(LOOSE.format(module=own_module))
    try:
        for builder in ("Loose", "factory"):
            with sims.make_env(f"{own_module}_loose:{builder}", num_envs=1, targets=[0.2, 0.3], shaping=abs,
                               pair=["b", 2], max_episode_steps=np.int64(7)) as env:
                assert env.task.targets == [0.2, 0.3] and env.task.shaping is abs
                assert env.max_episode_steps == 7  # a factory's settings pass as given; a dataclass's are checked:
                assert env.task.pair == (("b", 2.0) if builder == "Loose" else ["b", 2])
        with pytest.raises(ValueError, match=r"^pair\[0\]: expected str, got 3"):
            sims.make_env(f"{own_module}_loose:Loose", num_envs=1, pair=[3, 2])
    finally:
        sys.modules.pop(f"{own_module}_loose", None)


def test_a_module_that_imports_a_missing_one_is_not_said_missing_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gym_reach_xyz.py").write_text("import gym_xyz_not_installed\n")
    with pytest.raises(ModuleNotFoundError, match="gym_xyz_not_installed"):
        sims.make_env("gym_reach_xyz:Task", num_envs=1)


@pytest.mark.parametrize("task, settings", [
    ("os:system", {"command": "echo ran > {marker}"}),
    ("subprocess:getoutput", {"cmd": "echo ran > {marker}"}),
    ("reexports_xyz:getoutput", {"cmd": "echo ran > {marker}"}),  # a module's import of another's function
    # an installed library's own function (PyYAML's, defined in yaml/__init__.py): it runs the YAML's python tags
    ("yaml:unsafe_load", {"stream": "!!python/object/apply:os.system [\"echo ran > {marker}\"]"}),
])
def test_a_task_name_from_a_file_calls_nothing_but_a_task_or_a_modules_own_factory(task, settings, tmp_path,
                                                                                    monkeypatch):
    """A run's config.yaml (and a dataset's metadata, a controller.json) names its task, which make_env calls with
    the file's env.kwargs: a downloaded run's ``env.task: os:system`` had run its shell command at `robolearn eval`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reexports_xyz.py").write_text("from subprocess import getoutput\n")
    marker = tmp_path / "ran"
    try:
        with pytest.raises(ValueError, match=rf"env.task={task}: '\w+' is not a sims.Task subclass, nor a function "
                                             "defined in"):
            sims.make_env(task, num_envs=1, **{k: v.format(marker=marker) for k, v in settings.items()})
    finally:
        sys.modules.pop("reexports_xyz", None)
    assert not marker.exists()


def test_a_task_defined_in_the_running_script_is_said_to_belong_in_a_module():
    """A run trained from a script that defined its task names it `__main__:Name`; eval in another process (a
    notebook, `python -c`) had failed as "module '__main__' has no attribute '__file__'", or named the wrong script."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import sims; sims.make_env('__main__:Spin', num_envs=1)"],
                          capture_output=True, text=True, timeout=120)
    assert ("env.task=__main__:Spin: '__main__' is the script (or notebook) running now, which has no 'Spin'; one "
            "defined in the script that trained is found again only in that process: move it into a module (e.g. "
            "my_module.py beside the script) and name it my_module:Spin") in done.stderr, done.stderr[-2000:]


def test_a_frame_skip_set_without_a_declaration_is_told_the_declaration_that_makes_it_a_setting():
    """The README's Slider with ``frame_skip = 2`` (no annotation), given env.kwargs.frame_skip: a plain class had
    been told only to become a dataclass, after which frame_skip still was no setting, and a dataclass nothing.
    Both are now told the line to write, and the class with that line takes the setting."""
    from sims.task import Task
    from sims.tasks.pendulum import Pendulum

    parts = {"model": Pendulum.model, "observations": Pendulum.observations, "rewards": Pendulum.rewards}
    plain = type("Plain", (Task,), {"frame_skip": 2, **parts})
    decorated = dataclass(kw_only=True)(type("Decorated", (Task,), {"frame_skip": 2, **parts}))
    declared = dataclass(kw_only=True)(type("Declared", (Task,), {"frame_skip": 2, **parts,
                                                                  "__annotations__": {"frame_skip": int}}))
    module = sys.modules["user_frame_skip"] = type(sys)("user_frame_skip")
    module.Plain, module.Decorated, module.Declared = plain, decorated, declared
    try:
        with pytest.raises(ValueError, match=r"Plain is no dataclass, so its class attributes are not settings: "
                                             r"decorate it with @dataclass\(kw_only=True\) and declare frame_skip: "
                                             r"int = 2 in"):
            sims.make_env("user_frame_skip:Plain", num_envs=1, frame_skip=5)
        with pytest.raises(ValueError, match=r"\(Decorated's frame_skip is a class attribute without an annotation, "
                                             r"not a setting: declare frame_skip: int = 2 in its body"):
            sims.make_env("user_frame_skip:Decorated", num_envs=1, frame_skip=5)
        for name, value in (("rewards", 1), ("observations", 1)):  # a method: no line to declare it by
            with pytest.raises(ValueError, match=rf"^{name}: task 'user_frame_skip:Decorated' has no such "
                                                 r"setting; it takes: [a-z_, ]+$"):
                sims.make_env("user_frame_skip:Decorated", num_envs=1, **{name: value})
        for name in ("rewards", "fixed_goal"):  # a task of ours: not the user's to edit
            with pytest.raises(ValueError, match=rf"^{name}: task 'pendulum' has no such setting; it "
                                                 r"takes: [a-z_, ]+$"):
                sims.make_env("pendulum", num_envs=1, **{name: 1})
        with pytest.raises(ValueError, match=r"^frame_skp: task 'pendulum' has no such setting \(did "
                                             r"you mean 'frame_skip'\?\); it takes: "):  # its match
            sims.make_env("pendulum", num_envs=1, frame_skp=2)
        with sims.make_env("user_frame_skip:Decorated", num_envs=1) as env:  # undeclared, it still steps 2 at a time
            assert env.control_dt == pytest.approx(2 * env.sim.timestep)
        with sims.make_env("user_frame_skip:Declared", num_envs=1, frame_skip=5) as env:  # the line it is told
            assert env.control_dt == pytest.approx(5 * env.sim.timestep)
    finally:
        del sys.modules["user_frame_skip"]
