"""Data-parallel training across processes, GPUs and nodes, launched by ``torchrun``.

Every rank runs the whole training loop on its own batch of worlds
(``env.num_envs`` is *per rank*: N ranks step N x num_envs worlds) with its own
seed (``seed + rank``), and the ranks stay one model:

- rank 0's initial (or resumed) agent state is broadcast, so all start identical;
- agents average their gradients over ranks after ``backward`` and before the
  optimizer step (:func:`average_gradients`), so every step is identical;
- observation normalizers merge every rank's batch statistics
  (:func:`all_gather`, Chan et al.'s formula in ``policies/modules.py``), so all
  ranks normalize identically (RSL-RL keeps them per rank);
- scalars that steer training (PPO's KL for the adaptive learning rate) are
  averaged (:func:`mean`), and logged metrics are averaged over ranks.

Only rank 0 writes the run directory. Without torchrun (``WORLD_SIZE`` unset or
1) nothing here creates a process group and every collective returns at once.
The backend is NCCL on CUDA devices and gloo on CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from robolearn.shell import shell, train_anew


def init(device: str) -> bool:
    """Join torchrun's process group (from RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) once;
    on CUDA, bind this process to GPU ``LOCAL_RANK``. False when not launched by torchrun."""
    if dist.is_initialized():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    cuda = torch.device(device).type == "cuda"
    if cuda and torch.device(device).index is not None:  # every rank would share that GPU: NCCL refuses
        raise ValueError(f"env.device={device} under torchrun: each rank runs on its own GPU (LOCAL_RANK); "
                         "set env.device=cuda")
    if missing := [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]:
        raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} is set but {', '.join(missing)} not: ranks are started "
                         "by torchrun, which sets them all; unset WORLD_SIZE (left in this shell?), or start the ranks "
                         "with robolearn train --nproc N or torchrun (README, Multi-GPU and multi-node)")
    if cuda:
        torch.cuda.set_device(local_rank())
    stop_with_the_launcher()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return True


# Set by `robolearn train --nproc` for its ranks: "<its pid>:<the log folder it gives torchrun>". The folder tells its
# own ranks (torchrun puts their TORCHELASTIC_ERROR_FILE in it) from those of another launch that inherited the
# variable: a plain torchrun line's, started from a shell where it was left exported, had stopped themselves silently
LAUNCHER_PID = "ROBOLEARN_LAUNCHER_PID"


def launcher_said(pid: int, logs: Path) -> str:
    """:data:`LAUNCHER_PID`'s value for a launcher of this ``pid`` whose torchrun writes under ``logs``."""
    return f"{pid}:{logs}"


def stop_with_the_launcher() -> None:
    """Have the kernel send this rank SIGTERM when its launcher (torchrun's agent, ``robolearn train --nproc``)
    dies, even by SIGKILL (Linux; elsewhere nothing): torchrun starts ranks in sessions of their own, so they
    had trained on, orphaned, where no Ctrl+C reaches. SIGTERM is the runner's Ctrl+C: a checkpoint, then stop.
    A rank of ``robolearn train --nproc`` whose launcher died before this (while the rank started, seconds)
    sends itself that SIGTERM here: the kernel tells only of a death after the call, and such ranks had waited
    for minutes, orphaned, for a rendezvous that was gone."""
    import ctypes
    import signal
    import sys

    global _LAUNCHER_PARENT
    _LAUNCHER_PARENT = os.getppid()  # torchrun's agent: a SIGTERM after it died is said as that (launcher_gone)
    # This rank's alone: a process it starts (a nested torchrun's rank) has another parent, and had stopped itself
    launcher = os.environ.pop(LAUNCHER_PID, "")
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG; -1 leaves it as before
    except (OSError, AttributeError):  # no libc to ask: as before
        return
    pid, _, logs = launcher.partition(":")
    ours = pid.isdigit() and logs and os.environ.get("TORCHELASTIC_ERROR_FILE", "").startswith(logs + os.sep)
    if ours and os.getppid() != int(pid):  # (a plain torchrun line's ranks: not ours, as before)
        os.kill(os.getpid(), signal.SIGTERM)


_LAUNCHER_PARENT: int | None = None  # this rank's parent as it joined the group: torchrun's agent


def launcher_gone(wait_s: float = 0.2) -> bool:
    """Whether the process that started this rank (torchrun's agent) has died since it joined. The kernel sends
    :func:`stop_with_the_launcher`'s SIGTERM as the launcher's first thread dies, before the rank is handed to
    another parent, so a SIGTERM's handler looks for up to ``wait_s`` (torchrun's own SIGTERM waits that long)."""
    import time

    deadline = time.monotonic() + wait_s
    while _LAUNCHER_PARENT is not None and os.getppid() == _LAUNCHER_PARENT and time.monotonic() < deadline:
        time.sleep(0.005)
    return _LAUNCHER_PARENT is not None and os.getppid() != _LAUNCHER_PARENT


class PeersLost(RuntimeError):
    """This rank's collectives failed because another rank stopped (crashed, killed, out of memory)."""


def lost_peers(err: BaseException, run_dir: Any) -> PeersLost | None:
    """``err`` said as what it means when a collective failed because another rank is gone (gloo's "Connection
    closed by peer", NCCL's DistBackendError: a 30-line traceback naming neither the rank nor what to do),
    else None. Which rank stopped only torchrun's log says ('local_rank: N', with that rank's own error)."""
    said = str(err)
    if not (isinstance(err, getattr(dist, "DistError", ())) or
            (isinstance(err, RuntimeError) and any(s in said for s in ("Connection closed by peer",
                                                                        "Connection reset by peer")))):
        return None
    said = (f"rank {rank()} lost the other ranks: one of them stopped (torchrun's log names it, 'local_rank: N', "
            "with its own error)")
    if not (Path(run_dir) / "checkpoints" / "latest.pt").is_file():
        return PeersLost(f"{said}; {run_dir} saved no checkpoint yet: train it anew "
                         f"({train_anew(run_dir, '--nproc', str(world_size()))}), then remove this folder")
    return PeersLost(f"{said}; the run goes on from its last checkpoint: "
                     f"{shell('robolearn', 'train', '--resume', run_dir)} --nproc {world_size()}")


def deaf_to_torchruns_sigterm() -> Any:
    """Ignore SIGTERM from here on, in a rank that lost its peers; returns the handler before (None off the main
    thread, where none can be set; SIG_DFL for one set outside Python). torchrun sends the ranks left SIGTERM once it sees one die: it had landed while
    this rank closed its logs and env, its Ctrl+C handler gone, and ended it silently, the resume line unsaid. A
    Ctrl+C or SIGKILL still stops it; the caller restores the handler once it has closed what it had open."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return signal.SIG_DFL if before is None else before  # (None: a handler not set from Python, not restorable)


def shutdown() -> None:
    """Leave the process group (if any), so NCCL releases its resources cleanly."""
    if dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    """Whether collectives talk to other ranks."""
    return dist.is_initialized()


def rank() -> int:
    """This process's global rank; from torchrun's env before :func:`init` and after :func:`shutdown`."""
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """Ranks on this machine (they share its cores)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def is_main() -> bool:
    """Rank 0: the one that writes the run directory and logs."""
    return rank() == 0


def cpu_share() -> int:
    """This rank's share of the machine's cores (physics threads when the config says 'all')."""
    return max(1, len(os.sched_getaffinity(0)) // local_world_size())


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` (any picklable value) on every rank; tensors travel through the CPU."""
    if not dist.is_initialized():
        return obj
    box = [_to_cpu(obj) if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``tensor`` (same shape on all ranks), in rank order."""
    if not dist.is_initialized():
        return [tensor]
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor.contiguous())
    return out


def mean(tensor: torch.Tensor) -> torch.Tensor:
    """The average of ``tensor`` over ranks (gloo has no AVG, so SUM then divide)."""
    if not dist.is_initialized():
        return tensor
    total = tensor.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / dist.get_world_size()


def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Replace every gradient by its average over ranks, in one flat all-reduce.

    Call after ``backward`` and before clipping and the optimizer step, so every
    rank clips and steps with the same gradient. A parameter without a gradient
    counts as a zero gradient (every rank must send the same layout).
    """
    if not dist.is_initialized():
        return
    params = list(params)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    for p, g in zip(params, flat.split([g.numel() for g in grads])):
        p.grad = g.view_as(p)


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the ranks that report it (a rank with no finished
    episode yet has no ``return``); key order of rank 0."""
    if not dist.is_initialized():
        return metrics
    every = gather_objects({k: float(v) for k, v in metrics.items()})
    keys = list(dict.fromkeys(k for m in every for k in m))
    return {k: sum(values) / len(values) for k in keys if (values := [m[k] for m in every if k in m])}


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
