"""Chunked execution: decide once, act for several control steps.

A *chunk* is a short sequence of actions ``(num_envs, K, *action_shape)``
decided from one observation. A sequence controller (SRL) produces chunks
itself: it is a module whose ``forward(obs) -> (B, K, A)`` and whose
``chunk_length`` is K. Any other controller is a chunk source of length 1
(its action).

:class:`ChunkedController` turns a chunk source into a Controller, in one of
two modes (ACT, Zhao et al. 2023):

- ``open_loop``: query the source every ``length`` steps and play the chunk
  open loop. This is what lowers the decision rate: ``decision_period ==
  length``. Past the source's own K (a flat policy has K = 1) the chunk is
  continued per ``beyond``: ``"hold"`` repeats its last action (what FAS does
  with a flat policy), ``"extend"`` asks the source for a longer chunk
  (``forward(obs, length)``; SRL's GRU keeps unrolling open loop).
- ``ensemble``: query every step and blend all predictions made for the
  current step with weights ``w_i = exp(-m i)``, ``i = 0`` the oldest (ACT's
  temporal ensembling, m = 0.01). Normalized, ``w`` is proportional to
  ``exp(m * age)``. ``decision_period == 1``: smoother, not slower.

The queue lives in :class:`ActionQueue`, which the exported controller
(``robolearn.export.ExportedController``) reuses around a chunk-returning
TorchScript/ONNX file, so exported and in-process sequence controllers play
chunks identically. ``forward`` (what is exported) returns the chunk
``(B, length, A)``; ``act`` plays it out one step at a time.
"""

from __future__ import annotations

import operator
from typing import Callable, Literal

import torch
from torch import nn

from robolearn.interfaces import Controller, Obs, moved_by, reset_mask, reset_rows

Mode = Literal["open_loop", "ensemble"]
Beyond = Literal["hold", "extend"]
ACT_DECAY = 0.01  # ACT's m in w_i = exp(-m i)


def chunk_length(module: nn.Module) -> int | None:
    """K of a sequence source (its ``chunk_length``); None for a flat controller (forward returns one action)."""
    k = getattr(module, "chunk_length", None)
    return None if k is None else int(k)


class ActionQueue:
    """Per-env queues of decided actions; ``source(rows, length)`` makes new chunks.

    ``source(rows, length)`` returns ``(len(rows), k, A)`` chunks for the env
    rows ``rows`` (an index tensor) with ``k >= 1``; in open-loop mode rows are
    only queried when their chunk is used up (or after ``reset``), so a batch
    whose episodes desynchronize still makes one decision per ``length`` steps
    per env.
    """

    def __init__(self, length: int, mode: Mode = "open_loop", beyond: Beyond = "hold", decay: float = ACT_DECAY) -> None:
        if length < 1:
            raise ValueError(f"chunk length must be >= 1, got {length}")
        if mode not in ("open_loop", "ensemble"):
            raise ValueError(f"chunk mode must be 'open_loop' or 'ensemble', got {mode!r}")
        if beyond not in ("hold", "extend"):
            raise ValueError(f"beyond must be 'hold' or 'extend', got {beyond!r}")
        self.length, self.mode, self.beyond, self.decay = length, mode, beyond, decay
        self.chunks: torch.Tensor | None = None  # open loop: (B, length, A); ensemble: (B, age, K, A)
        self.index: torch.Tensor | None = None  # open loop: steps played of each row's chunk
        self.valid: torch.Tensor | None = None  # ensemble: (B, age) which past predictions exist
        self.decisions = 0  # source calls (rows summed): what a latency budget counts

    def reset(self, mask: torch.Tensor | None = None, who: str = "ActionQueue.reset") -> None:
        """Forget the queued actions of the envs in ``mask`` (all when None); ``who``: the controller whose queue
        this is, named where the mask has another length than the queue's rows."""
        if self.index is not None:
            self.index[reset_rows(mask, self.index, who)] = self.length
        if self.valid is not None:
            self.valid[reset_rows(mask, self.valid, who)] = False

    def clear(self) -> None:
        """Forget every env's queue and the number of envs: the next step decides anew for all of them, on the
        device and in the dtype the source then gives."""
        self.chunks = self.index = self.valid = None

    def fit(self, chunk: torch.Tensor, length: int, have: int | None = None) -> torch.Tensor:
        """``chunk`` cut or continued to ``length`` steps (continued by holding its last action).

        ``have``: the chunk's length when known statically (keeps tracing free of shape checks)."""
        have = int(chunk.shape[1]) if have is None else have
        if have >= length:
            return chunk if have == length else chunk[:, :length]
        tail = chunk[:, -1:].expand(-1, length - have, *chunk.shape[2:])
        return torch.cat([chunk, tail], dim=1)

    def next(self, batch: int, source: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        """This control step's action for every env ``(batch, A)``."""
        return self._open_loop(batch, source) if self.mode == "open_loop" else self._ensemble(batch, source)

    def _open_loop(self, batch: int, source: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        if self.index is None or self.index.shape[0] != batch:
            self.index = torch.full((batch,), self.length, dtype=torch.long)
            self.chunks = None
        rows = (self.index >= self.length).nonzero().squeeze(1)
        if len(rows):
            fresh = self.fit(source(rows, self.length), self.length)
            if self.chunks is None:
                self.chunks = fresh.new_zeros(batch, *fresh.shape[1:])
            self.chunks[rows.to(fresh.device)] = fresh
            self.index[rows] = 0
            self.decisions += len(rows)
        index = self.index.to(self.chunks.device)
        action = self.chunks[torch.arange(batch, device=self.chunks.device), index]
        self.index += 1
        return action

    def _ensemble(self, batch: int, source: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        everyone = torch.arange(batch)
        fresh = self.fit(source(everyone, self.length), self.length)  # (B, K, A): K predictions from now on
        k = fresh.shape[1]
        self.decisions += batch
        if self.chunks is None or self.chunks.shape[0] != batch or self.chunks.shape[1] != k:
            self.chunks = fresh.new_zeros(batch, k, *fresh.shape[1:])
            self.valid = torch.zeros(batch, k, dtype=torch.bool)
        # Age a = 0 newest; the prediction made a steps ago for this step is its element a.
        self.chunks = torch.roll(self.chunks, 1, dims=1)
        self.valid = torch.roll(self.valid, 1, dims=1)
        self.chunks[:, 0], self.valid[:, 0] = fresh, True
        ages = torch.arange(k, device=fresh.device)
        mine = self.chunks[:, ages, ages]  # (B, age, A)
        # exp(-m i), i from the oldest, normalized: as a softmax, which does not overflow where m (K - 1) > 88
        logits = (self.decay * ages.float()).expand(batch, k)  # (float32 weights, whatever the chunks hold)
        weight = torch.softmax(logits.masked_fill(~self.valid.to(fresh.device), float("-inf")), dim=1)
        return (weight.view(batch, k, *([1] * (mine.dim() - 2))) * mine).sum(1)


class ChunkedController(Controller):
    """``controller`` played in chunks of ``length`` steps (see the module docstring).

    ``controller`` is a sequence module (``chunk_length`` K, ``forward(x) ->
    (B, K, A)``), any Controller, or an exported one (``ExportedController``,
    which cannot ``extend``). Stateless ones are queried through their
    ``forward`` on the env rows that need a decision; stateful ones (recurrent,
    hierarchical) through ``act`` on the whole batch, and are not exportable
    in chunks (and are asked every step, so their clocks and memories see every
    observation: only their actions are held). ``length`` defaults to the source's K. A ChunkedController given is replaced by its source,
    at its length unless ``length`` is given; the other settings are this one's.
    """

    __jit_ignored_attributes__ = ["obs_groups", "obs_size", "queue"]

    def __init__(self, controller: nn.Module, length: int | None = None, mode: Mode = "open_loop",
                 beyond: Beyond = "hold", decay: float = ACT_DECAY) -> None:
        super().__init__()
        if isinstance(controller, ChunkedController):  # its source (a hold-mode wrapper would not extend), at its length
            length = controller.length if length is None else length
            controller = controller.inner
        if not all(hasattr(controller, name) for name in ("obs_groups", "obs_size")):  # (an nn.Linear had been an
            raise TypeError(f"ChunkedController wraps a Controller (obs_groups, obs_size, act), or an exported one; "
                            f"got {type(controller).__name__}")  # AttributeError about obs_groups)
        self.inner = controller
        self.sequence = chunk_length(controller) is not None
        self.source_length = chunk_length(controller) or 1
        if length is not None and (isinstance(length, bool) or not hasattr(length, "__index__")):
            raise TypeError(f"chunk length must be a whole number of steps, got {length!r}")
        self.length = self.source_length if length is None else operator.index(length)  # 0: refused by the queue
        self.queue = ActionQueue(self.length, mode, beyond, decay)
        self.obs_groups, self.obs_size = tuple(controller.obs_groups), int(controller.obs_size)
        self.decision_period = self.length if mode == "open_loop" else 1
        self.chunk_length = self.length
        inputs = controller.export_inputs() if hasattr(controller, "export_inputs") else {"obs": None}
        self.stateless = list(inputs) == ["obs"]  # an exported file (ExportedController) is a source too
        if beyond == "extend" and self.sequence and not isinstance(controller, nn.Module):
            raise ValueError(f"beyond='extend' unrolls a sequence module past its {self.source_length} actions; "
                             f"an exported controller ({type(controller).__name__}) plays only its own "
                             f"{self.source_length}: use beyond='hold', or the run's checkpoint")

    def forward(self, obs: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """The chunk ``(B, length, A)`` decided from ``obs`` (the exported function).

        ``length`` (not exported) asks for a longer chunk, so a ChunkedController
        is itself a chunk source of ``chunk_length == length``."""
        length = length or self.length
        extended = self.sequence and self.queue.beyond == "extend" and length > self.source_length
        return self.queue.fit(self._chunk(obs, length), length, length if extended else self.source_length)

    def _chunk(self, x: torch.Tensor, length: int) -> torch.Tensor:
        if not self.sequence:
            return self.inner(x).unsqueeze(1)
        if self.queue.beyond == "extend" and length > self.source_length:
            return self.inner(x, length)
        return self.inner(x)

    @torch.no_grad()
    def act(self, obs: Obs) -> torch.Tensor:
        if not self.stateless:  # a stateful controller decides through its own act, whole batch
            action = self.inner.act(obs)
            return self.queue.next(action.shape[0], lambda rows, _: action[rows.to(action.device)].unsqueeze(1))
        x = self.read(obs)
        return self.queue.next(x.shape[0], lambda rows, length: self._chunk(x[rows.to(x.device)], length))

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> ChunkedController:
        """nn.Module's move of parameters and buffers (``.to()``, ``.cuda()``, ``.double()``...), which also lets the
        queued chunks go if it would move them: every env decides anew at the next ``act``, where the source then
        computes (a new episode; a move that changes nothing keeps the queue). Kept where they were made, they had
        been played on after the move, then handed the source's new chunks at the next decision: on a GPU, CPU
        chunks indexed with CUDA rows raise; moved to float64, float32 chunks refuse float64 ones. The queue's step
        counts stay on the host by design; a source's own state goes with its own move (a child module)."""
        if moved_by(fn, self.queue.chunks):
            self.queue.clear()
        return super()._apply(fn, recurse)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        who = f"{type(self).__name__}.reset"
        mask = reset_mask(mask, who=who)
        self.queue.reset(mask, who)
        if callable(getattr(self.inner, "reset", None)):  # a Controller, or an exported one (not a subclass)
            self.inner.reset(mask)

    def export_outputs(self) -> list[str]:
        return ["actions"]

    def export_meta(self) -> dict[str, object]:
        """How the exported chunk is played (controller.json's ``chunk``)."""
        return {"chunk": {"length": self.length, "mode": self.queue.mode, "decay": self.queue.decay}}
