"""Count the calls that would make the host wait for a GPU, by the line of our code that made them.

On a GPU, torch queues work and returns at once; a call that needs a value on the host (``.item()``,
``.tolist()``, ``if tensor:``, ``nonzero()``, a boolean-mask index, ``.cpu()``) waits for the queue to
drain, and meanwhile the host queues nothing. :class:`HostReads` (a ``TorchFunctionMode``: it sees every
tensor call made from Python) counts them, so that a step or an update can be checked for them on any
device, MuJoCo Warp's CPU device included: ``benchmarks/host_syncs.py`` tables a PPO run's, and a test
holds the env step to its one (the reset's ``nonzero``). It sees torch calls only: Warp's own work is
not in its count (on CUDA the backend replays it as captured graphs, which cannot read to the host).
"""

from __future__ import annotations

import collections
import os
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

ROOT = Path(__file__).resolve().parents[1]
OURS = tuple(ROOT / folder for folder in ("robolearn", "sims", "policies"))
# Calls that hand a tensor's value to Python, or whose result's size depends on its values, and so wait
# for the device (by torch's names for them).
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "__repr__", "numpy",
         "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount", "equal", "allclose"}
INDEXING = {"__getitem__", "__setitem__", "index_put_"}
# Where torch.optim reads its step counter with .item() (non-fused Adam, every step): it keeps the counter on
# the host (device="cpu") unless capturable or fused, so the read is free on a GPU.
OPTIMIZER_STEP_READ = ("torch/optim/optimizer.py", "_get_value")
# Calls that make a new tensor from Python values alone, on the default device when not told one.
FACTORIES = {"tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "logspace",
             "eye", "rand", "randn", "randint", "randperm"}


def read_scalars(values: Mapping[str, Any]) -> dict[str, float]:
    """``values`` (0-dim tensors, Python or numpy numbers) as floats, the tensors read in one transfer: a
    ``float()`` each would be a wait for the GPU each (an iteration's logged sums)."""
    tensors = {key: value for key, value in values.items() if isinstance(value, torch.Tensor)}
    for key, value in tensors.items():
        if value.numel() != 1:
            raise ValueError(f"{key!r}: a logged value must be one number, got a tensor of shape {tuple(value.shape)}")
    device = next((value.device for value in tensors.values() if value.device.type != "cpu"), torch.device("cpu"))
    read = dict(zip(tensors, torch.stack([value.detach().to(device, torch.float64).reshape(())
                                          for value in tensors.values()]).tolist())) if tensors else {}
    return {key: read[key] if key in read else float(value) for key, value in values.items()}


class HostReads(TorchFunctionMode):
    """Within ``with HostReads() as reads:``, ``reads.sites`` counts host-reading tensor calls by
    ``(call, file, line)``, the innermost line under ``code`` (folders; robolearn/, sims/ and policies/,
    so a task of one's own passes its folder) that made each, while ``reads.counting`` is set.

    Reads of copies already on the host (what ``.cpu()`` returned, and what is computed from such copies
    alone) cost nothing on a GPU and are not counted. ``stand_in`` (the default; False on a GPU run): the
    run is on a CPU device standing in for a GPU (MuJoCo Warp's), so every ``.cpu()`` counts as the transfer
    it would be there and returns a copy, as there; a ``.to("cpu")`` is counted only from a GPU tensor, as it
    cannot be told from ``.to(env.device)`` on a CPU.
    A tensor made without naming a device (``torch.zeros(3)``, ``torch.tensor(0.0)``, no default device set)
    is on the host on a GPU run too, so a stand-in marks it as a host copy: the chunked controller's decision
    index. Nor are torch.optim's reads of its step counters counted (``OPTIMIZER_STEP_READ``).
    """

    def __init__(self, counting: bool = True, code: tuple[Path, ...] | Path | str = OURS,
                 stand_in: bool = True) -> None:
        super().__init__()
        if isinstance(code, (str, os.PathLike)):  # one folder: a str had been taken letter by letter, counting nothing
            code = (code,)
        self.counting = counting
        self.stand_in = stand_in
        self._code = tuple(f"{Path(folder).resolve()}/" for folder in code)
        self.sites: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self._host_copies = WeakIdKeyDictionary()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        on_host = bool(inputs) and all(self._is_on_host(value) for value in inputs)
        if on_host and self.stand_in and self._to_device(name, args, kwargs):
            on_host = False  # a host value sent to the device (Task.on_device): the device's from here on
        to_host = self._to_host(name, args, kwargs)
        if self.counting and not on_host and (to_host or _reads(name, args, kwargs, self.stand_in)):
            self._count("mask index" if name in INDEXING else name)
        result = func(*args, **kwargs)
        if to_host and name == "cpu" and result is args[0]:
            result = result.clone()  # on a stand-in, the device's own tensor: copied, as on a GPU
        made_on_host = self.stand_in and not inputs and _made_on_the_host(name, kwargs)
        return self._on_host(result) if to_host or on_host or made_on_host else result

    def _is_on_host(self, value: torch.Tensor) -> bool:
        """A copy made on the host, or, on a GPU run, any CPU tensor (on a stand-in, CPU tensors are the device's)."""
        return value in self._host_copies or not self.stand_in and value.device.type == "cpu"

    def _to_device(self, name: str, args: tuple, kwargs: dict) -> bool:
        """``.cuda()``, or ``.to(...)`` naming a device (``.to(env.device)``, which is the CPU on a stand-in)
        or a tensor of the device's: on a GPU run, a copy from the host to the GPU."""
        if name == "cuda":
            return True
        targets = (*args[1:], kwargs.get("device"))
        return name == "to" and any(isinstance(target, (str, torch.device)) or isinstance(target, torch.Tensor)
                                    and not self._is_on_host(target) for target in targets)

    def _to_host(self, name: str, args: tuple, kwargs: dict) -> bool:
        """A copy from the device to the host: ``.cpu()``, ``.to("cpu")``, ``host.copy_(device_tensor)``."""
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is None:
            return False
        if name == "cpu":
            return self.stand_in or source.device.type != "cpu"
        if name == "to":
            return source.device.type != "cpu" and _names_the_cpu((*args[1:], kwargs.get("device")))
        if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return source.device.type == "cpu" and args[1].device.type != "cpu"
        return False

    def _on_host(self, result: Any) -> Any:
        """``result`` with its tensors marked as copies on the host (parts of ``unbind``, ``max(dim)``...
        too); an iterator's parts are taken and handed on as a fresh iterator."""
        if hasattr(result, "__next__"):
            return iter([self._on_host(part) for part in result])
        for leaf in tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self._host_copies[leaf] = True
        return result

    def _count(self, name: str) -> None:
        stack = traceback.extract_stack()[:-2]
        if stack and (Path(stack[-1].filename).as_posix().endswith(OPTIMIZER_STEP_READ[0])
                      and stack[-1].name == OPTIMIZER_STEP_READ[1]):
            return
        for frame in reversed(stack):
            if frame.filename.startswith(self._code) and frame.filename != __file__:  # the line that asked
                path = Path(frame.filename)
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                self.sites[(name, str(where), frame.lineno or 0)] += 1
                return


def _reads(name: str, args: tuple, kwargs: dict, stand_in: bool) -> bool:
    """Whether this call needs a value of its tensors on the host (besides copies to it)."""
    if name in READS:
        return True
    if name == "where":  # torch.where(mask) alone: nonzero
        return len(args) + len(kwargs) == 1
    if name == "repeat_interleave":  # repeats as a tensor, without output_size: the output's size
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        return isinstance(repeats, torch.Tensor) and repeats.numel() > 1 and kwargs.get("output_size") is None
    if name == "one_hot":  # without num_classes: the largest value
        classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        return classes == -1
    if name in INDEXING:
        return _indexes_by_mask(name, args, stand_in)
    return False


def _indexes_by_mask(name: str, args: tuple, stand_in: bool) -> bool:
    """A boolean-tensor index (``x[mask]``, ``x[mask] = y``): the size of what it selects is only known on
    the host; except ``x[mask] = number`` (or a one-number host tensor, not a device one on a CPU standing in
    for a GPU), which torch does as ``masked_fill_``."""
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, (tuple, list)) else (index,)
    by_mask = any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)
    if by_mask and name == "__setitem__" and len(parts) == 1:
        value = args[2] if len(args) > 2 else None
        return not (isinstance(value, (int, float, bool))
                    or isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type == "cpu"
                    and not stand_in)
    return by_mask


def _made_on_the_host(name: str, kwargs: dict) -> bool:
    """A new tensor made without naming a device, where that means the host (no default device set)."""
    return (name in FACTORIES and kwargs.get("device") is None
            and torch.get_default_device().type == "cpu")


def _names_the_cpu(targets: tuple) -> bool:
    """Whether ``.to(...)``'s arguments name the host: ``"cpu"``, ``torch.device("cpu")`` or a CPU tensor."""
    return any(isinstance(target, torch.Tensor) and target.device.type == "cpu"
               or isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
               for target in targets)
