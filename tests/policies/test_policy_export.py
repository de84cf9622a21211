"""Controllers are fresh, deterministic modules that export to TorchScript and
ONNX and give the same actions there (onnxruntime) as in torch."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

from policies import AGENTS
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Controller

CONFIGS = {
    "ppo": {"actor_hidden": (16, 16), "critic_hidden": (16,)},
    "ppo-gru": {"actor_hidden": (16,), "critic_hidden": (16,), "recurrent": True, "rnn_hidden": 8},
    "ppo-env-units": {"actor_hidden": (16,), "critic_hidden": (16,), "normalize_actions": False, "init_std": 3.0},
    "sac": {"hidden": (16, 16)},
}


@pytest.fixture(params=CONFIGS)
def trained_agent(request, obs_spec, action_spec, make_rollout, make_replay_batch):
    """An agent after one update, so normalizer statistics and weights are not at their initial values."""
    torch.manual_seed(0)
    config_cls, agent_cls = AGENTS[request.param.split("-")[0]]
    agent = agent_cls(obs_spec, action_spec, config_cls(**CONFIGS[request.param]), torch.device("cpu"))
    agent.update(make_rollout(agent, 8, 4) if agent.on_policy else make_replay_batch(32))
    return agent


def example_inputs(controller: torch.nn.Module, batch_size: int) -> dict[str, torch.Tensor]:
    return {k: torch.randn_like(v) * 3 for k, v in controller.export_inputs(batch_size).items()}


def outputs(result: torch.Tensor | tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    return [t.detach().numpy() for t in (result if isinstance(result, tuple) else (result,))]


def test_controller_is_independent_of_the_agent(trained_agent, random_obs, make_rollout, make_replay_batch) -> None:
    controller = trained_agent.controller()
    agent_tensors = {t.data_ptr() for t in trained_agent.state_dict()["actor"].values()}
    assert not agent_tensors & {t.data_ptr() for t in controller.state_dict().values()}
    obs = random_obs(4)
    before = controller.act(obs)
    controller.reset()
    trained_agent.update(make_rollout(trained_agent, 8, 4) if trained_agent.on_policy else make_replay_batch(32))
    torch.testing.assert_close(controller.act(obs), before)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")  # TorchScript is deprecated in torch 2.13 but works
def test_controller_exports_to_torchscript(trained_agent, tmp_path) -> None:
    controller = trained_agent.controller().eval()
    path = tmp_path / "controller.pt"
    torch.jit.save(torch.jit.script(controller), str(path))
    loaded = torch.jit.load(str(path))
    inputs = example_inputs(controller, batch_size=6)
    with torch.no_grad():
        for got, expected in zip(outputs(loaded(*inputs.values())), outputs(controller(*inputs.values()))):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_controller_exports_to_onnx(trained_agent, tmp_path) -> None:
    """Through export_controller, as runs export: the batch stays dynamic (a GRU's too)."""
    controller = trained_agent.controller().eval()
    path = export_controller(controller, tmp_path, ("onnx",))["onnx"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    test_inputs = example_inputs(controller, batch_size=7)  # another batch size than at export
    got = session.run(None, {k: v.numpy() for k, v in test_inputs.items()})
    with torch.no_grad():
        expected = outputs(controller(*test_inputs.values()))
    assert [o.name for o in session.get_outputs()] == controller.export_outputs()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_an_onnx_export_leaves_the_callers_torch_onnx_logging_as_it_was(tmp_path) -> None:
    """The export quiets torch.onnx while it runs; it had left that logger at ERROR for the rest of the process."""
    import logging

    class Gain(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 3

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :1] * 0.5

    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    onnx_log.setLevel(logging.INFO)
    try:
        export_controller(Gain(), tmp_path, ("onnx",))
        assert onnx_log.level == logging.INFO
    finally:
        onnx_log.setLevel(level)


def test_controllers_exported_in_threads_of_one_process_export_one_at_a_time(tmp_path, monkeypatch) -> None:
    """torch.export keeps process-wide state: two runs trained in threads had both failed at their ONNX export
    ("Trying to pop empty mode stack"). Each export waits a moment for the other to come in beside it: without the
    lock they overlap, and both exports then fail (or, were they to pass, ``most`` says they overlapped)."""
    import threading

    class Gain(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 3
            self.gain = torch.nn.Linear(3, 1)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.gain(obs)

    real_export, inside, most, entered = torch.onnx.export, [0], [0], threading.Event()
    counting = threading.Lock()

    def export(*args, **kwargs):
        with counting:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            if inside[0] == 2:
                entered.set()
        entered.wait(timeout=1.0)  # with the lock the other never comes in: a second's wait each
        try:
            return real_export(*args, **kwargs)
        finally:
            with counting:
                inside[0] -= 1

    monkeypatch.setattr(torch.onnx, "export", export)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            export_controller(Gain(), tmp_path / str(i), ("onnx",))
        except BaseException as err:  # noqa: BLE001  (said by the assertion below)
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and most[0] == 1
    for i in range(2):
        assert ExportedController(tmp_path / str(i) / "controller.onnx").act({"policy": torch.zeros(2, 3)}).shape == (2, 1)


FIRST_SESSION = """
import sys, torch
from robolearn.config import denormals_flushed
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Controller

class Gain(Controller):
    def __init__(self):
        super().__init__()
        self.obs_size = 3
        self.gain = torch.nn.Linear(3, 1)

    def forward(self, obs):
        return self.gain(obs)

torch.set_flush_denormal(True)
if sys.argv[1] == "export":
    export_controller(Gain(), sys.argv[2], ("onnx",))
else:
    ExportedController(sys.argv[2])
print(denormals_flushed())
"""


@pytest.mark.parametrize("session", ["export", "load"])
def test_onnx_runtime_leaves_the_cpus_flushing_of_denormals_as_it_was(session, tmp_path) -> None:
    """A process's first ONNX Runtime session (hence a process of its own) turned the CPU's flushing of denormal
    floats off: a fine-tune's online phase, and a skill agent's, trained after the export of its pretrained
    controller on denormals (runner.flush_denormal: Adam steps several times slower), and unlike a resume in that
    phase, which exports nothing before it trains: the weights of a run and of its resume differed."""
    import subprocess
    import sys

    target = tmp_path
    if session == "load":
        target = export_controller(Gain(), tmp_path, ("onnx",))["onnx"]
    done = subprocess.run([sys.executable, "-c", FIRST_SESSION, session, str(target)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "True"


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_act_refuses_what_it_cannot_read_and_takes_numpy(trained_agent, random_obs, tmp_path) -> None:
    """The controller and its exported files check observations alike: a wrong width, a missing
    group or a bare tensor is an error saying what to give; numpy float64 works; no autograd graph."""
    controller = trained_agent.controller()
    paths = export_controller(controller, tmp_path)
    for driver in (controller, ExportedController(paths["torchscript"]), ExportedController(paths["onnx"])):
        obs = random_obs(3)
        action = driver.act({k: v.double().numpy() for k, v in obs.items()})
        assert action.shape == (3, 2) and not action.requires_grad
        with pytest.raises(ValueError, match=r"observation width 5 \(policy 5\), but it was trained on 4"):
            driver.act({"policy": torch.zeros(3, 5)})
        with pytest.raises(ValueError, match=r"group\(s\) \['policy'\] missing"):
            driver.act({"critic": torch.zeros(3, 3)})
        with pytest.raises(TypeError, match="takes a dict of observation groups"):
            driver.act(obs["policy"])
        with pytest.raises(ValueError, match=r"batched, \(num_envs, ...\); got shapes \{'policy': \(4,\)\}"):
            driver.act({"policy": torch.zeros(4)})


def _flip_a_weight_bit(path) -> None:
    """Flip one bit in the middle of the file's largest weight: TorchScript's zip record, ONNX's initializer."""
    raw = bytearray(path.read_bytes())
    if path.suffix == ".onnx":
        import onnx

        weights = max(onnx.load(str(path)).graph.initializer, key=lambda t: len(t.raw_data)).raw_data
        start, size = raw.find(weights), len(weights)
    else:
        import struct
        import zipfile

        with zipfile.ZipFile(path) as archive:
            record = max((info for info in archive.infolist() if "/data/" in info.filename), key=lambda i: i.file_size)
        name, extra = struct.unpack("<HH", raw[record.header_offset + 26:record.header_offset + 30])
        start, size = record.header_offset + 30 + name + extra, record.file_size
    raw[start + size // 2] ^= 0x01
    path.write_bytes(raw)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_an_exported_file_damaged_after_its_export_is_refused(trained_agent, tmp_path) -> None:
    """A flipped byte in a copy to the robot had loaded and run as another weight (ONNX records no checksum)."""
    import json

    from robolearn.checkpoint import CheckpointError

    paths = export_controller(trained_agent.controller(), tmp_path)
    written = paths["onnx"].read_bytes()
    for fmt in ("torchscript", "onnx"):
        ExportedController(paths[fmt])  # as written
        _flip_a_weight_bit(paths[fmt])  # it still loads, and would act with another number
        with pytest.raises(CheckpointError, match=rf"{paths[fmt].name}: its contents are not what its export wrote "
                                                  r"\(SHA-256 [0-9a-f]{12}\.\.\., controller.json records"):
            ExportedController(paths[fmt])
    meta = json.loads(paths["meta"].read_text())
    del meta["sha256"]["controller.onnx"]  # an export from before the digests: loaded unchecked, as it was
    paths["meta"].write_text(json.dumps(meta))
    paths["onnx"].write_bytes(written)
    ExportedController(paths["onnx"])


def test_a_controller_computing_outside_torch_is_refused_before_its_file_is_written(tmp_path) -> None:
    """Traced, numpy math on the observation becomes a constant: the file would drive a robot with it."""
    from robolearn.interfaces import Controller

    class NumpyGain(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 3

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.as_tensor(np.tanh(obs.numpy()[:, :1]))

    with pytest.raises(ValueError, match=r"NumpyGain: its TorchScript export computes another 'action' than it does "
                                         r"\(shape \(2, 1\) for \(3, 1\)\): forward must compute with torch operations only"):
        export_controller(NumpyGain(), tmp_path, formats=("torchscript",))
    assert not list(tmp_path.iterdir())


def test_the_export_check_takes_nan_on_random_observations_and_keeps_the_matmul_precision(tmp_path) -> None:
    """Random probe observations outside a controller's domain give NaN in both, which matches; the
    check computes at full float32 precision (bf16 matmuls on AMX CPUs under "medium" would not match
    ONNX Runtime) and leaves the setting as it was."""
    from robolearn.interfaces import Controller

    class Root(Controller):
        def __init__(self) -> None:
            super().__init__()
            self.obs_size = 3
            self.gain = torch.nn.Linear(1, 1)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            precisions.append(torch.get_float32_matmul_precision())  # eager calls: the trace and the check's
            return self.gain(torch.sqrt(obs[:, :1]))

    precisions: list[str] = []
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        paths = export_controller(Root(), tmp_path)
        assert torch.get_float32_matmul_precision() == "medium" and paths["onnx"].is_file()
        assert "highest" in precisions  # the controller's own outputs were computed at full precision
    finally:
        torch.set_float32_matmul_precision(before)


class Gain(Controller):
    """A stateless controller of one's own whose forward names its input x."""

    def __init__(self, decision_period: int = 1) -> None:
        super().__init__()
        self.obs_size, self.decision_period = 3, decision_period
        self.gain = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gain(x)


def test_a_forward_whose_input_has_another_name_exports_to_onnx(tmp_path) -> None:
    """forward(self, x) had trained fully, then failed its ONNX export ("top-level keys must be the arg names")."""
    controller, obs = Gain(), torch.randn(4, 3)
    paths = export_controller(controller, tmp_path)
    np.testing.assert_allclose(ExportedController(paths["onnx"])(obs).numpy(), controller(obs).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


class Latch(Gain):
    """Holds the gain of its first observation: a Python if on its state's values, which export cannot follow."""

    def forward(self, x: torch.Tensor, held: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if bool((held == 0).all()):  # a fresh start: latch the gain of this observation
            held = self.gain(x)
        return 2 * held, held

    def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        return {"obs": torch.zeros(batch_size, 3), "held": torch.zeros(batch_size, 1)}

    def export_outputs(self) -> list[str]:
        return ["action", "held"]


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_a_controller_branching_on_its_state_is_refused_before_its_file_is_written(tmp_path) -> None:
    """An if on the state's values is traced as the fresh start's branch: the check had probed the zero state
    alone, so the TorchScript file was written and played every step as a first one (here: took a new gain
    from each observation instead of holding the first)."""
    with pytest.raises(ValueError, match=r"Latch: its TorchScript export computes another 'action' than it does "
                                         r"\(max difference .*\): .* an if on them a fixed branch \(torch.where"):
        export_controller(Latch(), tmp_path, formats=("torchscript",))
    assert not list(tmp_path.iterdir())


def test_a_controller_that_does_not_export_to_onnx_is_said_in_a_line(tmp_path) -> None:
    """torch.export's failure had ended the export (a run's end, `robolearn export`) in a traceback under a page of
    next steps ("submit a PR to PyTorch"); it is a ValueError with torch's reason and what to change."""
    with pytest.raises(ValueError, match=r"^Latch: forward does not export to ONNX \(GuardOnDataDependentSymNode: "
                                         r"Could not guard on data-dependent .*\): .*as torch.where\); for an "
                                         r"operation ONNX lacks, export TorchScript alone \(robolearn export RUN "
                                         r"--format torchscript\)$"):
        export_controller(Latch(), tmp_path, formats=("onnx",))
    assert not list(tmp_path.iterdir())


class Chatty(Gain):
    """Writes to stderr, and logs on a torch logger, as its forward is traced: what a successful export leaves."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import logging
        import sys

        print("chatty: traced", file=sys.stderr)
        logging.getLogger("torch.export").warning("chatty: logged")
        return self.gain(x)


def test_a_refused_onnx_export_leaves_nothing_of_torchs_on_stderr_a_successful_one_keeps_it(tmp_path, capfd) -> None:
    """The refusal's one line had come under torch.export's 'Unable to find user code' line and two dumps of the
    partial graph (def forward(...)) on stderr; what a successful export writes there is given out as before."""
    import logging

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    kept, loggers = Kept(), [logging.getLogger(n) for n in ("torch.export", "torch.fx.experimental.symbolic_shapes")]
    for logger in loggers:
        logger.addHandler(kept)
    try:
        capfd.readouterr()
        with pytest.raises(ValueError, match=r"^Latch: forward does not export to ONNX"):
            export_controller(Latch(), tmp_path / "latch", formats=("onnx",))
        assert capfd.readouterr().err == "" and kept.messages == []
        export_controller(Chatty(), tmp_path / "chatty", formats=("onnx",))
        assert "chatty: traced" in capfd.readouterr().err and "chatty: logged" in kept.messages
    finally:
        for logger in loggers:
            logger.removeHandler(kept)


class Crowded(Latch):
    """A refused export while another thread (a run training in a thread of the same script) prints and logs."""

    def forward(self, x: torch.Tensor, held: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import logging
        import sys
        import threading

        def other() -> None:
            print("other: printed")
            print("other: warned", file=sys.stderr)
            logging.getLogger("torch.export").warning("other: logged")

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return super().forward(x, held)


def test_a_refused_onnx_export_drops_nothing_another_thread_writes(tmp_path, capfd) -> None:
    """What the export held of stdout and stderr (dropped where it is refused) had been every thread's: another
    thread's prints and torch log records written meanwhile were dropped with torch's."""
    import logging

    kept: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: kept.append(record.getMessage())
    logging.getLogger("torch.export").addHandler(handler)
    try:
        capfd.readouterr()
        with pytest.raises(ValueError, match=r"^Crowded: forward does not export to ONNX"):
            export_controller(Crowded(), tmp_path / "crowded", formats=("onnx",))
        out = capfd.readouterr()
        assert "other: printed" in out.out and "other: warned" in out.err and "other: logged" in kept
    finally:
        logging.getLogger("torch.export").removeHandler(handler)


def test_what_a_file_would_play_otherwise_is_refused_before_it_is_written(tmp_path) -> None:
    """Integer state exported, then onnxruntime refused it at the first step; an action act holds for several steps
    was played anew at each by the file; export formats () removed the folder's files and kept their json."""
    class Counting(Gain):
        def forward(self, x: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.gain(x), count + 1

        def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
            return {"obs": torch.zeros(batch_size, 3), "count": torch.zeros(batch_size, 1, dtype=torch.long)}

        def export_outputs(self) -> list[str]:
            return ["action", "count"]

    with pytest.raises(ValueError, match=r"Counting: export input 'count' is torch.int64; exported files take and "
                                         r"hold float32 inputs"):
        export_controller(Counting(), tmp_path)
    with pytest.raises(ValueError, match=r"Gain: decision_period 3 with forward\(obs\) alone: an exported file calls "
                                         r"forward at every step"):
        export_controller(Gain(decision_period=3), tmp_path)
    assert not list(tmp_path.iterdir())
    export_controller(Gain(), tmp_path, formats="onnx")  # one format by name, not letter by letter
    with pytest.raises(ValueError, match=r"no export format given"):
        export_controller(Gain(), tmp_path, formats=())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["controller.json", "controller.onnx"]


def test_an_exported_controllers_reset_refuses_what_is_not_a_mask(tmp_path) -> None:
    exported = ExportedController(export_controller(Gain(), tmp_path)["onnx"])
    for bad in (3, "abc", [2, 3]):
        with pytest.raises(ValueError, match=r"ExportedController.reset\(mask\)"):
            exported.reset(bad)
    exported.reset(torch.tensor([True, False]))


def test_an_exported_file_copied_without_its_controller_json_says_what_to_do(tmp_path) -> None:
    """controller.onnx copied to a robot alone had been refused as "controller.json: missing; it describes how to
    feed controller.onnx", with nothing said of what to do."""
    paths = export_controller(Gain(), tmp_path / "export")
    paths["meta"].unlink()
    with pytest.raises(FileNotFoundError, match=r"controller.json: missing; it describes how to feed controller.onnx: "
                                                r"copy it along with controller.onnx, or export it again with "
                                                r"`robolearn export .*`"):
        ExportedController(paths["onnx"])

@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_a_replaced_torchscript_file_is_refused_before_it_is_loaded(tmp_path) -> None:
    """TorchScript runs a module's own __setstate__ as torch.jit.load reads the file: a controller.pt not the
    one its export recorded had run its code before the digest refused it."""
    from robolearn.checkpoint import CheckpointError

    class Loud(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.zeros(1)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :1]

        @torch.jit.export
        def __getstate__(self) -> tuple[torch.Tensor, bool]:
            return (self.w, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
            print("ran at load")  # (TorchScript's print: the process's stdout, not sys.stdout)
            self.w = state[0]
            self.training = state[1]

    path = export_controller(Gain(), tmp_path, ("torchscript",))["torchscript"]
    torch.jit.save(torch.jit.script(Loud()), str(path))
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", "import sys; from robolearn.export import ExportedController\n"
                          "try: ExportedController(sys.argv[1])\nexcept Exception as e: print(e)", str(path)],
                         capture_output=True, text=True)
    assert "its contents are not what its export wrote" in run.stdout, run.stdout + run.stderr
    assert "ran at load" not in run.stdout, run.stdout
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])  # cut short: said to be, still unloaded
    with pytest.raises(CheckpointError, match="not a loadable exported controller"):
        ExportedController(path)


def test_controller_json_is_read_up_to_its_bounds_and_its_recorded_dynamics_checked(tmp_path) -> None:
    """An observation of MAX_OBS_SIZE numbers and a chunk of MAX_CHUNK_LENGTH actions are read, one more is
    refused; a recorded delay of 0 steps (a hand-edited file's, which off_defaults reads as none) is read, and a
    delay or randomization that is not a mapping, or a delay of true, is refused by key."""
    import json
    import re

    from robolearn.checkpoint import CheckpointError
    from robolearn.export import MAX_CHUNK_LENGTH, MAX_OBS_SIZE, read_controller_meta

    path = tmp_path / "controller.json"

    def read(**meta):
        base = {"obs_groups": ["policy"], "obs_size": 3, "decision_period": 1, "inputs": {"obs": [3]}}
        path.write_text(json.dumps({**base, **meta}))
        return read_controller_meta(path)

    most = {"obs_size": MAX_OBS_SIZE, "inputs": {"obs": [MAX_OBS_SIZE]}, "decision_period": MAX_CHUNK_LENGTH,
            "chunk": {"length": MAX_CHUNK_LENGTH, "mode": "open_loop", "decay": 0.0}}
    assert read(**most, delay={"obs_delay_steps": 0})["obs_size"] == 2**24
    with pytest.raises(CheckpointError, match="'obs_size' 16,777,217 is more than the 16,777,216"):
        read(**{**most, "obs_size": MAX_OBS_SIZE + 1})
    with pytest.raises(CheckpointError, match="'chunk' length 4,097 is more than the 4,096"):
        read(**{**most, "decision_period": MAX_CHUNK_LENGTH + 1,
                "chunk": {"length": MAX_CHUNK_LENGTH + 1, "mode": "open_loop", "decay": 0.0}})
    for key, value in (("delay", {"obs_delay_steps": True}), ("delay", [2]), ("randomization", [1])):
        with pytest.raises(CheckpointError, match=re.escape(f"'{key}' {value!r} is not what an export writes")):
            read(**{key: value})


def test_exporting_and_loading_torchscript_says_nothing_of_its_deprecation(trained_agent, random_obs, tmp_path):
    """torch 2.13 deprecates torch.jit (trace, save, load each warn): the export and ExportedController filter it
    where they call it, so `robolearn export`, eval, play and deploy print none of it (the README says ONNX is the
    recommended format)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = export_controller(trained_agent.controller(), tmp_path, formats=("torchscript",))
        assert ExportedController(paths["torchscript"]).act(random_obs(2)).shape == (2, 2)
