"""StateCopy: the runner's per-iteration copy of the agent's state, in buffers reused from one copy to the next."""

from __future__ import annotations

import torch

from robolearn.state_copy import StateCopy, fresh
from robolearn.torch_ops import TorchOps


def state(weight: torch.Tensor, step: float) -> dict:
    return {"actor": {"weight": weight}, "optimizer": {"state": {0: {"step": torch.tensor(step)}},
                                                       "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999)}]},
            "learning_rate": torch.tensor(1e-3, dtype=torch.float64), "name": "ppo"}


def test_a_copy_keeps_the_values_of_when_it_was_taken_and_reuses_its_buffers_in_one_op():
    weight, copier = torch.ones(3, requires_grad=True), StateCopy()
    first = copier.take(state(weight, 1.0))
    with torch.no_grad():
        weight.mul_(5)  # the agent moves on: the copy does not
    assert first["actor"]["weight"].tolist() == [1.0, 1.0, 1.0] and not first["actor"]["weight"].requires_grad
    assert first["optimizer"]["param_groups"] == [{"lr": 1e-3, "betas": (0.9, 0.999)}] and first["name"] == "ppo"
    later = state(weight, 2.0)
    with TorchOps() as ops:
        second = copier.take(later)
    # one op for each dtype's tensors (float32, float64: a GPU's multi-tensor copy takes one dtype), where a
    # deepcopy took ~7 a tensor
    assert dict(ops.counts) == {"_foreach_copy_": 2}
    assert second["actor"]["weight"] is first["actor"]["weight"]  # the same buffer, overwritten
    assert second["actor"]["weight"].tolist() == [5.0, 5.0, 5.0]
    assert second["optimizer"]["state"][0]["step"].item() == 2.0
    assert second["learning_rate"].dtype == torch.float64


def test_new_buffers_when_the_structure_or_a_shape_changes():
    copier = StateCopy()
    before = copier.take({"w": torch.zeros(2)})
    grown = copier.take({"w": torch.ones(3)})  # a wider layer
    assert grown["w"].tolist() == [1.0, 1.0, 1.0] and before["w"].tolist() == [0.0, 0.0]
    more = copier.take({"w": torch.ones(3), "m": torch.full((3,), 2.0)})  # moments appear after a first step
    assert more["m"].tolist() == [2.0, 2.0, 2.0] and more["w"] is not grown["w"]


def test_an_optimizer_loaded_from_a_fresh_copy_does_not_take_its_buffers_as_its_own():
    """Adam's ``load_state_dict`` keeps tensors whose dtype and device fit: loaded with the copy itself, its
    moments and step would be the copy's buffers, and the steps after a rewind would move the copy."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([weight], fused=True)
    weight.sum().backward()
    optimizer.step()
    copy = StateCopy().take(optimizer.state_dict())
    optimizer.load_state_dict(fresh(copy))  # a Ctrl+C's rewind, and training goes on
    weight.sum().backward()
    optimizer.step()
    assert copy["state"][0]["step"].item() == 1.0 and optimizer.state_dict()["state"][0]["step"].item() == 2.0
