"""Export a Controller as the whole deployable thing, and load it back.

TorchScript (``controller.pt``) and ONNX (``controller.onnx``) hold the network
with its observation normalization and action scaling inside. Beside them,
``controller.json`` says how to feed it: which observation groups, concatenated
in which order, the inputs and outputs of ``forward``, the decision period and
the action bounds. Stateful controllers (recurrent, hierarchical) take and return
their state explicitly in the exported ``forward``; ``export_inputs`` names it, and
:class:`ExportedController` drives it from a zero state.

Sequence (chunked) controllers export ``forward(obs) -> actions`` of shape
``(B, length, A)``: one call decides ``length`` control steps. controller.json's
``chunk`` says how to play it (``robolearn/chunking.py``): in ``open_loop``
mode, call once, apply ``actions[:, 0]``, ``actions[:, 1]``, ... one per control
step, and call again after ``length`` steps or when the episode restarts (so
``decision_period == length``); in ``ensemble`` mode call every step and
average, for the current step, the predictions of the last ``length`` calls
with weights ``exp(decay * age)``. :class:`ExportedController` keeps that queue.

controller.json is strict JSON: a float it has no number for (hopper's ``healthy_z_range`` ends at
infinity) is written as the string ``"inf"``, ``"-inf"`` or ``"nan"`` (:mod:`robolearn.strict_json`), and read
back as that float.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import sys
import threading
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.checkpoint import CheckpointError, atomic_write_files
from robolearn.chunking import ActionQueue, ChunkedController
from robolearn.config import denormals_flushed
from robolearn.interfaces import Controller, Obs, check_setup, controller_input, reset_mask, reset_rows
from robolearn.shell import shell
from robolearn.strict_json import dumps, from_finite_json

FORMATS = ("torchscript", "onnx")
FILENAMES = {"torchscript": "controller.pt", "onnx": "controller.onnx"}
MAX_STATE_SIZE = 2**24
"""Most numbers one env's state input may hold (64 MiB of float32): a GRU's hidden state or a skill holds
hundreds; a controller.json saying more is damaged or hand-edited, and its zeros had failed at the first
step as torch's allocation traceback."""
MAX_OBS_SIZE = 2**24
"""Most numbers one env's observation (controller.json's ``obs_size``) may hold (64 MiB of float32; a camera
image of 640x480x3 is under a million): the driver makes zero observations of that size before any step."""
MAX_CHUNK_LENGTH = 2**12
"""Most actions one chunk (controller.json's ``chunk`` ``length``) may hold: ensemble mode keeps ``length``
chunks of ``length`` actions per env (2**24 at this bound, as :data:`MAX_STATE_SIZE`); ACT's chunks are 100."""


def task_meta(env: Any, control_dt: float) -> dict[str, Any]:
    """What an export records of the task it was trained on (``env``: a run's ``EnvConfig``): its name,
    its settings (``env.kwargs``: episode length, limits...) and control period, so an exported folder
    alone says how to run it (``robolearn deploy`` builds the robot's task from it); ``task_settings``: all its
    plain settings, defaults included, which an env of other settings is warned against; ``randomization`` and
    ``delay``: the run's ``env.randomization`` and ``env.delay``, the settings off their defaults (``{}``: none),
    so a deploy or evaluation of the folder alone knows the dynamics and delays the controller learned under."""
    import sims
    from robolearn.evaluate import off_defaults
    from sims.delay import Delay
    from sims.randomization import Randomization

    meta = {"task": env.task, "task_kwargs": dict(env.kwargs), "control_dt": control_dt}
    if settings := sims.trained_settings(env.task, env.kwargs):
        meta["task_settings"] = settings
    meta["randomization"] = off_defaults(Randomization, getattr(env, "randomization", None))
    meta["delay"] = off_defaults(Delay, getattr(env, "delay", None))
    return meta


def export_controller(controller: Controller, out_dir: Path, formats: tuple[str, ...] = FORMATS, extra: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``controller`` in ``formats`` plus ``controller.json``; returns the paths. A file of another
    format already in ``out_dir`` is removed: it would be of an older controller than the json beside it."""
    if isinstance(formats, str):  # "onnx" would be read letter by letter
        formats = (formats,)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:  # none: every file of the folder's last export would be removed, its json kept
        raise ValueError(f"unknown export format {unknown[0]!r}; choose from {list(FORMATS)}" if unknown else
                         f"no export format given; choose from {list(FORMATS)}")
    _refuse_exported(controller)
    check_setup(controller)
    if isinstance(controller, ChunkedController) and not controller.stateless:  # not a TypeError from deep in tracing
        raise ValueError(f"a ChunkedController around {type(controller.inner).__name__}, which holds state across "
                         "steps (a skill, a subgoal, a memory), plays through that controller's act and does not "
                         "export in chunks: export the controller itself (its file carries its state)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    controller = controller.cpu().eval()
    # batch 2, not 1: torch.export specializes a batch of 1 to a constant through a GRU, leaving an ONNX
    # file that refuses any other number of envs even with the batch declared dynamic
    inputs = controller.export_inputs(batch_size=2)
    _check_plays_as_exported(controller, inputs)
    paths: dict[str, Path] = {}
    files: dict[Path, bytes] = {}
    if "torchscript" in formats:
        torchscript_bytes = _torchscript_bytes(controller, inputs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (as in _torchscript_bytes)
            traced = torch.jit.load(io.BytesIO(torchscript_bytes))
        _check_same_outputs(controller, inputs, lambda *args: traced(*args), "TorchScript")
        paths["torchscript"] = out_dir / FILENAMES["torchscript"]
        files[paths["torchscript"]] = torchscript_bytes
    if "onnx" in formats:
        paths["onnx"] = out_dir / FILENAMES["onnx"]
        onnx_bytes = _onnx_bytes(controller, inputs)
        session = _onnx_session(onnx_bytes)
        _check_same_outputs(controller, inputs, lambda *args: [torch.from_numpy(out) for out in session.run(
            None, {name: a.numpy() for name, a in zip(inputs, args)})], "ONNX")
        files[paths["onnx"]] = onnx_bytes
    meta = {
        "obs_groups": list(controller.obs_groups),
        "obs_size": controller.obs_size,
        "decision_period": controller.decision_period,
        "inputs": {name: list(t.shape[1:]) for name, t in inputs.items()},
        "outputs": controller.export_outputs(),
        **getattr(controller, "export_meta", dict)(),
        **(extra or {}),
        # each file's digest: a file damaged on disk or in a copy to the robot is refused when loaded, not run
        # (a flipped byte inside a weight loads and runs as another number)
        "sha256": {path.name: hashlib.sha256(data).hexdigest() for path, data in files.items()},
    }
    paths["meta"] = out_dir / "controller.json"
    files[paths["meta"]] = dumps(meta, indent=2).encode()  # strict JSON
    # one set: a full disk between files had left a new controller.pt beside the older controller.onnx
    atomic_write_files({path: lambda f, data=data: f.write(data) for path, data in files.items()})
    for fmt in set(FORMATS) - set(formats):
        (out_dir / FILENAMES[fmt]).unlink(missing_ok=True)
    return paths


def _refuse_exported(controller: Any) -> None:
    """An exported file (an :class:`ExportedController`, alone or chunked) holds no module to trace: it had been
    said to skip ``super().__init__()``, or (chunked) to compute with numpy, neither of which its user wrote."""
    inner = controller.inner if isinstance(controller, ChunkedController) else controller
    if isinstance(inner, ExportedController):
        chunked = isinstance(controller, ChunkedController)
        raise ValueError(f"{'a ChunkedController around ' if chunked else ''}an exported controller (ExportedController) "
                         "does not export again: export the run's own controller, "
                         + ("export_controller(ChunkedController(robolearn.load_controller(run), length), out_dir) "
                            "for another chunk length" if chunked else "robolearn export RUN"))


def _onnx_session(model: bytes | str) -> Any:
    """An ONNX Runtime CPU session of ``model`` (the file's bytes or path), the CPU's flushing of denormal floats left
    as it was: a process's first session turned it off, and a run that exports while it trains (a fine-tune's
    ``pretrained/``, a skill agent's) trained on after it on denormals (``runner.flush_denormal``), unlike its resume."""
    import onnxruntime

    flushing = denormals_flushed()
    try:
        return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    finally:
        torch.set_flush_denormal(flushing)


def _check_plays_as_exported(controller: Controller, inputs: dict[str, torch.Tensor]) -> None:
    """Refuse what an exported file would play otherwise than the controller: state that is not float (the files'
    drivers hold float32 state: onnxruntime refused the file at its first step), and actions held for
    ``decision_period`` steps by ``act`` alone (the file's ``forward`` is called every step)."""
    name = type(controller).__name__
    for key, value in inputs.items():
        if not value.is_floating_point():
            raise ValueError(f"{name}: export input '{key}' is {value.dtype}; exported files take and hold float32 "
                             "inputs: keep state (a counter, a skill index) as a float tensor")
    if controller.decision_period > 1 and len(inputs) == 1 and "chunk" not in getattr(controller, "export_meta",
                                                                                        dict)():
        raise ValueError(f"{name}: decision_period {controller.decision_period} with forward(obs) alone: an exported "
                         "file calls forward at every step, so an action act holds for several steps would not be "
                         "held; export the hold as state (export_inputs, as skill controllers do) or make a "
                         "ChunkedController of it")


def _check_same_outputs(controller: Controller, inputs: dict[str, torch.Tensor], exported: Any, fmt: str) -> None:
    """Refuse an export whose outputs differ from the controller's own on a batch of random observations, from
    the fresh-start state and (a stateful controller) again from the state that step returned, as a driver feeds
    it back: tracing turns what ``forward`` computes outside torch (numpy, Python math or an ``if`` on tensor
    values) into constants, and the file would drive a robot with them. (Probed from zeros alone, a branch on the
    state had passed, traced as the fresh start's: the TorchScript file then played every step as a first one.)"""
    generator = torch.Generator().manual_seed(0)
    obs, *state = inputs.values()
    state = [torch.zeros(3, *t.shape[1:], dtype=t.dtype) for t in state]
    precision = torch.get_float32_matmul_precision()  # "medium" (some configs) is bf16 matmuls on AMX CPUs,
    torch.set_float32_matmul_precision("highest")  # which ONNX Runtime's float32 would not match
    try:
        for _ in range(2 if state else 1):
            probe = (torch.randn(3, *obs.shape[1:], generator=generator), *state)
            with torch.no_grad():
                expected, got = _as_list(controller(*probe)), _as_list(exported(*probe))
            _refuse_other_outputs(controller, expected, got, fmt)
            state = expected[1:]
    finally:
        torch.set_float32_matmul_precision(precision)


def _refuse_other_outputs(controller: Controller, expected: list[torch.Tensor], got: list[torch.Tensor],
                          fmt: str) -> None:
    """The refusal of :func:`_check_same_outputs` where an exported output is not the controller's own."""
    for name, want, have in zip(controller.export_outputs(), expected, got):
        if want.shape != have.shape or not torch.allclose(want.float(), have.float(), rtol=1e-3, atol=1e-4,
                                                          equal_nan=True):  # random obs outside its domain
            diff = (want.float() - have.float()).abs().max().item() if want.shape == have.shape else None
            found = f"shape {tuple(have.shape)} for {tuple(want.shape)}" if diff is None else f"max difference {diff:.3g}"
            raise ValueError(f"{type(controller).__name__}: its {fmt} export computes another '{name}' than it does "
                             f"({found}): forward must compute with torch operations only: numpy or Python math on "
                             "tensor values becomes a constant when exported, an if on them a fixed branch "
                             "(torch.where picks by value)")


_EXPORTING = threading.Lock()
"""Held while a controller is traced or exported: torch.export keeps process-wide state (its mode stack), and the
quieting below swaps sys.stdout, the warning filters and a logger's level for the process; two runs trained in
threads of one script had both failed at their exports ("Trying to pop empty mode stack", "a fake tensor in the
exported program")."""


def _torchscript_bytes(controller: Controller, inputs: dict[str, torch.Tensor]) -> bytes:
    """The controller traced to TorchScript on ``inputs``, as the bytes of a ``controller.pt``."""
    buffer = io.BytesIO()
    with _EXPORTING, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated upstream, still what C++/robot runtimes load
        torch.jit.save(torch.jit.trace(controller, tuple(inputs.values()), check_trace=False), buffer)
    return buffer.getvalue()


def _onnx_bytes(controller: Controller, inputs: dict[str, torch.Tensor]) -> bytes:
    """ONNX through torch.export with a dynamic batch dimension, quietly."""
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    dynamic = tuple({0: batch} for _ in inputs)  # by position: forward's own names need not be "obs" (forward(x))
    onnx_log = logging.getLogger("torch.onnx")
    try:
        with _EXPORTING:
            program = _quiet_onnx_export(controller, inputs, dynamic, onnx_log)
    except torch.onnx.OnnxExporterError as err:  # torch's page of next steps ("submit a PR to PyTorch") and stack
        cause = err
        while cause.__cause__ is not None:
            cause = cause.__cause__
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise ValueError(f"{type(controller).__name__}: forward does not export to ONNX ({type(cause).__name__}: "
                         f"{reason}): it must compute with torch operations only (an if on tensor values as "
                         "torch.where); for an operation ONNX lacks, export TorchScript alone (robolearn export RUN "
                         "--format torchscript)") from err
    buffer = io.BytesIO()
    program.save(buffer)
    return buffer.getvalue()


def _quiet_onnx_export(controller: Controller, inputs: dict[str, torch.Tensor], dynamic: tuple[dict[int, Any], ...],
                       onnx_log: logging.Logger) -> Any:
    """torch.onnx.export without its prints, warnings and log lines (under :data:`_EXPORTING`)."""
    level = onnx_log.level  # put back after: the caller's torch.onnx messages had stayed silenced for good
    onnx_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(_ThreadsOwn(sys.stdout, io.StringIO())), warnings.catch_warnings(), \
                _HeldTorchStderr():
            warnings.simplefilter("ignore")  # torch.export's deprecation chatter is not the user's business
            program = torch.onnx.export(
                controller,
                tuple(inputs.values()),
                input_names=list(inputs),
                output_names=controller.export_outputs(),
                dynamic_shapes=dynamic,
                dynamo=True,
                verbose=False,
            )
    finally:
        onnx_log.setLevel(level)
    return program


class _HeldTorchStderr:
    """What torch writes to stderr while it exports (its prints, its loggers' records), held: given out as it was
    after an export that succeeds or fails otherwise, and dropped where torch.onnx fails, which the export refuses in
    a line of its own (torch.export had left 'Unable to find user code ...' and two dumps of the partial graph,
    ``def forward(...)``, above it). Only the exporting thread's: another thread's output passes as it comes."""

    def __enter__(self) -> _HeldTorchStderr:
        self.records: list[tuple[logging.Handler, logging.LogRecord]] = []
        loggers = [logger for name, logger in list(logging.Logger.manager.loggerDict.items())
                   if name.split(".")[0] == "torch" and isinstance(logger, logging.Logger)]
        ours = threading.get_ident()  # another thread's records pass (a filter that returns None drops)
        self.holds = {handler: (lambda record, handler=handler: record.thread != ours
                                or self.records.append((handler, record)))
                      for logger in loggers for handler in logger.handlers}
        for handler, hold in self.holds.items():
            handler.addFilter(hold)
        self.printed = io.StringIO()
        self.redirect = contextlib.redirect_stderr(_ThreadsOwn(sys.stderr, self.printed))
        self.redirect.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        self.redirect.__exit__(None, None, None)
        for handler, hold in self.holds.items():
            handler.removeFilter(hold)
        if kind is not None and issubclass(kind, torch.onnx.OnnxExporterError):
            return
        sys.stderr.write(self.printed.getvalue())
        for handler, record in self.records:
            handler.handle(record)


class _ThreadsOwn:
    """``stream`` (sys.stdout, sys.stderr) while this thread exports: its writes go to ``held``, another thread's to
    ``stream`` as before (a run training in another thread of the script had its lines dropped meanwhile)."""

    def __init__(self, stream: Any, held: io.StringIO) -> None:  # (stream None: pythonw's, whose prints go nowhere)
        self.stream, self.held, self.thread = stream or io.StringIO(), held, threading.get_ident()

    def write(self, text: str) -> int:
        return (self.held if threading.get_ident() == self.thread else self.stream).write(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding...: the stream's
        return getattr(self.stream, name)


class ExportedController:
    """Runs an exported controller (TorchScript or ONNX) behind ``act(obs)``.

    Flat controllers (one ``obs`` input, an ``action`` output) and sequence ones
    (``actions``, a chunk played through an :class:`~robolearn.chunking.ActionQueue` as
    controller.json's ``chunk`` says) are stateless. Stateful ones (recurrent, skill
    controllers) take their state after ``obs`` and return the next state after the action,
    in the same order (controller.json's ``inputs`` and ``outputs``); the zero state is a
    fresh start, so this driver holds the state from zeros, feeds the outputs back, and
    zeroes an env's rows on ``reset(mask)``.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.is_dir() or path.suffix == ".json":
            folder = path if path.is_dir() else path.parent
            raise ValueError(f"{path}: give the exported file itself, {folder / FILENAMES['torchscript']} "
                             f"(TorchScript) or {folder / FILENAMES['onnx']} (ONNX); controller.json describes them")
        meta_path = path.parent / "controller.json"
        if not meta_path.is_file():
            if not path.is_file() and path.parent.name == "export":  # a run not exported (yet)
                raise FileNotFoundError(f"{path.parent}: no exported controller; {_reexport(path).replace(' again', '')}")
            raise FileNotFoundError(f"{meta_path}: missing; it describes how to feed {path.name}: copy it along "
                                    f"with {path.name}, or {_reexport(path)}")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; {_reexport(path)}")
        self.meta = read_controller_meta(meta_path, path)
        self.obs_groups = tuple(self.meta["obs_groups"])
        self.decision_period = int(self.meta["decision_period"])
        names = list(self.meta["inputs"])
        self.state_shapes = {name: tuple(self.meta["inputs"][name]) for name in names[1:]}
        self.state: list[torch.Tensor] | None = None
        if path.suffix == ".onnx":
            session = _load(path, lambda: _onnx_session(str(path)))
            check_digest(path, self.meta)  # after the load, which says a cut file is one; before any action
            self._call = lambda *args: [torch.from_numpy(out) for out in session.run(
                None, {name: a.cpu().numpy().astype(np.float32) for name, a in zip(names, args)})]
        else:
            try:  # before the load: TorchScript runs the file's own code (__setstate__) as it loads
                check_digest(path, self.meta)
            except CheckpointError:
                _load(path, lambda: zipfile.ZipFile(path).close())  # a cut file is said to be one, unloaded
                raise
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module = _load(path, lambda: torch.jit.load(str(path), map_location="cpu"))
            self._call = lambda *args: _as_list(module(*(a.cpu().float() for a in args)))
        self._run = lambda x: self._call(x)[0]
        chunk = self.meta.get("chunk")
        self.queue = ActionQueue(chunk["length"], chunk["mode"], decay=float(chunk["decay"])) if chunk else None
        self.obs_size = int(self.meta["obs_size"])
        self.chunk_length = chunk["length"] if chunk else None  # a sequence source for ChunkedController
        if chunk:  # the file's own K: one with another's controller.json would play a cut or padded chunk
            made = self._run(torch.zeros(1, self.obs_size))
            if made.dim() != 3 or made.shape[1] != chunk["length"]:
                raise CheckpointError(f"{path}: makes chunks of shape {tuple(made.shape[1:])}, but {meta_path} says "
                                      f"{chunk['length']} actions (files of two exports); {_reexport(path)}")

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """The exported function itself: ``obs`` ``(num_envs, obs_size)`` -> action or, for a sequence
        controller, the chunk."""
        if not isinstance(obs, torch.Tensor) or obs.dim() != 2 or obs.shape[1] != self.obs_size:
            shape = tuple(obs.shape) if hasattr(obs, "shape") else type(obs).__name__
            raise ValueError(f"{type(self).__name__}: the exported function takes observations (num_envs, "
                             f"{self.obs_size}), got {shape}; act(obs) takes the env's dict of groups")
        with torch.no_grad():
            return self._run(obs)

    def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        """Zero inputs of the exported function (``obs``, then any state), as the file declares them."""
        return {"obs": torch.zeros(batch_size, self.obs_size),
                **{name: torch.zeros(batch_size, *shape) for name, shape in self.state_shapes.items()}}

    def act(self, obs: Obs) -> torch.Tensor:
        """One action per env for this control step, as :meth:`Controller.act` (state and queued
        actions are held here; ``reset(mask)`` when episodes end)."""
        with torch.no_grad():
            x = controller_input(obs, self.obs_groups, self.obs_size, type(self).__name__)
            if self.state_shapes:
                if self.state is None or self.state[0].shape[0] != x.shape[0]:
                    self.state = [torch.zeros(x.shape[0], *shape) for shape in self.state_shapes.values()]
                action, *self.state = self._call(x, *self.state)
                return action
            if self.queue is None:
                return self._run(x)
            return self.queue.next(x.shape[0], lambda rows, _: self._run(x[rows.to(x.device)]))

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Forget queued actions (sequence controllers) or held state (stateful ones); flat ones hold none."""
        mask = reset_mask(mask, who=f"{type(self).__name__}.reset")  # (a flat one's too: a bad mask is a bug)
        if self.queue is not None:
            self.queue.reset(mask, f"{type(self).__name__}.reset")
        if self.state is not None:
            rows = reset_rows(mask, self.state[0], f"{type(self).__name__}.reset")
            for state in self.state:
                state[rows] = 0.0


def _load(path: Path, load: Any) -> Any:
    """``load()`` of an exported file; one that does not load (truncated, corrupt: onnxruntime's
    InvalidProtobuf, TorchScript's zip errors) raises a CheckpointError naming it and the fix."""
    try:
        return load()
    except Exception as err:  # the loaders raise their own types; the file is the only input
        reason = str(err).strip().splitlines()[0].split(". ")[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: not a loadable exported controller (truncated or corrupt: {reason}); "
                              f"{_reexport(path)}") from None


def read_controller_meta(meta_path: Path, exported: Path | None = None) -> dict[str, Any]:
    """``controller.json``, checked to hold what :class:`ExportedController` reads (observation groups and
    size, decision period, inputs starting with ``obs``, state shapes of positive sizes, at most
    :data:`MAX_STATE_SIZE` numbers each, an observation of at most :data:`MAX_OBS_SIZE` and a chunk of at most
    :data:`MAX_CHUNK_LENGTH` actions): a damaged or hand-edited file is a
    :class:`CheckpointError` naming it and the key, not a KeyError where it is first read."""
    redo = _reexport(exported or meta_path.with_name(FILENAMES["torchscript"]))
    try:
        meta = from_finite_json(json.loads(meta_path.read_text(errors="replace")))  # (older files' Infinity too)
    except (ValueError, RecursionError) as err:  # (RecursionError: brackets nested deeper than json decodes)
        raise CheckpointError(f"{meta_path}: not readable JSON ({err}); {redo}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path}: not a robolearn controller.json (no mapping of keys); {redo}")
    checks = {"obs_groups": lambda v: isinstance(v, list) and v and all(isinstance(g, str) for g in v),
              "obs_size": _is_count,
              "decision_period": _is_count,
              "inputs": lambda v: isinstance(v, dict) and list(v)[:1] == ["obs"] and all(  # the state's zeros' shapes
                  isinstance(shape, list) and all(_is_count(n) for n in shape) for shape in v.values())}
    optional = {"control_dt": lambda v: _is_number(v) and 0 < v < math.inf,
                "task": lambda v: isinstance(v, str), "task_kwargs": lambda v: isinstance(v, dict),
                "task_settings": lambda v: isinstance(v, dict), "randomization": lambda v: isinstance(v, dict),
                "delay": lambda v: isinstance(v, dict) and all(  # steps late (off_defaults compares them)
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v.values()),
                "chunk": lambda v: _is_chunk(v, meta.get("decision_period")),
                "sha256": lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values()),
                "run_id": lambda v: isinstance(v, str)}
    for key, ok in [*checks.items(), *((k, c) for k, c in optional.items() if meta.get(k) is not None)]:
        if not ok(meta.get(key)):
            said = "missing" if key not in meta else f"{meta[key]!r} is not what an export writes"
            raise CheckpointError(f"{meta_path}: '{key}' {said} (a damaged or hand-edited file); {redo}")
    bounded = {"obs_size": (meta["obs_size"], MAX_OBS_SIZE, "numbers an observation"),
               "chunk": ((meta.get("chunk") or {}).get("length", 1), MAX_CHUNK_LENGTH, "actions a chunk")}
    for key, (value, most, what) in bounded.items():  # a crafted file had asked for any allocation
        if value > most:
            said = "'chunk' length" if key == "chunk" else f"'{key}'"
            raise CheckpointError(f"{meta_path}: {said} {value:,} is more than the {most:,} {what} may hold (a "
                                  f"damaged or hand-edited file); {redo}")
    for name, shape in list(meta["inputs"].items())[1:]:  # the state, held from zeros of these shapes
        if (size := math.prod(shape)) > MAX_STATE_SIZE:
            raise CheckpointError(f"{meta_path}: 'inputs' state '{name}' has shape {shape}, {size:,} numbers per env, "
                                  f"more than the {MAX_STATE_SIZE:,} a controller's state may hold (a damaged or "
                                  f"hand-edited file); {redo}")
    return meta


def check_digest(path: Path, meta: dict[str, Any]) -> None:
    """Refuse an exported file whose SHA-256 is not the one its export recorded in controller.json (exports
    before the digests were recorded have none: not checked)."""
    recorded = (meta.get("sha256") or {}).get(path.name)
    if recorded is None:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != recorded:
        raise CheckpointError(f"{path}: its contents are not what its export wrote (SHA-256 {digest.hexdigest()[:12]}..., "
                              f"controller.json records {recorded[:12]}...): damaged on disk or in a copy, or replaced "
                              f"by another file; {_reexport(path)}, or copy the folder again")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_chunk(chunk: Any, decision_period: int) -> bool:
    """controller.json's ``chunk`` as ChunkedController.export_meta writes it, played at ``decision_period``
    (its length open loop, every step in ensemble mode)."""
    if not (isinstance(chunk, dict) and isinstance(chunk.get("length"), int) and not isinstance(chunk["length"], bool)
            and chunk["length"] >= 1 and _is_number(chunk.get("decay")) and math.isfinite(chunk["decay"])):
        return False
    return decision_period == {"open_loop": chunk["length"], "ensemble": 1}.get(chunk.get("mode"))


def _reexport(path: Path) -> str:
    """How to write an exported controller again: from its run's checkpoint."""
    run = shell(path.parent.parent) if path.parent.name == "export" else "RUN"
    return f"export it again with `robolearn export {run}`"


def _as_list(out: torch.Tensor | tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """A function's outputs as a list: one tensor, or a tuple of action and state."""
    return list(out) if isinstance(out, (tuple, list)) else [out]
