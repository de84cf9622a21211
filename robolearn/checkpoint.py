"""Checkpoints that are written atomically and load without executing code.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts,
saved with ``torch.save`` to a temporary file that is then renamed over the
target (a crash mid-write never leaves a half-written checkpoint), and read back
with ``torch.load(weights_only=True)`` (a checkpoint file cannot run code).
"""

from __future__ import annotations

import collections
import os
import pickle
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from robolearn.learning_rates import apply_changed, configured

FORMAT = "robolearn-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why."""


class ShapeMismatch(CheckpointError):
    """A checkpoint of another model: a tensor of another shape (another task's observations, another size)."""


def usual_mode(base: int = 0o666) -> int:
    """``base`` less this process's umask: what ``open`` would give a new file (``0o777`` for a directory),
    which ``mkstemp`` (0600) and ``mkdtemp`` (0700) do not: files others on a shared machine should read."""
    umask = os.umask(0)
    os.umask(umask)
    return base & ~umask


def atomic_write_bytes(path: Path, write: Any) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, fsync, then rename over it. A storage error (a full
    disk, a read-only folder) is an OSError naming ``path``, whichever step met it: not the hidden temp file,
    nor torch.save's RuntimeError ("unexpected pos 48704 vs 48596") over a full disk's ENOSPC."""
    atomic_write_files({path: write})


def atomic_write_files(writes: dict[Path, Any]) -> None:
    """:func:`atomic_write_bytes` of several files as one: every temp file is written before any is renamed
    into place, so a failure (a full disk) leaves all of them as they were, none newer than the others."""
    temps: dict[Path, str] = {}
    path = next(iter(writes))
    try:
        for path, write in writes.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temps[path] = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(temps[path], usual_mode())  # mkstemp makes 0600; give the file the usual permissions
        for path, tmp in temps.items():
            os.replace(tmp, path)
        for folder in {path.parent for path in writes}:
            _fsync_folder(folder)
    except BaseException as err:
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
        storage = err if isinstance(err, OSError) else err.__context__ if isinstance(err, RuntimeError) else None
        if isinstance(storage, OSError) and storage.errno is not None:
            raise OSError(storage.errno, storage.strerror or os.strerror(storage.errno), str(path)) from err
        raise


def _fsync_folder(folder: Path) -> None:
    """Make the renames into ``folder`` durable: a rename is an entry of the folder, which a power cut may lose
    (the old file back) until the folder itself is synced. Where a folder cannot be opened or synced (Windows,
    some network filesystems) the write stays atomic, only not yet durable."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_partial_writes(folder: Path, names: tuple[str, ...] = ("latest.pt", "replay.pt")) -> list[Path]:
    """Delete what :func:`atomic_write_bytes` of ``names`` left in ``folder`` when killed mid-write (``kill -9``,
    a power cut): hidden temp files as large as a replay buffer that nothing else would remove. Call it only
    while holding the run (its :class:`~robolearn.run_lock.RunLock`), when no write of them can be under way."""
    leftovers = [path for name in names for path in Path(folder).glob(f".{name}.*")
                 if path.is_file() and len(path.name) == len(name) + 10]  # "." name "." and mkstemp's 8 characters
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def save_checkpoint(path: Path, *, config: dict[str, Any], agent: dict[str, Any], progress: dict[str, Any],
                    replay: Any = None) -> None:
    """Write a checkpoint: the resolved config, the agent's state, the runner's progress and RNG; with ``replay``
    (a :class:`~robolearn.storage.ReplayBuffer`), its state beside it as ``replay.pt``, stamped with the env
    steps it holds. The two are written as one (:func:`atomic_write_files`): a kill or a full disk during the
    long replay write leaves both as they were, never a replay newer than its checkpoint. ``saved_at``: where it was
    written, which tells a copied run from a moved one (:func:`robolearn.runs.copied_from`)."""
    payload = {"format": FORMAT, "version": VERSION, "config": config, "agent": agent, "progress": progress,
               "saved_at": str(Path(path).resolve())}
    check_loadable(payload, "checkpoint")
    writes = {}
    if replay is not None:
        state = {**replay.state_dict(), "env_steps": int(progress["env_steps"])}
        check_loadable(state, "replay buffer")
        writes[Path(path).with_name("replay.pt")] = lambda f: torch.save(state, f)
    writes[Path(path)] = lambda f: torch.save(payload, f)
    atomic_write_files(writes)


# what torch.load(weights_only=True) reads back: leaves of exactly these types (a numpy float is a float
# subclass, but pickles as numpy's and is refused), in dicts, lists, tuples and sets
_LEAVES = (int, float, complex, bool, str, bytes, bytearray, type(None), torch.Size, torch.dtype, torch.device,
           torch.layout)
_CONTAINERS = (dict, collections.OrderedDict, collections.Counter, list, tuple, set)


def check_loadable(value: Any, where: str) -> None:
    """Refuse to save what could not be loaded back without running code, naming the key and its type:
    said when an agent of one's own puts a numpy number in its state, not at the resume as a corrupt file."""
    if isinstance(value, torch.Tensor) or type(value) in _LEAVES:
        return
    if type(value) not in _CONTAINERS:
        raise CheckpointError(f"cannot save {where}: a {type(value).__module__}.{type(value).__qualname__} would not load "
                              "with torch.load(weights_only=True); store tensors, numbers, strings, lists and dicts "
                              "(float(x), int(x), x.tolist(), torch.as_tensor(x))")
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        check_loadable(item, f"{where}[{key!r}]")


# what torch.load raises on a truncated, corrupt or code-carrying file (a truncated zip: OSError EINVAL; a file
# that is no zip goes to torch's legacy unpickler, whose stray opcodes fail as KeyError, IndexError or ValueError)
UNREADABLE = (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, OSError, KeyError, IndexError,
              ValueError)


def load_tensors(path: Path, what: str, remedy: str, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``; a file that does not load raises a CheckpointError
    naming it, what it should have been and ``remedy`` (what the user can do about it)."""
    try:
        damaged = _damaged_record(path)
        if damaged:  # torch.load does not check them: a flipped byte inside a weight loads as another number
            raise CheckpointError(f"{path}: damaged on disk or in a copy (its record {damaged} fails its CRC-32 "
                                  f"check); {remedy}")
        return torch.load(path, map_location=map_location, weights_only=True)
    except (PermissionError, CheckpointError):  # a file this user may not read (its permissions are the fix); a bad CRC
        raise
    except UNREADABLE as err:
        raise CheckpointError(f"{path}: not a readable {what} ({_why_unreadable(err)}); {remedy}") from None


def _damaged_record(path: Path) -> str | None:
    """The first record of torch.save's zip file whose CRC-32 does not match its bytes, else None (also for a
    file that is no zip: torch.load says what is wrong with it)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError):
        return None


def _why_unreadable(err: BaseException) -> str:
    """Why torch.load refused a file, in a line: for one holding objects other than tensors and plain data, the
    object it names, never torch's advice to load it with ``weights_only=False`` (that would run its code)."""
    text = str(err)
    if text.startswith("Weights only load failed"):  # torch's advice first, then what it met
        met = next((line.strip().rstrip(".") for line in text.splitlines()[1:] if line.strip()
                    and not line.startswith(("Check the documentation", "Please file an issue"))), "")
        if "GLOBAL" in met:  # an object of some module: what a crafted file carries
            return f"it holds objects other than tensors and plain data, not loaded as they could run code: {met}"
        return f"truncated or corrupt: {met or 'not a pickle of tensors'}"
    if isinstance(err, (KeyError, IndexError, ValueError)):  # the unpickler's own stumble ("174812789"): no sentence
        return f"truncated or corrupt: {type(err).__name__} {' '.join(text.split())[:80]}".rstrip()
    return f"truncated or corrupt: {text.splitlines()[0].split('. ')[0] if text else type(err).__name__}"  # (miniz's goes on)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read and validate a checkpoint; never unpickles arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    payload = load_tensors(path, "robolearn checkpoint",
                           "restore it from a copy or train again")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a robolearn checkpoint (no '{FORMAT}' marker)")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {payload.get('version')} is not supported (expected {VERSION})")
    if wrong := [key for key in ("config", "agent", "progress") if not isinstance(payload.get(key), dict)]:
        raise CheckpointError(f"{path}: a damaged robolearn checkpoint (its {', '.join(wrong)}: missing or no "
                              "mapping); restore it from a copy or train again")
    counts = {key: value for key, value in payload["progress"].items() if key in PROGRESS_COUNTS}
    if wrong := [key for key, value in counts.items() if isinstance(value, bool) or not isinstance(value, int) or value < 0]:
        raise CheckpointError(f"{path}: a damaged robolearn checkpoint (progress.{wrong[0]} = {counts[wrong[0]]!r}, "
                              "not a count); restore it from a copy or train again")
    return payload


PROGRESS_COUNTS = ("env_steps", "updates", "pretrain_updates", "online_updates", "iteration")
"""What a checkpoint's progress counts (the runners' Progress classes): whole numbers, read by resume and list."""


def load_replay(path: Path, replay: Any, env_steps: int, device: Any, warn: bool = True,
                env: Any = None) -> None:
    """Restore ``replay`` from ``path`` for a resume at ``env_steps``: missing, unreadable or (given ``env``)
    holding transitions of other shapes (another task's file) is an error that says what to do; a stamp of
    another step (a run saved before the two were written as one, or a kill between their renames) is said
    (where ``warn``: once per run, not by every rank), then used."""
    remedy = ("restore it from a copy to resume, or resume with --fresh-replay (from Python: train(resume=..., "
              "fresh_replay=True)) to go on with an empty buffer the agent refills first (latest.pt still evaluates "
              "and exports without it)")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; a run that learns from a replay buffer resumes with it; {remedy}")
    state = load_tensors(path, "replay buffer", remedy, map_location=device)
    if env is not None and (other := _other_shapes(state.get("data"), env)):  # (a run's own file cannot)
        raise CheckpointError(f"{path}: holds transitions of another env ({other}), not this run's; {remedy}")
    try:
        replay.load_state_dict(state)
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as err:
        raise CheckpointError(f"{path}: not a robolearn replay buffer ({err!r}); {remedy}") from None
    saved_at = state.get("env_steps")
    if warn and saved_at is not None and int(saved_at) != env_steps:
        warnings.warn(f"{path} holds the replay buffer of env step {int(saved_at)} but the checkpoint is of step "
                      f"{env_steps} (the run stopped, or its disk filled, between writing the two): resuming with it, "
                      "so this resume is not exactly the run it would have been", stacklevel=2)


def _other_shapes(data: Any, env: Any) -> str | None:
    """Where a saved replay's observation groups or actions (the runners store the env's) are not shaped as
    ``env``'s (a file copied from another task's run had loaded, then failed the first write into it with torch's
    shape mismatch, or broadcast into it); None if they are."""
    action = data.get("action") if isinstance(data, dict) else None
    if isinstance(action, torch.Tensor) and tuple(action.shape[1:]) != tuple(env.action_spec.shape):
        return f"actions of shape {tuple(action.shape[1:])}, this env's {tuple(env.action_spec.shape)}"
    for key in ("obs", "next_obs"):
        groups = data.get(key) if isinstance(data, dict) else None
        for group, box in (env.observation_spec.items() if isinstance(groups, dict) else ()):
            saved = groups.get(group)
            if saved is not None and tuple(saved.shape[1:]) != tuple(box.shape):
                return f"{key} '{group}' of shape {tuple(saved.shape[1:])}, this env's {tuple(box.shape)}"
    return None


def refill_instead(progress: Any, steps: int, path: Path, warn: bool = True) -> None:
    """``--fresh-replay``: the resume goes on with an empty replay buffer instead of ``path`` (lost, damaged, or
    left behind in a copy of the run): the next ``steps`` env steps refill it with the agent's own exploring
    actions and no update is made (nor owed) until they are done (``progress.refill_until``, checkpointed)."""
    progress.refill_until = progress.env_steps + steps
    if warn:
        warnings.warn(f"resuming without {path}: the replay buffer starts empty and the agent's own actions refill it "
                      f"for {steps:,} env steps before updates go on, so this run is not the one it would have been",
                      stacklevel=2)


def saved_num_envs(payload: dict[str, Any], default: int) -> int:
    """The envs (of one rank) that stepped the run a checkpoint saved: each step added that many rows to its
    replay buffer (``default`` where its config does not say)."""
    value = payload.get("config", {}).get("env", {}).get("num_envs")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def mark_resume_seam(replay: Any, agent: Any, saved_envs: int, num_envs: int) -> None:
    """A resume starts every env on a fresh episode: the replay's last saved step ends its episodes there
    (:meth:`~robolearn.storage.ReplayBuffer.end_episodes_at_newest`), so that no window of steps runs on
    across the seam. An agent that cuts windows of one env's steps (``sample(replay, batch, num_envs)``:
    skills, subgoals, action sequences) reads them ``num_envs`` rows apart, so it may not resume on another
    number of envs: its saved steps would be read as other envs' and other steps."""
    if callable(getattr(agent, "sample", None)) and saved_envs != num_envs:
        raise CheckpointError(f"env.num_envs={num_envs}: this run's replay buffer holds the steps of {saved_envs} "
                              f"envs, which {type(agent).__name__} reads as windows of one env's steps; resume with "
                              f"env.num_envs={saved_envs}")
    replay.end_episodes_at_newest(saved_envs)


def check_compatible(expected: dict[str, Any], found: dict[str, Any], where: str = "agent") -> None:
    """Raise naming the first tensor whose presence or shape differs between two state dicts."""
    for key, value in expected.items():
        name = f"{where}.{key}"
        if key not in found:
            raise CheckpointError(f"checkpoint lacks '{name}': it was saved by a different algorithm or model")
        other = found[key]
        if isinstance(value, dict):
            if not isinstance(other, dict):
                raise CheckpointError(f"checkpoint entry '{name}' has the wrong type")
            check_compatible(value, other, name)
        elif isinstance(value, torch.Tensor):
            if value.dim() == 0 and isinstance(other, (int, float)) and not isinstance(other, bool):
                continue  # a number saved before it lived on the device (PPO's learning rate until session 54)
            if not isinstance(other, torch.Tensor) or other.shape != value.shape:
                shape = tuple(other.shape) if isinstance(other, torch.Tensor) else type(other).__name__
                raise ShapeMismatch(
                    f"checkpoint tensor '{name}' has shape {shape}, this model expects {tuple(value.shape)}: "
                    "the checkpoint was trained on another task or network size"
                )


def rng_state() -> dict[str, Any]:
    """The RNG states a resumed run needs to continue exactly (torch CPU and CUDA)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def settings_said(keys: list[str], saved: dict[str, Any], now: dict[str, Any]) -> str:
    """Agent settings ``keys`` as ``agent.key old -> new``, from ``saved`` (a checkpoint's) to ``now``."""
    return ", ".join(f"agent.{key} {saved.get(key)!r} -> {now.get(key)!r}" for key in keys)


def _changed_agent_settings(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """The agent settings that differ between a checkpoint's config and the resuming run's, said
    (:func:`settings_said`; '' for none)."""
    return settings_said([key for key in sorted(set(saved) | set(now)) if saved.get(key) != now.get(key)], saved, now)


def changed_activations(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The agent settings naming an activation (``activation``, ``*_activation``) whose value differs between
    ``saved`` (a checkpoint's) and ``now``: an activation is no weight, so another one loads without a complaint and
    runs the weights through the wrong function (an elu-trained net under relu)."""
    return [key for key in sorted(set(saved) & set(now)) if (key == "activation" or key.endswith("_activation"))
            and saved[key] != now[key]]


def changed_starting_values(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The agent settings that set a learnt value's start (``init_*``, ``*_init``: SAC's ``init_alpha``, PPO's
    ``init_std``, IQL's ``log_std_init``) whose value differs between ``saved`` (a checkpoint's) and ``now``: an
    agent is built from them, and a resume then loads the value its checkpoint trained to over it. Our agents'
    alone: one's own may read an ``init_*`` as it trains (its ``resume_fixed`` lists what a resume may not change)."""
    return [key for key in sorted(set(saved) & set(now)) if (key.startswith("init_") or key.endswith("_init"))
            and saved[key] != now[key]]


def load_agent_state(agent: Any, state: dict[str, Any], saved: dict[str, Any], now: dict[str, Any], remedy: str) -> None:
    """``agent.load_state_dict(state)``, where torch's strict load fails (a module the checkpoint fills and this
    model has not: an Identity for agent.normalize_obs=false) a CheckpointError naming the agent settings that
    differ between ``saved`` (the checkpoint's) and ``now``, then ``remedy``; it had been a traceback."""
    try:
        agent.load_state_dict(state)
    except RuntimeError as err:
        said = _changed_agent_settings(saved, now)
        if not said:
            raise
        first = str(err).splitlines()[0].rstrip(":")
        raise CheckpointError(f"the checkpoint does not load into this model ({first}: "
                              f"{' '.join(str(err).splitlines()[1:]).strip()}); agent settings changed since the "
                              f"checkpoint: {said} ({remedy})") from None


def _ours(algo: Any) -> bool:
    """Whether ``algo`` is one of our algorithms (``policies.AGENTS``), whose ``init_*``/``*_init`` settings are
    all a learnt value's start (:func:`changed_starting_values`)."""
    from policies import AGENTS

    return algo in AGENTS


def changed_fixed(agent: Any, saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The agent settings that differ between ``saved`` (a checkpoint's) and ``now`` and that change the controller
    a resume goes on with: ``agent.resume_fixed``'s and any activation (``agent``: the agent, or its class)."""
    fixed = [key for key in getattr(agent, "resume_fixed", ())
             if key in saved and key in now and saved[key] != now[key]]
    return fixed + changed_activations(saved, now)  # (no weight: an elu-trained net would load under relu)


def unchangeable_on_resume(agent: Any, algo: Any, saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Every agent setting differing between ``saved`` and ``now`` that a resume of ``algo`` refuses:
    :func:`changed_fixed`'s, and our algorithms' starting values (:func:`refuse_changed_starts`)."""
    return changed_fixed(agent, saved, now) + (changed_starting_values(saved, now) if _ours(algo) else [])


def refuse_fixed_changes(agent: Any, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse agent settings that differ between ``saved`` (a checkpoint's) and ``now`` and that a resume may not
    change: ``agent.resume_fixed``'s and any activation. ``agent``: the agent, or its class (``train --nproc``
    refuses them so before its ranks start, as each rank's :func:`restore_agent` would)."""
    agent_cls = agent if isinstance(agent, type) else type(agent)
    if fixed := changed_fixed(agent, saved, now):  # another controller: a skill pretrained for 10 steps held for 5
        raise CheckpointError(f"{settings_said(fixed, saved, now)}: {agent_cls.__name__} learnt its controller with "
                              "the saved value, and a resume goes on with what it learnt; resume without that "
                              "override, or train a new run with it")


def refuse_changed_starts(algo: Any, agent: Any, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse a changed starting value (:func:`changed_starting_values`) of one of our algorithms ``algo``: it had
    been listed among the changed settings, to no effect (one's own algorithm may name anything init_*).
    ``agent``: the agent, or its class (``train --nproc`` refuses it before its ranks start)."""
    if _ours(algo) and (moot := changed_starting_values(saved, now)):
        agent_cls = agent if isinstance(agent, type) else type(agent)
        raise CheckpointError(f"{settings_said(moot, saved, now)}: a starting value, which only a new "
                              f"{agent_cls.__name__} starts from; a resume goes on from its checkpoint's, as trained "
                              "since, so it would change nothing: resume without that override, or train a new run "
                              "with it")


def restore_agent(agent: Any, payload: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a checkpoint ``payload``'s agent state (a changed ``resume_fixed`` setting or activation refused by name
    first, :func:`refuse_fixed_changes`; then checked against ``agent``'s own shapes) and random streams; return
    its progress counters, for the runner to rebuild its own progress from.
    ``config``: the resuming run's (plain data), so that a shape mismatch names the setting that changed."""
    saved_cfg, now_cfg = payload.get("config") or {}, config or {}
    saved, now = saved_cfg.get("agent") or {}, now_cfg.get("agent") or {}
    if saved_cfg.get("algo") and now_cfg.get("algo") and saved_cfg["algo"] != now_cfg["algo"]:  # (said first: its
        raise CheckpointError(f"the checkpoint was saved by algo '{saved_cfg['algo']}', this run is "  # keys all differ)
                              f"'{now_cfg['algo']}' (a checkpoint copied from another run?): resume the run it came "
                              "from, or put this run's own checkpoint back")
    # A setting a resume may not change is refused by name before the shapes are checked: one that also sizes a
    # network (sac_as's sequence_length, the critic's input) had been said as a shape mismatch, SRL's (no weight
    # depends on J) as this refusal.
    refuse_fixed_changes(agent, saved, now)
    try:
        check_compatible(agent.state_dict(), payload["agent"])
    except CheckpointError as err:
        saved_task, now_task = (saved_cfg.get("env") or {}).get("task"), (now_cfg.get("env") or {}).get("task")
        if saved_task and now_task and saved_task != now_task:  # another task's observations: no agent key to blame
            raise CheckpointError(f"{err}; the checkpoint was trained on task '{saved_task}', this run is on "
                                  f"'{now_task}': resume with the run's own config") from None
        if not (said := _changed_agent_settings(saved, now)):
            raise
        raise CheckpointError(f"{err}; agent settings changed since the checkpoint: {said} (one of them changed "
                              "the network: resume without that override)") from None
    refuse_changed_starts(now_cfg.get("algo"), agent, saved, now)
    fresh_rates = configured(agent)
    load_agent_state(agent, payload["agent"], saved, now, "one of them changed the network: resume without that "
                     "override")
    untagged = apply_changed(agent, fresh_rates)  # an optimizer's load put back its saved rates: changed ones apply
    rates = [key for key in sorted(set(saved) | set(now)) if key.endswith(("lr", "learning_rate"))
             and saved.get(key) != now.get(key)]
    if untagged and rates:
        warnings.warn(f"{', '.join(f'agent.{key}' for key in rates)}: the checkpoint predates the record of each "
                      "optimizer's configured rate, so it resumes at the rates it saved; resume it once more with "
                      "the new rates to apply them", stacklevel=3)
    progress = dict(payload["progress"])
    if not isinstance(rng := progress.pop("rng", None), dict):
        raise CheckpointError("a damaged robolearn checkpoint: its progress has no random number generator state "
                              "to resume with; restore it from a copy (it still evaluates and exports)")
    set_rng_state(rng)
    return progress
