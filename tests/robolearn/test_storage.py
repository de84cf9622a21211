"""Rollout and replay storage keep nested transitions in order."""

import torch

from robolearn.storage import ReplayBuffer, RolloutStorage


def transition(value: float, n: int = 3):
    return {"obs": {"policy": torch.full((n, 2), value)}, "reward": torch.full((n,), value),
            "terminated": torch.zeros(n, dtype=torch.bool)}


def test_rollout_fills_steps_in_order():
    storage = RolloutStorage(steps=4, device=torch.device("cpu"))
    for t in range(4):
        storage.add(transition(float(t)))
    assert storage.full
    assert storage.data["obs"]["policy"].shape == (4, 3, 2)
    assert storage.data["reward"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert storage.data["terminated"].dtype == torch.bool
    storage.clear()
    storage.add(transition(9.0))
    assert storage.data["reward"][0, 0] == 9.0 and not storage.full


def test_replay_wraps_and_samples_stored_rows():
    buffer = ReplayBuffer(capacity=5, device=torch.device("cpu"))
    for t in range(3):  # 9 rows into 5 slots: the oldest are overwritten
        buffer.add(transition(float(t)))
    assert buffer.size == 5
    assert sorted(buffer.data["reward"].tolist()) == [1.0, 1.0, 2.0, 2.0, 2.0]
    batch = buffer.sample(64, generator=torch.Generator().manual_seed(0))
    assert batch["obs"]["policy"].shape == (64, 2)
    assert set(batch["reward"].tolist()) <= {1.0, 2.0}
    assert torch.equal(batch["obs"]["policy"][:, 0], batch["reward"])
    distinct = ReplayBuffer(capacity=8, device=torch.device("cpu"))
    distinct.add(_rows([1.0, 2.0, 3.0, 4.0, 5.0]))  # 5 of 8 slots: the newest row is in slot 4
    drawn = distinct.sample(256, generator=torch.Generator().manual_seed(0))["reward"]
    assert set(drawn.tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}  # every filled row, newest too; no empty slot

    restored = ReplayBuffer(capacity=5, device=torch.device("cpu"))
    restored.load_state_dict(buffer.state_dict())
    assert restored.size == 5 and restored.position == buffer.position


def test_a_replay_state_holds_the_filled_rows_and_restores_the_same_buffer():
    import io

    buffer = ReplayBuffer(1000, torch.device("cpu"))
    buffer.add({"obs": {"policy": torch.randn(30, 3)}, "reward": torch.randn(30)})
    saved = io.BytesIO()
    torch.save(buffer.state_dict(), saved)
    assert buffer.state_dict()["data"]["reward"].shape == (30,)  # not the 1000 rows allocated
    restored = ReplayBuffer(1000, torch.device("cpu"))
    restored.load_state_dict(torch.load(io.BytesIO(saved.getvalue()), weights_only=True))
    assert restored.data["obs"]["policy"].shape == (1000, 3) and restored.size == 30 and restored.position == 30
    for a, b in ((restored.data["reward"], buffer.data["reward"]), (restored.data["obs"]["policy"], buffer.data["obs"]["policy"])):
        assert torch.equal(a, b)
    restored.add({"obs": {"policy": torch.ones(5, 3)}, "reward": torch.ones(5)})  # and goes on filling
    assert restored.size == 35 and torch.equal(restored.data["reward"][30:35], torch.ones(5))


def _rows(values: list[float]) -> dict:
    x = torch.tensor(values)
    return {"obs": {"policy": x[:, None].repeat(1, 2)}, "reward": x}


def test_a_wrapped_replay_restores_into_a_bigger_or_smaller_buffer_oldest_first():
    """A resumed run given more steps sizes its buffer anew: every row below size must be a real
    transition, and the next writes must overwrite the oldest, not the newest."""
    old = ReplayBuffer(capacity=8, device=torch.device("cpu"))
    old.add(_rows([float(v) for v in range(1, 13)]))  # 12 rows into 8 slots: 5..12 kept, position 4
    assert old.position == 4 and old.size == 8

    bigger = ReplayBuffer(capacity=16, device=torch.device("cpu"))
    bigger.load_state_dict(old.state_dict())
    assert bigger.size == 8 and bigger.position == 8
    assert bigger.data["reward"][:8].tolist() == [float(v) for v in range(5, 13)]
    bigger.add(_rows([100.0] * 4))
    assert bigger.size == 12 and sorted(bigger.data["reward"][:12].tolist()) == [*map(float, range(5, 13)), *[100.0] * 4]
    batch = bigger.sample(256, generator=torch.Generator().manual_seed(0))
    assert (batch["reward"] != 0).all() and torch.equal(batch["obs"]["policy"][:, 0], batch["reward"])

    smaller = ReplayBuffer(capacity=6, device=torch.device("cpu"))
    smaller.load_state_dict(old.state_dict())
    assert smaller.size == 6 and smaller.position == 0
    assert smaller.data["reward"].tolist() == [float(v) for v in range(7, 13)]  # the newest six
    smaller.add(_rows([100.0]))
    assert smaller.data["reward"][0] == 100.0  # overwrites the oldest (7)


def test_an_older_replay_file_holding_its_whole_allocation_restores_into_another_size():
    """Files saved before the filled rows alone were saved hold all ``capacity`` rows."""
    old = ReplayBuffer(capacity=8, device=torch.device("cpu"))
    old.add(_rows([1.0, 2.0, 3.0]))
    state = {"data": old.data, "position": old.position, "size": old.size}  # 8 rows, 3 filled
    for capacity, expected in ((16, [1.0, 2.0, 3.0]), (2, [2.0, 3.0])):
        restored = ReplayBuffer(capacity=capacity, device=torch.device("cpu"))
        restored.load_state_dict(state)
        assert restored.size == len(expected) and restored.data["reward"][: len(expected)].tolist() == expected
