"""Offscreen rendering of one world (setup.sh installs OSMesa, so a missing GL stack is a failure)."""

import mujoco
import numpy as np
import pytest
import torch

from sims import make_env


@pytest.fixture(scope="module")
def gl() -> None:
    try:
        mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 8, 8).close()
    except Exception as error:
        pytest.fail(f"no OpenGL backend for MuJoCo ({error}): run setup.sh, which installs libosmesa6")


@pytest.mark.parametrize("name", ["pendulum", "hopper"])
def test_render_returns_an_rgb_frame(gl: None, name: str) -> None:
    with make_env(name, num_envs=2, seed=0) as env:
        env.step(torch.zeros(2, *env.action_spec.shape))
        frame = env.render(1, width=160, height=120)
        assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8
        assert frame.std() > 0, "the frame shows something"
        assert env.render(0, width=64, height=48).shape == (48, 64, 3)


def test_render_shows_each_worlds_own_model(gl: None) -> None:
    with make_env("pendulum", num_envs=2, seed=0) as env:
        rod = env.sim.model.geom("rod").id
        colors = env.sim.get_model_field("geom_rgba").numpy()
        colors[1, rod] = [0.0, 1.0, 0.0, 1.0]
        env.sim.set_model_field("geom_rgba", colors)
        plain, green = env.render(0), env.render(1)
        assert (green[..., 1].astype(int) - green[..., 0]).max() > (plain[..., 1].astype(int) - plain[..., 0]).max()


def test_gym_adapter_renders_the_env_asked_for(gl: None) -> None:
    with make_env("gym:Reacher-v5", num_envs=2, seed=0) as env:
        env.reset(seed=0)
        frame = env.render(1, width=64, height=48)
        assert frame.shape == (48, 64, 3) and frame.std() > 0


def test_sims_imported_first_renders_on_a_headless_machine(gl: None) -> None:
    """robolearn picks OSMesa where there is no display; `import sims` before `import robolearn` (the own-task
    section's first line) had loaded mujoco first, which then found no GL: no frame, and no run video."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    script = "import sims\nwith sims.make_env('pendulum', num_envs=1) as env:\n    print(env.render(0).shape)"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "(240, 320, 3)", done.stderr[-2000:]


def test_mujoco_imported_first_on_a_headless_machine_is_told_what_to_change(gl: None) -> None:
    """A script's `import mujoco` before robolearn (the own-task example's first line) leaves MuJoCo on GLFW, which
    needs a display: the run's video was "skipped" with MuJoCo's words about an OpenGL context not made current."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    script = ("import mujoco\nimport sims\nwith sims.make_env('pendulum', num_envs=1) as env:\n"
              "    try:\n        env.render(0)\n    except RuntimeError as err:\n        print(err)")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("mujoco was imported before robolearn (or sims) on a machine without a display, so "
                                  "it chose GLFW, which needs one: import robolearn or sims before mujoco, or set "
                                  "MUJOCO_GL=osmesa"), done.stdout + done.stderr[-2000:]


def test_an_env_left_open_at_exit_closes_its_renderer_quietly(gl: None) -> None:
    """MuJoCo's Renderer freed itself during interpreter teardown: 'Exception ignored in ... __del__' and a
    ctypes traceback after every script that rendered without closing its env."""
    import subprocess
    import sys
    from pathlib import Path

    script = "import sims\nenv = sims.make_env('pendulum', num_envs=1)\nprint(env.render(0).shape)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "(240, 320, 3)"
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
