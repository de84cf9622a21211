"""Suite-wide setup.

- robolearn picks a headless GL backend (OSMesa) when there is no display, and
  must do so before any test module imports mujoco.
- Tests that press Ctrl+C (SIGINT) need Python's KeyboardInterrupt handler even
  when the suite was started in the background, where SIGINT arrives ignored.
- Every run ends in an ONNX export, and torch.onnx.export rebuilds its table of
  ATen -> ONNX functions (ONNXRegistry.from_torchlib, ~0.3-0.6 s) on every call:
  the suite's hundreds of runs spent a tenth of their time there. The table
  depends only on the installed torch and onnxscript, so it is built once per
  opset and each export gets its own copy of it (the exporter may add to the one
  it is given); what is exported is unchanged. Should a torch release move it,
  or give it state beyond its opset and function table (which a copy of those
  two would share between exports), it is built every time, as without this.
- Every test gets an empty datasets root of its own (``$ROBOLEARN_DATASETS``).
"""

import signal

import pytest

import robolearn  # noqa: F401

signal.signal(signal.SIGINT, signal.default_int_handler)


def _build_the_onnx_registry_once() -> None:
    try:
        from torch.onnx._internal.exporter._registration import ONNXRegistry
        build = ONNXRegistry.from_torchlib.__func__
    except (ImportError, AttributeError):
        return
    built: dict = {}

    def from_torchlib(cls, *args, **kwargs):
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in built:
            table = build(cls, *args, **kwargs)
            if set(getattr(table, "__dict__", ())) != {"_opset_version", "functions"}:  # not what is copied below
                return table
            built[key] = table
        table = built[key]
        copy = cls.__new__(cls)
        copy.__dict__.update(table.__dict__)
        copy.functions = {target: list(decompositions) for target, decompositions in table.functions.items()}
        return copy

    ONNXRegistry.from_torchlib = classmethod(from_torchlib)


_build_the_onnx_registry_once()


@pytest.fixture(autouse=True)
def _own_datasets_root(tmp_path_factory, monkeypatch):
    """Tests never read or write this machine's datasets (``~/.robolearn/datasets``, or ``$ROBOLEARN_DATASETS``
    where it is set): one that names no root of its own gets an empty one, so what a benchmark has made there
    neither satisfies nor changes a test."""
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path_factory.mktemp("datasets")))


@pytest.fixture(scope="session")
def maze_datasets(tmp_path_factory):
    """A datasets root holding 'maze-tiny': undirected navigation in the medium maze, 4 episodes of 100 steps
    (as benchmarks/make_maze_datasets.py records them), for the skill and resume tests."""
    import sims
    from robolearn.data import DatasetWriter, record
    from sims.tasks.maze_navigator import MazeNavigator

    root = tmp_path_factory.mktemp("maze-datasets")
    kwargs = {"goals": "train", "terminate_at_goal": False, "max_episode_steps": 100}
    with sims.make_env("point_maze_medium", num_envs=4, seed=0, num_threads=1, **kwargs) as env:
        meta = {"task": "point_maze_medium", "task_kwargs": kwargs}
        with DatasetWriter("maze-tiny", env.observation_spec, env.action_spec, metadata=meta, root=root) as writer:
            record(MazeNavigator(env.task.grid, 4), env, writer, 4, noise=0.2, seed=0, progress=False)
    return root
