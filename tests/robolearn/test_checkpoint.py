"""Checkpoints: atomic, code-free loading, and clear refusals."""

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from robolearn.checkpoint import (CheckpointError, check_compatible, load_checkpoint, remove_partial_writes,
                                  restore_agent, save_checkpoint)


def state(width=4):
    return {"actor": {"weight": torch.randn(width, 3)}, "lr": 1e-3}


def test_round_trip(tmp_path):
    path = tmp_path / "ckpt" / "latest.pt"
    s = state()
    save_checkpoint(path, config={"algo": "ppo"}, agent=s, progress={"iteration": 7})
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["agent"]["actor"]["weight"], s["actor"]["weight"])
    assert loaded["progress"]["iteration"] == 7
    assert [p.name for p in path.parent.iterdir()] == ["latest.pt"]  # no temp files left behind


def test_a_save_that_dies_midway_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """A Ctrl+C, a kill or a full disk during a save leaves the last good checkpoint loadable, and no temp file."""
    path = tmp_path / "latest.pt"
    save_checkpoint(path, config={}, agent=state(), progress={"iteration": 1})
    before = path.read_bytes()

    def dies_midway(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, config={}, agent=state(), progress={"iteration": 2})
    monkeypatch.undo()
    assert path.read_bytes() == before and load_checkpoint(path)["progress"]["iteration"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_missing_truncated_foreign_and_malicious(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nope.pt")

    good = tmp_path / "good.pt"
    save_checkpoint(good, config={}, agent=state(), progress={})
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: os.path.getsize(good) // 2])
    with pytest.raises(CheckpointError, match=r"not a readable robolearn checkpoint \(truncated or corrupt: "
                                              r"PytorchStreamReader failed reading zip archive[^.]*\); restore"):
        load_checkpoint(truncated)

    foreign = tmp_path / "foreign.pt"
    torch.save({"model": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a robolearn checkpoint"):
        load_checkpoint(foreign)

    class Exploit:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"format": "robolearn-checkpoint", "x": Exploit()}, f)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):  # a bare pickle: not torch's format at all
        load_checkpoint(evil)
    torch.save({"format": "robolearn-checkpoint", "x": Exploit()}, tmp_path / "evil_zip.pt")  # torch's own format
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(tmp_path / "evil_zip.pt")
    said = str(refused.value)  # what it carries, and never torch's advice to load it with weights_only=False
    assert "objects other than tensors and plain data, not loaded as they could run code" in said, said
    assert "weights_only" not in said and "system" in said
    assert not (tmp_path / "pwned").exists()


def test_a_checkpoint_with_its_marker_but_damaged_contents_is_named(tmp_path):
    """The marker alone had passed: resume, eval and list then failed in KeyError tracebacks."""
    damaged = tmp_path / "damaged.pt"
    torch.save({"format": "robolearn-checkpoint", "version": 1, "config": {}, "agent": [1]}, damaged)
    with pytest.raises(CheckpointError, match=r"damaged robolearn checkpoint \(its agent, progress: missing or no mapping"):
        load_checkpoint(damaged)
    torch.save({"format": "robolearn-checkpoint", "version": 1, "config": {}, "agent": {},
                "progress": {"env_steps": "lots"}}, damaged)  # resume and list had failed in TypeError tracebacks
    with pytest.raises(CheckpointError, match=r"damaged robolearn checkpoint \(progress.env_steps = 'lots', not a count"):
        load_checkpoint(damaged)
    no_rng = tmp_path / "no_rng.pt"
    save_checkpoint(no_rng, config={}, agent=state(), progress={"iteration": 3})
    agent = SimpleNamespace(state_dict=state, load_state_dict=lambda s: None)
    with pytest.raises(CheckpointError, match="no random number generator state to resume with"):
        restore_agent(agent, load_checkpoint(no_rng))


def test_partial_writes_a_kill_left_are_removed_and_nothing_else(tmp_path):
    import tempfile

    save_checkpoint(tmp_path / "latest.pt", config={}, agent=state(), progress={})
    leftovers = [Path(tempfile.mkstemp(prefix=f".{name}.", dir=tmp_path)[1]) for name in ("latest.pt", "replay.pt")]
    kept = [tmp_path / ".latest.pt.mine", tmp_path / "notes.txt"]
    for path in kept:
        path.write_text("x")
    assert sorted(remove_partial_writes(tmp_path)) == sorted(leftovers)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".latest.pt.mine", "latest.pt", "notes.txt"]


def test_mismatched_tensor_is_named():
    with pytest.raises(CheckpointError, match=r"'agent.actor.weight' has shape \(8, 3\), this model expects \(4, 3\)"):
        check_compatible(state(4), state(8))
    with pytest.raises(CheckpointError, match="lacks 'agent.actor'"):
        check_compatible(state(), {"lr": 1.0})


def test_cut_short_at_any_length_is_a_checkpoint_error(tmp_path):
    """torch.load raises RuntimeError, EOFError or OSError (EINVAL) depending on where the file ends."""
    good = tmp_path / "good.pt"
    save_checkpoint(good, config={}, agent={"w": torch.randn(64, 64)}, progress={})
    data = good.read_bytes()
    for size in (0, 100, 1000, 5000, len(data) // 2, len(data) - 10):
        cut = tmp_path / f"cut{size}.pt"
        cut.write_bytes(data[:size])
        with pytest.raises(CheckpointError, match=f"cut{size}.pt: not a readable robolearn checkpoint"):
            load_checkpoint(cut)


def test_a_file_torch_reads_as_a_legacy_pickle_is_a_checkpoint_error(tmp_path):
    """A file that is no zip goes to torch's legacy unpickler, whose stray opcodes had failed resume, eval and
    play as a bare KeyError (a latest.pt holding "junk"), IndexError or UnicodeDecodeError traceback."""
    for name, data in {"key": b"junk\n", "index": bytes.fromhex("73a9bef499bbf4dc7bd2a4f2c8af5bd99f267a0e"),
                       "unicode": bytes.fromhex("63ea739852104b655fd4c90aeec4a6a5428608")}.items():
        bad = tmp_path / f"{name}.pt"
        bad.write_bytes(data)
        with pytest.raises(CheckpointError, match=f"{name}.pt: not a readable robolearn checkpoint .truncated or corrupt: "):
            load_checkpoint(bad)


def test_a_flipped_bit_inside_a_weight_is_refused_not_loaded(tmp_path):
    """torch.load does not check the CRC-32 its zip records: the checkpoint had loaded with another number."""
    import struct
    import zipfile

    path = tmp_path / "latest.pt"
    save_checkpoint(path, config={}, agent={"w": torch.randn(64, 64)}, progress={})
    with zipfile.ZipFile(path) as archive:  # the weight's bytes inside the file
        record = max(archive.infolist(), key=lambda info: info.file_size)
    raw = bytearray(path.read_bytes())
    name, extra = struct.unpack("<HH", raw[record.header_offset + 26:record.header_offset + 30])
    raw[record.header_offset + 30 + name + extra + record.file_size // 2] ^= 0x01
    path.write_bytes(raw)
    with pytest.raises(CheckpointError, match=rf"latest.pt: damaged on disk or in a copy \(its record "
                                              rf"{record.filename} fails its CRC-32 check\); restore it from a copy"):
        load_checkpoint(path)


def test_what_would_not_load_back_is_refused_at_save_naming_its_key(tmp_path):
    import numpy as np

    agent = {"actor": {"weight": torch.ones(2)}, "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]},
             "extra": {"scale": np.float64(2.0)}}
    with pytest.raises(CheckpointError, match=r"cannot save checkpoint\['agent'\]\['extra'\]\['scale'\]: a numpy.float64 "
                                              r"would not load with torch.load\(weights_only=True\)"):
        save_checkpoint(tmp_path / "latest.pt", config={}, agent=agent, progress={})
    assert not (tmp_path / "latest.pt").exists()
    agent["extra"]["scale"] = float(agent["extra"]["scale"])
    save_checkpoint(tmp_path / "latest.pt", config={}, agent=agent, progress={"steps": 3})
    assert load_checkpoint(tmp_path / "latest.pt")["agent"]["extra"]["scale"] == 2.0


def test_a_full_disk_during_a_save_is_an_os_error_naming_the_checkpoint(tmp_path, monkeypatch):
    """torch.save said ENOSPC as 'RuntimeError: [enforce fail at inline_container.cc] unexpected pos', which the
    command line printed as a 50-line traceback, not its one line for a full disk."""
    import errno

    path = tmp_path / "latest.pt"
    save_checkpoint(path, config={}, agent=state(), progress={"iteration": 1})

    def full(obj, f):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 48704 vs 48596")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError) as said:
        save_checkpoint(path, config={}, agent=state(), progress={"iteration": 2})
    assert (said.value.errno, said.value.filename) == (errno.ENOSPC, str(path))
    monkeypatch.undo()
    assert load_checkpoint(path)["progress"]["iteration"] == 1 and [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_files_written_as_one_set_are_all_old_or_all_new(tmp_path):
    """An export's controller.pt, .onnx and .json: a full disk between them had left a new .pt beside an
    older .onnx."""
    import errno

    from robolearn.checkpoint import atomic_write_files

    first, second = tmp_path / "a.pt", tmp_path / "a.onnx"
    atomic_write_files({first: lambda f: f.write(b"old a"), second: lambda f: f.write(b"old b")})

    def full(f):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as said:
        atomic_write_files({first: lambda f: f.write(b"new a"), second: full})
    assert said.value.filename == str(second)
    assert (first.read_bytes(), second.read_bytes()) == (b"old a", b"old b")  # the new a.pt was not put in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "a.pt"]


def test_an_agent_reading_windows_resumes_only_on_the_envs_that_filled_its_replay():
    """Windows of one env's steps are read num_envs rows apart: on another number of envs a resume had read
    the saved steps as other envs' (and run windows into the new episodes)."""
    from robolearn.checkpoint import CheckpointError, mark_resume_seam
    from robolearn.storage import ReplayBuffer

    replay = ReplayBuffer(12, "cpu")
    for _ in range(3):
        replay.add({"truncated": torch.zeros(2, dtype=torch.bool)})

    class Windows:
        def sample(self, replay, batch_size, num_envs): ...

    with pytest.raises(CheckpointError, match="env.num_envs=4: this run's replay buffer holds the steps of 2 envs, "
                                              "which Windows reads as windows of one env's steps; resume with "
                                              "env.num_envs=2"):
        mark_resume_seam(replay, Windows(), 2, 4)
    mark_resume_seam(replay, object(), 2, 4)  # one-step transitions: any number of envs
    assert replay.data["truncated"].tolist() == [False] * 4 + [True] * 2 + [False] * 6


def test_a_replay_buffer_is_saved_with_its_checkpoint_as_one(tmp_path, monkeypatch):
    """replay.pt had been written (and renamed into place) before latest.pt: a disk that filled between the two
    left a replay buffer newer than its checkpoint, which the resume could only warn about."""
    import errno

    from robolearn.storage import ReplayBuffer

    path = tmp_path / "latest.pt"
    replay = ReplayBuffer(100, "cpu")
    replay.add({"x": torch.ones(4, 2)})
    save_checkpoint(path, config={}, agent=state(), progress={"env_steps": 4}, replay=replay)
    assert torch.load(path.with_name("replay.pt"), weights_only=True)["env_steps"] == 4
    replay.add({"x": torch.ones(4, 2)})
    saves, real_save = [], torch.save

    def full_at_the_checkpoint(obj, f):  # the replay buffer is written, then the disk fills
        saves.append(obj)
        if len(saves) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", full_at_the_checkpoint)
    with pytest.raises(OSError):
        save_checkpoint(path, config={}, agent=state(), progress={"env_steps": 8}, replay=replay)
    monkeypatch.undo()
    assert saves[0]["env_steps"] == 8  # the replay buffer was written first...
    assert torch.load(path.with_name("replay.pt"), weights_only=True)["env_steps"] == 4  # ...but not put in place
    assert load_checkpoint(path)["progress"]["env_steps"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt", "replay.pt"]


def test_a_checkpoint_that_may_not_be_read_is_said_so_not_called_corrupt(tmp_path, monkeypatch):
    # a checkpoint of mode 000 (another user's run, a copy made by root) had been "truncated or corrupt: [Errno 13]
    # Permission denied ...; restore it from a copy or train again": the file is whole, its permissions are the fix
    import errno

    import robolearn.checkpoint as checkpoint

    path = tmp_path / "latest.pt"
    path.write_bytes(b"whatever")

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(checkpoint.zipfile, "ZipFile", denied)
    monkeypatch.setattr(checkpoint.torch, "load", denied)
    with pytest.raises(PermissionError) as caught:  # the command line says it in one line: fix its permissions
        checkpoint.load_checkpoint(path)
    assert caught.value.filename == str(path)


def test_an_atomic_write_syncs_the_folder_its_rename_is_an_entry_of(tmp_path, monkeypatch):
    """The file was fsynced, not the folder: after a power cut the rename itself could be lost (the old file back)."""
    import stat

    from robolearn.checkpoint import atomic_write_bytes

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "a" / "eval.json", lambda f: f.write(b"{}"))
    assert synced == ["file", "folder"] and (tmp_path / "a" / "eval.json").read_bytes() == b"{}"
