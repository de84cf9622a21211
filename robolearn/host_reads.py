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
import traceback
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

ROOT = Path(__file__).resolve().parents[1]
OURS = tuple(ROOT / folder for folder in ("robolearn", "sims", "policies"))
# Calls that hand a tensor's value to Python, and so wait for the device (by torch's names for them).
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "numpy", "nonzero",
         "unique", "masked_select", "cpu"}
INDEXING = {"__getitem__", "__setitem__", "index_put_"}


def read_scalars(values: Mapping[str, Any]) -> dict[str, float]:
    """``values`` (0-dim tensors, Python or numpy numbers) as floats, the tensors read in one transfer: a
    ``float()`` each would be a wait for the GPU each (an iteration's logged sums)."""
    tensors = {key: value for key, value in values.items() if isinstance(value, torch.Tensor)}
    read = dict(zip(tensors, torch.stack([value.detach().to(next(iter(tensors.values())).device, torch.float64)
                                          .reshape(()) for value in tensors.values()]).tolist())) if tensors else {}
    return {key: read[key] if key in read else float(value) for key, value in values.items()}


class HostReads(TorchFunctionMode):
    """Within ``with HostReads() as reads:``, ``reads.sites`` counts host-reading tensor calls by
    ``(call, file, line)``, the innermost line under ``code`` (folders; robolearn/, sims/ and policies/)
    that made each, while ``reads.counting`` is set. Reads of copies already on the host (what ``.cpu()``
    returned, and what is computed from such copies alone) cost nothing on a GPU and are not counted: on a
    CPU device every tensor is on the host, so they are told apart by tracking the copies."""

    def __init__(self, counting: bool = True, code: tuple[Path, ...] = OURS) -> None:
        super().__init__()
        self.counting = counting
        self._code = tuple(f"{folder}/" for folder in code)
        self.sites: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self._host_copies = WeakIdKeyDictionary()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        inputs = [value for value in (*args, *(kwargs or {}).values()) if isinstance(value, torch.Tensor)]
        on_host = bool(inputs) and all(value in self._host_copies for value in inputs)
        to_host = name == "cpu" or name == "to" and _leaves_the_device(args, kwargs or {})
        if self.counting and not on_host and (name in READS or to_host or name in INDEXING and _indexes_by_mask(args)):
            self._count("mask index" if name in INDEXING else name)
        result = func(*args, **(kwargs or {}))
        return self._on_host(result) if to_host or on_host else result

    def _on_host(self, result: Any) -> Any:
        """``result`` marked as a copy on the host, and so are its parts (``unbind``, ``split``, iteration)."""
        if isinstance(result, torch.Tensor):
            self._host_copies[result] = True
        elif isinstance(result, (tuple, list)) or hasattr(result, "__next__"):  # an iterator: kept as a tuple
            parts = tuple(self._on_host(part) for part in result)
            return parts if isinstance(result, tuple) else list(parts) if isinstance(result, list) else iter(parts)
        return result

    def _count(self, name: str) -> None:
        for frame in reversed(traceback.extract_stack()[:-2]):
            if frame.filename.startswith(self._code) and frame.filename != __file__:  # the line that asked
                path = Path(frame.filename)
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                self.sites[(name, str(where), frame.lineno or 0)] += 1
                return


def _indexes_by_mask(args: tuple) -> bool:
    """A boolean-tensor index (``x[mask]``, ``x[mask] = y``): its result's size is only known on the host."""
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)


def _leaves_the_device(args: tuple, kwargs: dict) -> bool:
    """Whether ``tensor.to(...)`` copies a GPU tensor to the host (``.to("cpu")``); on a CPU device,
    ``.to(env.device)`` is no transfer, and on a GPU it is not to the host."""
    return args[0].device.type != "cpu" and any(
        isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
        for target in (*args[1:], kwargs.get("device")))
