"""A training run from config to deployable controller.

The runner owns the loop, storage, logging and checkpoints; the agent owns the
math. On-policy agents get whole rollouts; off-policy agents get minibatches
sampled from a replay buffer. What a run leaves, and how it is read back, is
``robolearn/runs.py``.

Under torchrun (``robolearn/distributed.py``) every rank runs this loop on its
own ``env.num_envs`` worlds (the count is per rank) seeded ``seed + rank``;
``runner.total_steps`` and the logged ``env_steps`` and ``fps`` count the steps
of all ranks, the logged metrics are averages over ranks, and only rank 0 writes
the run directory. A resume has every rank load the same checkpoint (and, off
policy, rank 0's replay buffer: the only one saved) and draw fresh random streams.

Agents with ``pretrains = True`` (the skill agents, ``policies/skills``) learn from a
dataset first, in the same run: ``robolearn train configs/spirl_<task>.yaml dataset=<name>``.
The runner hands them the dataset (``agent.prepare(Dataset.transitions)``), runs
``agent.pretrain_updates`` of ``agent.pretrain_update()`` before the first env step (logged
at env step 0 with ``phase: pretrain``, metrics ``pretrain/<name>``), then calls
``agent.end_pretraining()``, exports that controller to ``pretrained/`` and trains online
as any off-policy agent. ``--resume`` continues in either phase.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robolearn.checkpoint import (CheckpointError, atomic_write_bytes, load_checkpoint, load_replay, refill_instead,
                                  mark_resume_seam, remove_partial_writes, restore_agent, rng_state, save_checkpoint,
                                  saved_num_envs, set_rng_state)
from robolearn import distributed, strict_json
from robolearn.config import (ConfigError, EnvConfig, TrainConfig, check_starts, flat_keys, load_run_config, to_dict,
                              torch_settings_kept, validated)
from robolearn.curves import plot_runs
from robolearn.evaluate import FiniteWatch, NonFiniteError, check_finite, evaluate, record_video
from robolearn.export import export_controller
from robolearn.host_reads import read_scalars
from robolearn.interfaces import UNSTABLE_LOG, Agent, ContractError, Controller, Obs, SimulationFailed, VecEnv
from robolearn.logger import RunLogger, keep_seconds, set_aside_after, set_aside_wandb
from robolearn.preflight import (check_agent_contract, check_data_parallel, check_decision_period, check_fresh_replay,
                                 check_minibatches, check_replay_windows, warn_if_goal_unread)
from robolearn.runs import (FAILURE_FILE, check_same_folder, checkpoint_missing, copied_from, export_meta,
                            keep_replaced_config, new_run_dir, new_run_id, record_failure, refuse_finished,
                            refuse_other_pretraining, refuse_task_change, refuse_wandb_move, saved_progress,
                            set_aside_evaluation, trained_counts, warn_of_pretraining_changes, write_config)
from robolearn.runtime import STOP_SIGNALS, hung_up, mute_dead_pipes, stops_as_ctrl_c
from robolearn.shell import shell
from robolearn.state_copy import StateCopy, fresh
from robolearn.run_lock import RunLock
from robolearn.registry import (at_trained_width, evaluation_dynamics, make_agent, make_env, resolve_backend,
                                stagger_episodes)
from robolearn.storage import ReplayBuffer, RolloutStorage

OFF_POLICY_STEPS_PER_ITERATION = 1000  # env steps per logged iteration for off-policy agents


@dataclass
class Progress:
    """Where a run is; saved in every checkpoint so a resume continues exactly."""

    iteration: int = 0
    env_steps: int = 0
    update_debt: float = 0.0  # off-policy: fractional updates owed under the UTD ratio
    recent_returns: list[float] = field(default_factory=list)
    recent_success: list[float] = field(default_factory=list)  # of the same episodes, where the task says
    pretrain_updates: int = 0  # agents that pretrain on a dataset: updates done
    pretrained: bool = False  # ... and whether that phase has ended
    world_size: int = 0  # ranks that trained it, `train --resume` starts as many (cli._trained_ranks); 0: not recorded
    env_adaptation: dict[str, Any] = field(default_factory=dict)  # automatic randomization's width (rank 0's)
    seconds: float = 0.0  # training time so far, metrics' ``time`` (0: a checkpoint from before it was kept)
    refill_until: int = 0  # --fresh-replay: no updates before this env step, while the empty replay refills
    update_sums: dict[str, Any] = field(default_factory=dict)  # of an iteration a Ctrl+C cut short: iteration_sums
    run_id: str = field(default_factory=new_run_id)  # kept by resumes and in its export (runs.new_run_id)


@dataclass
class RunResult:
    """What :func:`train` returns: the run directory, whether Ctrl+C stopped it, how far it trained, the
    final evaluation (``eval.json``), the video, the learning curves and the exported files by format."""

    run_dir: Path
    interrupted: bool = False
    # The counts it trained to (env_steps, updates, pretrain_updates; controller.json's ``trained``): short of
    # runner.total_steps where train()'s stop, runner.max_minutes or a Ctrl+C ended it
    trained: dict[str, int] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    video: Path | None = None
    curves: Path | None = None
    exported: dict[str, Path] = field(default_factory=dict)


def _summed(values: list[Any]) -> Any:
    """Logged values (numbers, or one-number tensors) summed: tensors on one device in one stack."""
    if all(isinstance(value, torch.Tensor) for value in values) and len({value.device for value in values}) == 1:
        return torch.stack([value.reshape(()) for value in values]).sum(0)
    return sum(values)


def unstable_note(worlds: float, steps: int) -> str:
    """Said once a run, the first time the physics of some worlds blew up (:meth:`sims.task.TaskEnv.step`);
    ``worlds`` is summed over the steps, so a world that blows up again counts again."""
    return (f"the physics blew up {worlds:.0f} time(s) over the last {steps} steps (logged as {UNSTABLE_LOG}, "
            "worlds per step): those episodes ended there (terminated, reward 0) and their worlds were reset. Now "
            "and then it is harmless; often, it points to a timestep too long for the model's stiffness, actuator "
            "gains or actions too strong, or randomization ranges too wide. Said once a run")


class EpisodeStats:
    """Returns and lengths of the episodes that end, for the logs. Summed on the env's device and read
    once per iteration (:meth:`flush`): reading them every step would be a host sync per step on a GPU."""

    def __init__(self, num_envs: int, recent: list[float], device: str | torch.device = "cpu",
                 recent_success: Sequence[float] = ()) -> None:
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.long, device=device)
        self._recent = collections.deque(recent, maxlen=100)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=100)
        self.success: collections.deque[float] = collections.deque(recent_success, maxlen=100)
        self._logs: list[dict[str, Any]] = []  # each step's info["log"], summed and read once per iteration
        self.env_log_steps = 0
        self._steps: list[tuple[torch.Tensor, ...]] = []  # per step, until flushed: done, returns, lengths, success
        self.said_unstable = False

    def add(self, reward: torch.Tensor, done: torch.Tensor, info: dict[str, Any]) -> None:
        if reward.shape != self.returns.shape:  # (an add would broadcast a (num_envs, 1) reward to a square)
            raise ContractError(f"the env's reward has shape {tuple(reward.shape)}; a VecEnv returns one number per "
                                f"env, shape ({len(self.returns)},)")
        # New tensors each step, kept for flush() as they are and never written again: no copies to keep
        # (5 ops a step, not 8; each a kernel on a GPU)
        returns, lengths = self.returns + reward, self.lengths + 1
        if "log" in info:
            self._logs.append(dict(info["log"]))  # (a copy of the dict: an env may reuse its own)
        self.env_log_steps += 1
        success = info["success"].float() if "success" in info else None
        self._steps.append((done.clone(), returns, lengths, success))  # (done: the caller's, which it may reuse)
        self.returns, self.lengths = returns.masked_fill(done, 0.0), lengths.masked_fill(done, 0)

    def flush(self) -> None:
        """Move the episodes that ended since the last flush into the recent windows, in the order they ended."""
        if not self._steps:
            return
        columns = [torch.stack(column).double().flatten() for column in list(zip(*self._steps))[:3]]
        with_success = [(d, s) for d, _, _, s in self._steps if s is not None]
        if with_success:  # the steps whose env said which episodes succeeded: their done and success columns
            columns += [torch.stack(column).double().flatten() for column in zip(*with_success)]
        # one transfer (a wait on a GPU) for all the columns, not one each
        done, returns, lengths, *success = torch.cat(columns).cpu().split([len(column) for column in columns])
        done = done.bool()  # (steps x envs, flattened in step order: episodes in the order they ended)
        self._recent.extend(returns[done].tolist())
        self.recent_lengths.extend(lengths[done].long().tolist())
        if success:
            done_s, succeeded = success
            self.success.extend(succeeded[done_s.bool()].tolist())
        self._steps.clear()

    def _log_sums(self) -> dict[str, Any]:
        """Each logged env value summed over the steps since the last :meth:`metrics`: a tensor's steps in one
        stack (two kernels an iteration on a GPU, where an add per step would be one kernel per step each)."""
        steps: dict[str, list[Any]] = {}
        for log in self._logs:
            for key, value in log.items():
                steps.setdefault(key, []).append(value)
        return {key: _summed(values) for key, values in steps.items()}

    @property
    def recent(self) -> collections.deque[float]:
        """The returns of the last 100 episodes that ended."""
        self.flush()
        return self._recent

    def keep(self, progress: Any) -> None:
        """The recent returns and successes into ``progress``, for the checkpoint: a resume logs them on."""
        progress.recent_returns, progress.recent_success = list(self.recent), list(self.success)

    def metrics(self) -> dict[str, float]:
        """This iteration's env scalars (then cleared) and the recent episodes' statistics."""
        self.flush()
        totals = read_scalars(self._log_sums())
        out = {key: total / max(self.env_log_steps, 1) for key, total in totals.items()}
        if totals.get(UNSTABLE_LOG, 0) > 0 and not self.said_unstable:
            self.said_unstable = True
            warnings.warn(unstable_note(totals[UNSTABLE_LOG], self.env_log_steps), stacklevel=2)
        self._logs.clear()
        self.env_log_steps = 0
        if self.recent:
            out["return"] = float(np.mean(self.recent))
        if self.recent_lengths:  # none yet after a resume, which restores the returns and successes only
            out["episode_length"] = float(np.mean(self.recent_lengths))
        if self.success:
            out["success_rate"] = float(np.mean(self.success))
        return out


def ask_stop(runner: Any, stop: Callable[[dict[str, float]], bool], metrics: dict[str, Any]) -> bool:
    """``train()``'s ``stop`` asked with an iteration's metrics (its counters first: ``env_steps`` or
    ``updates``). If it raises (a ``KeyError`` on ``return`` before any episode ended), ``runner`` is
    checkpointed first and the error says so, so that the run goes on with ``train(resume=...)``."""
    try:
        return bool(stop(metrics))
    except Exception as err:
        runner.save()
        err.add_note(f"raised by train()'s stop callback (metrics: {', '.join(sorted(metrics))}); the run was "
                     f"checkpointed and goes on with train(resume={str(runner.run_dir)!r})")
        raise


def write_config_or_undo(runner: Any, resume: Path | None, trains_on: bool = False) -> None:
    """Write ``runner.cfg`` into ``runner.run_dir``; if that fails (a full disk), remove the directory when
    it was just made for this run (never a resumed one), close the runner's envs, and raise. A resume with
    changed settings keeps the config it replaces (:func:`keep_replaced_config`), and one that ``trains_on`` past
    an earlier end sets that end's evaluation aside only then (:func:`set_aside_evaluation`): set aside first, a
    resume killed before its config left a finished run listed as never evaluated, its new settings unrecorded."""
    try:
        if resume:
            keep_replaced_config(runner.run_dir, runner.cfg)
        write_config(runner.run_dir, runner.cfg)
        if resume and trains_on:
            set_aside_evaluation(runner.run_dir)
        runner.folder = os.stat(runner.run_dir)  # each save checks it is still there (check_same_folder)
    except BaseException:
        if not resume:
            shutil.rmtree(runner.run_dir, ignore_errors=True)
        runner.close()
        raise


def gives_torch_settings_back(train: Callable[..., RunResult]) -> Callable[..., RunResult]:
    """A runner's ``train``, which computes under the run's torch settings (applied when the runner was built, or
    again for a second ``train``) and gives the caller's back however it ends (:func:`give_torch_settings_back`)."""
    @functools.wraps(train)
    def training(runner: Any, *args: Any, **kwargs: Any) -> RunResult:
        if runner.callers_torch_settings is None:  # given back by a train() before
            runner.callers_torch_settings = runner.cfg.runner.apply_torch_settings()
        try:
            return train(runner, *args, **kwargs)
        finally:
            give_torch_settings_back(runner)
    return training


def give_torch_settings_back(runner: Any) -> None:
    """Put back the torch settings (threads, matmul precision, denormal flushing) that were the caller's before
    ``runner`` applied the run's, once: a later ``close()`` leaves what the caller has set since alone."""
    before, runner.callers_torch_settings = getattr(runner, "callers_torch_settings", None), None
    if before is not None:
        before.restore()


class Runner:
    """Trains ``cfg.algo`` on ``cfg.env`` and leaves a self-contained run directory.

    It computes under the run's torch settings (``runner.torch_threads``, ``runner.matmul_precision``,
    ``runner.flush_denormal``) from its construction on, and gives the caller's back when :meth:`train` returns
    (or raises), or at :meth:`close` if it never trains: a script that builds one itself (README's RecordingEnv
    recipe) goes on at its own settings, as after :func:`train` (which also gives back torch's and numpy's global
    random streams, that a Runner seeds with the run's seed and leaves so)."""

    def __init__(self, cfg: TrainConfig, resume: Path | None = None, fresh_replay: bool = False) -> None:
        """Build env and agent (and restore ``resume``'s checkpoint) first, and only then write the run
        directory: a config that fails to build leaves no run behind, nor rewrites the resumed one's config.
        ``fresh_replay``: resume with an empty replay buffer (:func:`robolearn.checkpoint.refill_instead`)."""
        self.cfg = cfg = validated(cfg)
        if not resume:  # (a resume goes on from its checkpoint's values)
            check_starts(cfg)
        self.fresh_replay = fresh_replay
        resolve_backend(cfg.env)  # before the process group: a warp run without a GPU is a CPU run
        distributed.init(cfg.env.device)
        check_ranks_agree(cfg)
        self.world_size, self.main = distributed.world_size(), distributed.is_main()
        self.seed = cfg.seed + distributed.rank()
        if resume:
            self.run_dir = Path(resume)
        self.ctrl_c = CtrlC(deferred=self.world_size > 1)
        self._rewind_to: Snapshot | None = None  # an iteration's start, where a Ctrl+C in it goes back to
        self._agent_copy = StateCopy()  # the buffers _rewind_to's agent state lives in, reused every iteration
        self._keep_at_safe_point = False  # ... unless it stopped between updates (pretraining keeps those)
        self.run_logger: RunLogger | None = None  # rank 0's, while training
        self.callers_torch_settings = cfg.runner.apply_torch_settings()  # given back by train() or close()
        torch.manual_seed(self.seed)
        np.random.seed(self.seed)
        try:
            self.env = make_env(_rank_env_config(cfg.env), seed=self.seed)
            self._finite = FiniteWatch(self.env.device)  # on a GPU, read once per iteration
            check_decision_period(cfg, self.env)  # (before the agent's networks, which may grow with it)
            self.agent = make_agent(cfg, self.env)
            check_agent_contract(cfg, self.agent)
            check_decision_period(cfg, self.env, self.agent)
            if self.main:
                warn_if_goal_unread(cfg, self.agent, self.env)
            check_minibatches(cfg, self.agent.on_policy, self.env.num_envs)
            check_data_parallel(cfg, self.world_size, f"{self.world_size} ranks")
            stagger_episodes(self.env, cfg.env, self.seed)  # said now if it cannot be; train() draws again
            self.progress = Progress(world_size=self.world_size)
            self.replay: ReplayBuffer | None = None
            if not self.agent.on_policy:
                self.replay = ReplayBuffer(cfg.agent.buffer_size, self.env.device)
                if hasattr(self.agent, "sample"):  # windows of one env's consecutive steps: said now, not after
                    check_replay_windows(cfg, self.agent, self.env.num_envs, self.world_size)  # warm-up
            if resume:
                self._refuse_other_skills(resume)
            saved = saved_progress(Path(resume)) if resume and getattr(self.agent, "pretrains", False) else {}
            past_pretraining = saved.get("pretrained") is True  # its checkpoint holds the skills: no dataset read
            if saved and not getattr(cfg.agent, "skills_from", ""):  # (on every rank: none starts training alone)
                refuse_other_pretraining(Path(resume), getattr(cfg.agent, "pretrain_updates", 0),
                                         saved.get("pretrain_updates", 0), past_pretraining)
            if past_pretraining and self.main:
                warn_of_pretraining_changes(Path(resume), cfg)
            self.dataset = None if past_pretraining else self._pretraining_dataset()
            trains_on = False
            if resume:
                self._restore()
                trains_on = refuse_finished(self.run_dir, "env_steps", self.progress.env_steps, cfg.runner.total_steps,
                                            cfg.runner.eval_episodes)
            elif getattr(cfg.agent, "skills_from", "") and getattr(self.agent, "pretrains", False):
                self._take_skills(Path(cfg.agent.skills_from))
            if self.replay is not None and self.main:
                self._warn_if_untrained()
        except BaseException:
            self.close()
            raise
        if distributed.active():  # every rank starts from rank 0's networks, optimizer and normalizers
            self.agent.load_state_dict(distributed.broadcast_object(self.agent.state_dict()))
        if not resume:  # rank 0 makes it; the others learn its name
            self.run_dir = Path(distributed.broadcast_object(str(new_run_dir(cfg)) if self.main else None))
        if self.main:
            write_config_or_undo(self, resume, trains_on)

    def _refuse_other_skills(self, resume: Path) -> None:
        """A resume goes on with the skills its checkpoint holds: an ``agent.skills_from`` override naming other
        skills than the run was trained with is refused."""
        if getattr(self.cfg.agent, "skills_from", None) is None:
            return
        theirs = getattr(load_run_config(resume).agent, "skills_from", "")
        if theirs != self.cfg.agent.skills_from:
            raise ConfigError(f"agent.skills_from: {resume} was trained with "
                              f"{theirs or 'its own pretraining'}; a resume goes on with those skills: resume "
                              "without that override")

    def _warn_if_untrained(self) -> None:
        """Off policy: say the settings that leave the exported controller untrained (all random steps, or no
        updates), which a run would otherwise train through without a word."""
        runner = self.cfg.runner
        skills = getattr(self.agent, "pretrains", False)  # (their random_act plays their prior: not untrained)
        if not skills and runner.random_steps >= self.planned_steps():
            done = self.progress.env_steps  # a resume's agent had trained (or not) by its own settings: it is kept
            exported = (f"the controller it exports is the one its checkpoint holds ({done:,} env steps)" if done
                        else "the controller it exports is untrained")
            warnings.warn(f"runner.random_steps={runner.random_steps:,} covers the whole run "
                          f"({self.planned_steps():,} env steps): every action {'from here ' if done else ''}is "
                          f"random and the agent updates at most on the last step, so {exported}; lower "
                          "runner.random_steps or raise runner.total_steps", stacklevel=3)
        if runner.utd_ratio == 0:  # (it had been said nowhere)
            warnings.warn("runner.utd_ratio=0: the agent makes no update (it only collects), so the controller "
                          "it exports is untrained; give it updates per env step (1.0 is SAC's)", stacklevel=3)

    def _take_skills(self, source: Path) -> None:
        """``agent.skills_from``: the skill model of ``source``, a run past its pretraining phase, instead of
        pretraining here (the skills stay frozen online, so its latest checkpoint holds them as pretrained).
        Its horizon must be this run's; another task's skills are used with a word, as another task's data is."""
        said = f"agent.skills_from={source}"
        try:
            payload = load_checkpoint(source / "checkpoints" / "latest.pt")
        except CheckpointError as err:
            raise CheckpointError(f"{said}: {err}") from None
        if "skills" not in payload["agent"]:  # (spirl's and skill_critic's skill models are one model)
            raise ConfigError(f"{said}: that run trained '{payload['config'].get('algo')}', which learns no skill "
                              "model; give a spirl or skill_critic run")
        if not payload["progress"].get("pretrained"):
            raise ConfigError(f"{said}: that run has not finished pretraining its skills "
                              f"({payload['progress'].get('pretrain_updates', 0):,} updates so far); resume it past "
                              "its pretraining first, or pretrain here on a dataset (drop agent.skills_from)")
        theirs = (payload["config"].get("agent") or {}).get("horizon")
        if theirs != self.cfg.agent.horizon:
            raise ConfigError(f"{said}: its skills are {theirs} steps long, this run's agent.horizon is "
                              f"{self.cfg.agent.horizon}: set agent.horizon={theirs}")
        theirs, ours = (payload["config"].get("agent") or {}).get("activation"), getattr(self.cfg.agent, "activation", None)
        if theirs is not None and ours is not None and theirs != ours:  # no weight: it had loaded without a word
            raise ConfigError(f"{said}: its skills were learnt with agent.activation {theirs!r}, this run's is "
                              f"{ours!r}, which would run their weights through another function: set "
                              f"agent.activation={theirs}")
        task = (payload["config"].get("env") or {}).get("task")
        if task != self.cfg.env.task and self.main:
            warnings.warn(f"{said}: its skills were learnt for task '{task}' and are used on '{self.cfg.env.task}'",
                          stacklevel=3)
        try:
            self.agent.take_pretrained(payload["agent"])
        except CheckpointError as err:  # its skills are of another size (latent_dim, hidden layers)
            raise CheckpointError(f"{said}: {err}") from None
        self.progress.pretrained = True

    def _pretraining_dataset(self) -> Any:
        """The dataset of an agent that pretrains on one (handed to ``agent.prepare``), else None."""
        from robolearn.data import Dataset
        from robolearn.data.dataset import no_dataset_hint
        from robolearn.offline_runner import check_dataset_fits

        if not getattr(self.agent, "pretrains", False):
            return None
        if getattr(self.cfg.agent, "skills_from", ""):  # another run's skills (taken by _take_skills): no dataset
            return None
        if not self.cfg.dataset:
            raise ConfigError(f"dataset: algo '{self.cfg.algo}' pretrains on a dataset before training online; "
                              f"give dataset=<name> ({no_dataset_hint(self.cfg.env.task)})")
        dataset = Dataset.load(self.cfg.dataset)
        # skill pretraining reads actions only (one's own agent says otherwise with reads_rewards = True), and
        # may take another task's data of the same shapes: skills learnt from play data transfer
        reads_rewards = getattr(self.agent, "reads_rewards", False)
        check_dataset_fits(dataset, self.cfg.env.task, self.env, reads_rewards, transfer=not reads_rewards)
        self.agent.prepare(dataset.transitions(self.env.device))
        return dataset

    def _steps_per_iteration(self) -> int:
        """Env steps per iteration, all ranks: on-policy ``num_steps`` x worlds; off-policy about 1000."""
        worlds = self.env.num_envs * self.world_size
        if self.agent.on_policy:
            return self.cfg.agent.num_steps * worlds  # (check_agent_contract: on-policy agents have it)
        return max(1, OFF_POLICY_STEPS_PER_ITERATION // self.env.num_envs) * worlds

    def planned_steps(self) -> int:
        """The env steps this run will end at: ``runner.total_steps`` rounded up to whole iterations,
        which are never cut short. Off policy they lie on a grid from step 0 (a resume finishes the iteration
        cut short); on policy whole rollouts follow where a resume starts, whose size changes with the
        number of ranks."""
        per_iteration, total, done = self._steps_per_iteration(), self.cfg.runner.total_steps, self.progress.env_steps
        if done >= total:
            return done
        if self.agent.on_policy:
            return done + -(-(total - done) // per_iteration) * per_iteration
        per_step = self.env.num_envs * self.world_size  # the first iteration: the rest, in whole steps of every world
        done += -(-iteration_rest(done, per_iteration) // per_step) * per_step  # then on the grid, as per_step divides it
        return done + max(0, -(-(total - done) // per_iteration)) * per_iteration

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "latest.pt"

    def save(self) -> None:
        """Checkpoint (rank 0 only: the ranks' agents are identical), never of data not yet verified finite."""
        if not self.main:
            return
        check_same_folder(self.run_dir, getattr(self, "folder", None))
        self._finite.verify()
        if hasattr(self.env, "adaptation_state"):
            self.progress.env_adaptation = self.env.adaptation_state()
        keep_seconds(self.progress, self.run_logger)
        progress = {**self.progress.__dict__, "rng": rng_state()}
        save_checkpoint(self.checkpoint_path, config=to_dict(self.cfg), agent=self.agent.state_dict(),
                        progress=progress, replay=self.replay)

    def _restore(self) -> None:
        payload = load_checkpoint(self.checkpoint_path)
        self.progress = Progress(**restore_agent(self.agent, payload, to_dict(self.cfg)))
        if self.progress.env_adaptation and hasattr(self.env, "load_adaptation_state"):
            self.env.load_adaptation_state(self.progress.env_adaptation)
        if self.progress.world_size not in (0, self.world_size) and self.main:
            warnings.warn(f"{self.run_dir} was trained on {self.progress.world_size} rank(s) and resumes on "
                          f"{self.world_size}: each update now sees {self.world_size / self.progress.world_size:.2g} "
                          f"times the batch it did (resume with --nproc {self.progress.world_size}, torchrun's "
                          f"--nproc_per_node, to keep it)",
                          stacklevel=2)
        self.progress.world_size = self.world_size
        if self.world_size > 1:  # only rank 0's random streams are saved: each rank draws fresh ones
            torch.manual_seed(self.seed + self.world_size * self.progress.iteration)
            np.random.seed(self.seed + self.world_size * self.progress.iteration)
        if self.replay is not None and self.fresh_replay:
            refill_instead(self.progress, max(self.cfg.runner.random_steps, self.cfg.agent.batch_size),
                           self.checkpoint_path.with_name("replay.pt"), warn=self.main)
        elif self.replay is not None:
            load_replay(self.checkpoint_path.with_name("replay.pt"), self.replay, self.progress.env_steps,
                        self.env.device, warn=self.main, env=self.env)
            mark_resume_seam(self.replay, self.agent, saved_num_envs(payload, self.env.num_envs), self.env.num_envs)

    # -- the loop ------------------------------------------------------------------------------

    @gives_torch_settings_back
    def train(self, stop: Callable[[dict[str, float]], bool] | None = None) -> RunResult:
        """Train until ``runner.total_steps`` (or ``stop(metrics)`` is true); then export, evaluate, film.

        Ctrl+C saves a checkpoint that ``--resume`` continues from (agent, optimizer,
        learning rate, normalizers, RNG and replay are restored exactly; the envs
        start fresh episodes, their state is not checkpointed). It is taken between env
        steps and updates (:class:`CtrlC`); an on-policy or pretraining iteration it cuts
        short is discarded (the checkpoint is that of its start), an off-policy one is
        finished after the resume, so logged steps stay on one grid. A second Ctrl+C stops
        at once: off policy, an update it splits is saved as it was. NaN or inf in
        observations, rewards, actions or losses stops the run with the last good
        checkpoint kept (it is only written after finite updates).
        """
        cfg = self.cfg
        self.run_logger = logger = self._start_logger() if self.main else None
        stats = EpisodeStats(self.env.num_envs, self.progress.recent_returns, self.env.device,
                             self.progress.recent_success)
        iterate = self._on_policy_iteration if self.agent.on_policy else self._off_policy_iteration
        result = RunResult(self.run_dir)
        deadline = deadline_of(cfg.runner.max_minutes)  # it spans a pretraining phase too
        if logger is not None:
            logger.set_deadline(deadline)  # the bars' ETA: the time left, where the deadline comes first
        with self.ctrl_c:
            try:
                if self.dataset is not None and not self.progress.pretrained:
                    self._pretrain(logger, deadline, stop)
            except KeyboardInterrupt:
                return self._interrupted(stats, result, logger)
            except TRAINING_FAILURES as err:
                raise stopped_by_nan(self, logger, err) from None
            ended_in_pretraining = self.dataset is not None and not self.progress.pretrained  # (runner.max_minutes)
            if not ended_in_pretraining:
                seed = self.seed + self.progress.iteration
                obs = self.env.reset(seed=seed)
                stagger_episodes(self.env, cfg.env, seed, resumed=self.progress.iteration > 0)
            lap = 0.0  # the last iteration's seconds, with its logging and saving: the next one's expected length
            try:
                if not ended_in_pretraining:  # (here: a NaN first observation is said as any later one, task named)
                    check_finite("observation", obs)
                while (not ended_in_pretraining and self.progress.env_steps < cfg.runner.total_steps
                       and not out_of_time(deadline, lap)):
                    start = time.perf_counter()
                    if self.agent.on_policy:
                        self._rewind_to = Snapshot(self.progress, self.agent, self._agent_copy)  # a Ctrl+C in it discards it
                    obs, metrics = iterate(obs, stats)
                    self._rewind_to = None
                    self.progress.iteration += 1
                    stats.keep(self.progress)
                    metrics = {**stats.metrics(), **metrics, **getattr(self.agent, "state_metrics", dict)(),
                               "iteration_time": time.perf_counter() - start}
                    if self.ctrl_c.deferred:  # several ranks stop together, at the end of the same iteration
                        metrics["ctrl_c"] = float(self.ctrl_c.pending)
                    metrics = distributed.mean_metrics(metrics)  # the same on every rank, so `stop` agrees
                    ctrl_c_on_any_rank = metrics.pop("ctrl_c", 0.0) > 0
                    last = self.progress.env_steps >= cfg.runner.total_steps  # logged too: `list` reads how far a run got
                    if logger is not None and (self.progress.iteration % cfg.runner.log_every == 0 or last):
                        logger.log(self.progress.env_steps, metrics)
                    if self.progress.iteration % cfg.runner.checkpoint_every == 0:
                        self.save()
                    if ctrl_c_on_any_rank:
                        raise KeyboardInterrupt
                    counters = {"env_steps": self.progress.env_steps, "iteration": self.progress.iteration}
                    if stop is not None and ask_stop(self, stop, {**counters, **metrics}):
                        break
                    lap = time.perf_counter() - start
                self.ctrl_c.check()  # one pressed during the last iteration
            except KeyboardInterrupt:
                return self._interrupted(stats, result, logger)
            except TRAINING_FAILURES as err:
                raise stopped_by_nan(self, logger, err) from None
        self.save()
        if ended_in_pretraining:  # the checkpoint resumes the pretraining; the run's end is of the skills so far
            self.agent.end_pretraining()
        if logger is not None:  # rank 0: export, evaluate, film
            logger.end_progress()
            self._finish(result, logger)
            logger.close()
        return result

    def _start_logger(self) -> RunLogger:
        """Rank 0's logger of this run's metrics and progress bar; first says where the run will end, when
        whole iterations take it past ``runner.total_steps``, and sets aside the pretraining lines logged past
        the checkpoint a resume inside pretraining goes back to (it logs them again)."""
        cfg = self.cfg
        if (planned := self.planned_steps()) > cfg.runner.total_steps and planned == self.progress.env_steps:
            # a resume with a budget below what the checkpoint trained ("runs to 28,160 env steps: whole iterations")
            print(f"runner.total_steps {cfg.runner.total_steps:,}: the run has trained {planned:,} env steps already; "
                  "it trains no more and ends")
        elif planned != cfg.runner.total_steps:  # iterations are never cut short
            print(f"runner.total_steps {cfg.runner.total_steps:,} runs to {planned:,} env steps: whole iterations "
                  f"of {self._steps_per_iteration():,}")
        if self.dataset is not None and not self.progress.pretrained:
            set_aside_after(self.run_dir / "metrics.jsonl", "pretrain_updates", self.progress.pretrain_updates,
                            "pretrain")
        logger = RunLogger(self.run_dir, total_steps=self.planned_steps(), config=to_dict(cfg),
                           initial_steps=self.progress.env_steps, initial_seconds=self.progress.seconds,
                           **cfg.logging.logger_args(cfg.run_name))
        if getattr(self.agent, "pretrains", False) and not getattr(cfg.agent, "skills_from", ""):
            # W&B's steps: the pretraining updates, then the env steps after them (a resume past the pretraining,
            # which reads no dataset, too: its online lines must stay after the pretraining's steps)
            logger.wandb_offset = cfg.agent.pretrain_updates
        return logger

    def _pretrain(self, logger: RunLogger | None, deadline: float = float("inf"),
                  stop: Callable[[dict[str, float]], bool] | None = None) -> None:
        """The pretraining phase (module docstring): iterations of ``OFF_POLICY_STEPS_PER_ITERATION`` updates,
        a checkpoint every ``runner.checkpoint_every`` of them, then the phase boundary; or, before an iteration
        that would end past ``deadline`` (``runner.max_minutes``), or after one that ``stop`` (``train()``'s)
        ends, an end there without the boundary. ``stop`` sees each pretraining iteration's metrics as the
        online ones, as a fine-tune's offline phase does: it had been asked only once the online phase began."""
        cfg, total = self.cfg, self.cfg.agent.pretrain_updates
        if total == 0 and self.main:  # allowed (an ablation), but rarely meant: say what it leaves out
            warnings.warn(f"agent.pretrain_updates=0: {type(self.agent).__name__} learns nothing from dataset "
                          f"'{cfg.dataset}' before the online phase, which then acts through an untrained skill model",
                          stacklevel=2)
        bar = logger.phase_bar(total, self.progress.pretrain_updates, "pretrain", "upd") if logger else None
        lap = 0.0  # the last iteration's seconds
        while self.progress.pretrain_updates < total:
            if out_of_time(deadline, lap):  # train() saves and ends the run
                if bar is not None:
                    bar.close()
                return
            start = time.perf_counter()
            # the rest of an iteration a Ctrl+C cut short (which kept its updates), so that logs stay on the grid
            count = min(iteration_rest(self.progress.pretrain_updates, OFF_POLICY_STEPS_PER_ITERATION),
                        total - self.progress.pretrain_updates)
            self._rewind_to, self._keep_at_safe_point = Snapshot(self.progress, self.agent, self._agent_copy), True
            with iteration_sums(self.progress) as sums:
                for _ in range(count):
                    self.ctrl_c.check()  # a first Ctrl+C: between updates, which the count says exactly
                    sums.add(self.agent.pretrain_update())
                    self.progress.pretrain_updates += 1
                    if bar is not None:
                        bar.update()
            metrics = {f"pretrain/{key}": value for key, value in sums.means().items()}
            check_metrics(metrics)
            self._rewind_to, self._keep_at_safe_point = None, False
            metrics["iteration_time"] = time.perf_counter() - start  # (the line's, and stop's as README says)
            if logger is not None:
                logger.log(0, {"phase": "pretrain", "pretrain_updates": self.progress.pretrain_updates, **metrics},
                           wandb_step=self.progress.pretrain_updates)
            if (self.progress.pretrain_updates // OFF_POLICY_STEPS_PER_ITERATION) % cfg.runner.checkpoint_every == 0:
                self.save()
            lap = time.perf_counter() - start
            iteration = -(-self.progress.pretrain_updates // OFF_POLICY_STEPS_PER_ITERATION)
            if (self.progress.pretrain_updates < total and stop is not None  # (the last one: the online phase asks)
                    and ask_stop(self, stop, {"env_steps": self.progress.env_steps, "phase": "pretrain",
                                              "pretrain_updates": self.progress.pretrain_updates,
                                              "iteration": iteration, **metrics})):
                if bar is not None:  # train() saves and ends the run, as at runner.max_minutes
                    bar.close()
                return
        if bar is not None:  # (cut short by a Ctrl+C, tqdm closes it as it goes out of scope)
            bar.close()
        if logger is not None:
            logger.restart_rate(self.progress.env_steps)  # the online fps, not diluted by the pretraining's time
        self.agent.end_pretraining()
        # the boundary: sums a Ctrl+C left of a pretraining iteration (a resume with fewer pretrain_updates runs
        # none) are no online iteration's, whose line had taken them in
        self.progress.pretrained, self.progress.update_sums = True, {}
        if self.main:
            export_controller(self.agent.controller(), self.run_dir / "pretrained",  # (the run, how far it had
                              extra=export_meta(self.run_dir, cfg.env, self.env.control_dt, self.progress))  # trained)
        self.save()  # the boundary: a resume from here trains online

    def _on_policy_iteration(self, obs: Obs, stats: EpisodeStats) -> tuple[Obs, dict[str, float]]:
        """One rollout and one update; logs the seconds of each (``collect_time``, ``update_time``, as RSL-RL
        does): on a GPU both end at a host sync the loop makes anyway, so the split costs no extra sync."""
        start = time.perf_counter()
        storage = RolloutStorage(self.cfg.agent.num_steps, self.env.device)
        with torch.no_grad():
            while not storage.full:
                self.ctrl_c.check()  # a Ctrl+C discards this rollout (_rewind)
                out = self.agent.act(obs, explore=True)
                obs, transition = self._step(obs, out, stats)
                storage.add(transition)
        self._finite.verify()  # before the update learns from it (on a GPU, the one sync of the rollout)
        collected = time.perf_counter()
        metrics = update_metrics(self.agent.update(storage.data))
        check_metrics(metrics)  # its values are host floats: the update has finished
        return obs, metrics | {"collect_time": collected - start, "update_time": time.perf_counter() - collected}

    def _off_policy_iteration(self, obs: Obs, stats: EpisodeStats) -> tuple[Obs, dict[str, float]]:
        runner, env = self.cfg.runner, self.env
        low = torch.as_tensor(env.action_spec.low, dtype=torch.float32, device=env.device)
        high = torch.as_tensor(env.action_spec.high, dtype=torch.float32, device=env.device)
        observe = getattr(self.agent, "observe", None)
        per_step = env.num_envs * self.world_size
        left = iteration_rest(self.progress.env_steps, self._steps_per_iteration())
        with iteration_sums(self.progress) as sums:  # tensors stay on the device until the end
            for _ in range(-(-left // per_step)):
                self.ctrl_c.check()  # between steps: env steps, replay, updates and RNG agree
                if self.progress.env_steps < runner.random_steps and hasattr(self.agent, "random_act"):
                    with torch.no_grad():  # agents that store acting state with each step supply their own warm-up
                        out = self.agent.random_act(obs)
                elif self.progress.env_steps < runner.random_steps:
                    out = {"action": low + (high - low) * torch.rand((env.num_envs, *low.shape), device=env.device)}
                else:
                    with torch.no_grad():
                        out = self.agent.act(obs, explore=True)
                obs, transition = self._step(obs, out, stats)
                self.replay.add(transition)
                if observe is not None:
                    observe(transition)
                if self.progress.env_steps < max(runner.random_steps, self.progress.refill_until):
                    continue
                pay_update_debt(self.progress, runner.utd_ratio * env.num_envs,
                                lambda: self.agent.update(self._sample()), sums, self.ctrl_c)
        self._finite.verify()  # its updates' losses would be NaN too: the checkpoint before stays the last good one
        metrics = sums.means()
        check_metrics(metrics)
        return obs, metrics

    def _interrupted(self, stats: EpisodeStats, result: RunResult, logger: RunLogger | None) -> RunResult:
        """Ctrl+C: back to what the checkpoint may hold, then save it; unless steps kept since the last
        verification were not finite (a GPU run verifies once per iteration): that stops the run as a NaN does."""
        self._rewind(stats)
        try:
            return interrupted(self, result, logger)
        except NonFiniteError as err:
            raise stopped_by_nan(self, logger, err) from None

    def _rewind(self, stats: EpisodeStats) -> None:
        """Before a Ctrl+C checkpoint, make progress agree with the state saved beside it: in an iteration
        marked discardable (``_rewind_to``) (its rollout half collected, or an update split by a second Ctrl+C),
        go back to its start; otherwise (off policy) keep the steps, which the replay buffer and the agent's
        updates already hold (an update split by a second Ctrl+C too: it is not undone). Pretraining keeps the
        updates done where the stop came between two (``check``), not where it landed (a second Ctrl+C)."""
        if self._rewind_to is not None and not (self._keep_at_safe_point and self.ctrl_c.at_safe_point):
            self.progress = self._rewind_to.restore(self.agent)
            self._rewind_to = None
            self.rewound = True  # said by ``interrupted``: the resume redoes that iteration
            self._finite.forget()  # the discarded steps' verdicts: nothing of them is saved
        else:
            stats.keep(self.progress)

    def _sample(self) -> dict[str, Any]:
        """A replay minibatch; agents that learn from windows of consecutive steps (action-sequence
        critics) cut them themselves with ``agent.sample(replay, batch_size, num_envs)``."""
        if hasattr(self.agent, "sample"):
            return self.agent.sample(self.replay, self.cfg.agent.batch_size, self.env.num_envs)
        return self.replay.sample(self.cfg.agent.batch_size)

    def _step(self, obs: Obs, out: dict[str, torch.Tensor], stats: EpisodeStats) -> tuple[Obs, dict[str, Any]]:
        # an agent of one's own: said, not an IndexError (no 'action') or a storage error (a numpy one)
        if not isinstance(out, dict) or not isinstance(out.get("action"), torch.Tensor):
            got = (type(out).__name__ if not isinstance(out, dict) else "a dict without 'action'" if "action" not in out
                   else f"'action': {type(out['action']).__name__}")
            raise ContractError(f"{type(self.agent).__name__}.act returns {{'action': tensor, ...}}, got {got}")
        next_obs, transition = step_envs(self.env, self.agent, obs, out["action"], stats, self._finite)
        self.progress.env_steps += self.env.num_envs * self.world_size
        if self.run_logger is not None:
            self.run_logger.advance(self.progress.env_steps)  # the bar moves within a slow iteration too
        return next_obs, {**transition, **out}  # what the agent stores with each step (log-probs, values...)

    # -- the end of a run ----------------------------------------------------------------------

    def _finish(self, result: RunResult, logger: RunLogger) -> None:
        finish_run(result, logger, self.cfg, self.agent.controller(), self.env.control_dt, self.progress,
                   adaptation=self.progress.env_adaptation)

    def close(self) -> None:
        if hasattr(self, "env"):  # not when its construction failed
            self.env.close()
        distributed.shutdown()
        give_torch_settings_back(self)


class Snapshot:
    """Progress, random streams and agent at an iteration's start, for a Ctrl+C to go back to
    (one copy of the agent's state per iteration, into ``copier``'s buffers: valid until its next copy)."""

    def __init__(self, progress: Any, agent: Agent, copier: StateCopy) -> None:
        self.progress, self.rng, self.agent = copy.deepcopy(progress), rng_state(), copier.take(agent.state_dict())

    def restore(self, agent: Agent) -> Any:
        """Put ``agent`` and the random streams back; return the progress to continue from."""
        set_rng_state(self.rng)
        agent.load_state_dict(fresh(self.agent))
        return self.progress


def step_envs(env: VecEnv, agent: Agent, obs: Obs, action: torch.Tensor, stats: EpisodeStats,
              finite: FiniteWatch) -> tuple[Obs, dict[str, Any]]:
    """One step of every env under ``action``, checked finite (at once on the CPU, once per iteration on
    a GPU: ``finite``); where episodes end, the agent's acting state is reset and ``stats`` count them.
    Returns the next observation and the transition to store (its ``next_obs`` is an ended episode's last)."""
    finite("action", action)
    next_obs, reward, terminated, truncated, info = env.step(action)
    finite("observation", next_obs)
    if info["final_obs"] is not next_obs:  # ended episodes' last observations: stored and bootstrapped from, as
        finite("final observation", info["final_obs"])  # next_obs holds their new episodes' first instead
    try:
        finite("reward", reward)
    except NonFiniteError as err:  # (checked at once: on the CPU) which of the task's reward terms went bad
        raise NonFiniteError(f"{err}{_bad_terms(info)}", err.sources) from None
    done = terminated | truncated
    agent.reset(done)
    stats.add(reward, done, info)
    return next_obs, {"obs": obs, "next_obs": info["final_obs"], "reward": reward, "terminated": terminated,
                      "truncated": truncated, "action": action}


def _bad_terms(info: dict[str, Any]) -> str:
    """`` in reward/upright``: the reward terms whose logged means (``info["log"]``) are NaN or inf, if any."""
    bad = [name for name, mean in info.get("log", {}).items()
           if name.startswith("reward/") and not np.isfinite(float(mean))]
    return f" in {', '.join(bad)}" if bad else ""


def pay_update_debt(progress: Any, owed: float, update: Callable[[], Any], sums: UpdateSums, ctrl_c: CtrlC) -> int:
    """Owe ``owed`` more updates (the UTD ratio times the env steps just taken) and run the whole ones
    owed, a Ctrl+C taken between them; a fraction left over carries to the next step (``progress.update_debt``,
    checkpointed). Metrics are summed into ``sums`` as they come. Returns how many updates ran."""
    progress.update_debt += owed
    count = 0
    while progress.update_debt >= 1.0:
        ctrl_c.check()
        sums.add(update())
        count += 1
        progress.update_debt -= 1.0
    return count


def iteration_rest(done: int, per_iteration: int) -> int:
    """Steps (or updates) left in the current iteration: a whole one at its start, or the rest of one that
    a Ctrl+C cut short, which a resume finishes so that logged counts stay on the iteration grid."""
    return per_iteration - done % per_iteration


def _deferred_stop_line(signum: int) -> str:
    """What rank 0 says when a stop signal reaches it mid-iteration. torchrun also sends SIGTERM to every rank
    when one has failed: that one cannot save with the others, so a SIGTERM's line says where a resume begins;
    one that came because the launcher died (:func:`distributed.launcher_gone`) says that instead."""
    line = "\nstopping at the end of this iteration, where every rank can save together (Ctrl+C again to stop at once)"
    if signum == signal.SIGTERM and distributed.launcher_gone():  # (not "if a rank failed": none did)
        line = f"\nSIGTERM: the launcher (torchrun) is gone, killed or crashed; {line[1:]}"
    elif signum != signal.SIGINT:
        line = (f"\n{signal.Signals(signum).name}: {line[1:]}; if torchrun sent it because a rank failed (its error "
                "is above), the ranks cannot save together and a resume goes on from the last checkpoint")
    return line + "\n"


class CtrlC:
    """Ctrl+C (or SIGTERM, SIGHUP) in the training loop, taken where the run's state is consistent: the first one only
    marks it ``pending`` and the loop raises KeyboardInterrupt at its next ``check()`` (between env
    steps and updates, never inside an update or a checkpoint write); a second one raises at once.
    Only the main thread can catch signals; elsewhere Ctrl+C raises where it lands, as without this.
    ``deferred`` (several ranks): ``check`` never raises; the ranks agree at the end of an iteration
    (a rank that stopped alone would leave the others waiting in a gradient all-reduce)."""

    def __init__(self, deferred: bool = False) -> None:
        self.pending, self.deferred = False, deferred
        self.forced = False  # a second Ctrl+C raised wherever it landed, maybe inside an update
        self.at_safe_point = False  # the stop was raised by ``check``: between steps and updates
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> CtrlC:
        self.pending = self.forced = self.at_safe_point = False
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            # SIGTERM (a cluster's preemption, `docker stop`, `kill`) and SIGHUP (a closed terminal or ssh
            # session) are taken as Ctrl+C: a checkpoint, not a loss (under `nohup` SIGHUP is ignored: left so).
            for signum in STOP_SIGNALS:
                default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
                if signal.getsignal(signum) is default:  # not where it is ignored or someone else's
                    self._previous[signum] = signal.signal(signum, self._press)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _press(self, signum: int, frame: Any) -> None:
        hung_up(signum)  # a closed terminal: the save's message must not fail on it (EIO)
        if self.pending:
            self.forced = True
            raise KeyboardInterrupt
        self.pending = True
        if self.deferred and distributed.is_main():  # an iteration can take minutes: say why nothing stops yet
            os.write(2, _deferred_stop_line(signum).encode())

    def check(self) -> None:
        """A safe point: a pending Ctrl+C raises here (one rank of several: only where the ranks agree)."""
        if self.pending and not self.deferred:
            self.at_safe_point = True
            raise KeyboardInterrupt


def check_ranks_agree(cfg: TrainConfig) -> None:
    """Refuse, on every rank, ranks whose configs differ (another agent.num_epochs, a node where warp fell back to
    the CPU): ranks that make other numbers of updates had waited in a collective for ever, and other loss
    weights were silently averaged with rank 0's through the gradients. ``run_dir`` and ``logging`` may differ
    (only rank 0 writes and logs)."""
    if not distributed.active():
        return
    mine = {key: value for key, value in flat_keys(to_dict(cfg)).items()
            if key != "run_dir" and not key.startswith("logging.")}
    every = distributed.gather_objects(mine)
    for rank, theirs in enumerate(every[1:], 1):
        if differ := sorted(key for key in every[0].keys() | theirs.keys() if every[0].get(key) != theirs.get(key)):
            distributed.shutdown()
            said = "; ".join(f"{key} is {every[0].get(key)!r} on rank 0 and {theirs.get(key)!r} on rank {rank}"
                             for key in differ[:3])
            raise ConfigError(f"the ranks were started with different configs: {said}{' ...' if len(differ) > 3 else ''}; "
                              "start every rank with the same config and overrides (and the same env.backend and "
                              "env.device that this machine can run)")


def _rank_env_config(env: EnvConfig) -> EnvConfig:
    """``env`` with physics threads for this rank's share of the cores where it says 'all cores'
    and several ranks share this machine (else each rank would start one thread per core)."""
    if env.num_threads == 0 and distributed.local_world_size() > 1:
        return dataclasses.replace(env, num_threads=distributed.cpu_share())
    return env


def deadline_of(max_minutes: float) -> float:
    """``runner.max_minutes`` from now on ``time.monotonic()``'s clock; no deadline (inf) for 0."""
    return time.monotonic() + 60 * max_minutes if max_minutes > 0 else float("inf")


def out_of_time(deadline: float, lap: float) -> bool:
    """Whether an iteration of ``lap`` seconds begun now would end past ``runner.max_minutes`` (a run had gone
    up to a whole iteration over its budget: a minute of SAC on a CPU); rank 0's clock decides for every rank."""
    if deadline == float("inf"):
        return False
    late = time.monotonic() + lap >= deadline
    return bool(distributed.broadcast_object(late)) if distributed.active() else late


def interrupted(runner: Any, result: RunResult, logger: RunLogger | None) -> RunResult:
    """Ctrl+C during training: checkpoint, close the logs, say how to continue (a second Ctrl+C during the
    save abandons it: the checkpoint before stays, as written atomically, and that is said, with the resume from
    it: a double Ctrl+C had left no resume line, and its bar redrawn under the words when it was closed at exit)."""
    nproc = f" --nproc {distributed.world_size()}" if distributed.world_size() > 1 else ""
    try:
        runner.save()
    except KeyboardInterrupt as err:
        if distributed.is_main():
            end_progress_bars()
            resume = f"{shell('robolearn', 'train', '--resume', runner.run_dir)}{nproc}"
            kept = (f"the last one, {runner.checkpoint_path}, is kept; continue from it with: {resume}"
                    if runner.checkpoint_path.is_file() else "there is none yet")
            print(f"\ninterrupted again while saving: this checkpoint was not written; {kept}", file=sys.stderr)
            err.said = True  # the command line adds no bare "interrupted" after this
        raise
    result.interrupted = True
    result.trained = trained_counts(vars(runner.progress))
    muted = mute_dead_pipes()  # a `| tee` the same Ctrl+C ended: not a failure; the resume line goes to stderr
    if logger is not None:
        logger.close()
    if distributed.is_main():
        phases = hasattr(runner.progress, "online_updates")  # offline-to-online: say which phase counted which
        names = {"updates": "offline updates" if phases else "updates", "online_updates": "online updates"}
        counts = [f"{value:,} {names.get(name, name.replace('_', ' '))}"
                  for name in ("pretrain_updates", "updates", "env_steps", "online_updates")
                  if (value := getattr(runner.progress, name, 0))]
        at = f" at {', '.join(counts)}" if counts else ""
        redo = " (the interrupted iteration is redone)" if getattr(runner, "rewound", False) else ""
        print(f"\ninterrupted: checkpoint saved{at}{redo}; continue with: "
              f"{shell('robolearn', 'train', '--resume', runner.run_dir)}{nproc} "
              f"(from Python: robolearn.train(resume={str(runner.run_dir)!r}))",
              file=sys.stderr if 1 in muted else sys.stdout)
    return result


def end_progress_bars() -> None:
    """Close every progress bar still drawn (a run's, a phase's), ending its line: a run stopped by an error
    had its error printed after the bar, '...[00:00<?, ?step/s]error: rank 0 lost the other ranks'."""
    from tqdm import tqdm

    for bar in list(tqdm._instances):  # tqdm's own registry of open bars (no public accessor)
        bar.close()


TRAINING_FAILURES = (NonFiniteError, SimulationFailed)
"""What stops a run (online, offline, fine-tune) as :func:`stopped_by_nan` says it, its last checkpoint kept."""


def stopped_by_nan(runner: Any, logger: RunLogger | None,
                   err: NonFiniteError | SimulationFailed) -> NonFiniteError | SimulationFailed:
    """NaN during training, or physics that could not step: close the logs (W&B: failed); the error (of the
    same type) names the last good checkpoint (kept, not overwritten)."""
    if logger is not None:
        logger.close(exit_code=1)
    env_check = f"check task '{runner.cfg.env.task}' (its observations and rewards, or physics that diverged)"
    learner_check = "check the config's learning rate, batch size and the data"
    if isinstance(err, SimulationFailed):
        cause = f"change the model of task '{runner.cfg.env.task}' (or env.kwargs) as MuJoCo says"
    elif not {"observation", "final observation", "reward"} & set(err.sources):
        cause = learner_check
    elif "action" not in err.sources:  # the env made it, whatever the learner does
        cause = f"the env produced it: {env_check}"
    else:  # on a GPU, read once per iteration: which went bad first is not known
        cause = f"the env or the learner produced it: {env_check}, and {learner_check}"
    at = _counts(vars(runner.progress))
    if not runner.checkpoint_path.is_file():
        return _said_again(err, f"{err}; training stopped at {at} before its first checkpoint (nothing to resume): "
                                f"{cause}")
    try:
        kept = f" ({_counts(load_checkpoint(runner.checkpoint_path)['progress'])})"
    except (CheckpointError, OSError):  # its counts are a detail: the message goes on without them
        kept = ""
    return _said_again(err, f"{err}; training stopped at {at}, last good checkpoint{kept} kept at "
                            f"{runner.checkpoint_path}; {cause}")


def evaluation_failed(run: Path, logger: RunLogger, progress: dict[str, Any],
                      err: NonFiniteError | SimulationFailed) -> NonFiniteError | SimulationFailed:
    """NaN (or physics that could not step) in the evaluation that ends a run whose training finished: close the
    logs (W&B: failed) as :func:`stopped_by_nan` does; the error (of the same type) says that the training and its
    checkpoint are kept, and how to evaluate again. It had been evaluate's bare error, the logs left open."""
    logger.close(exit_code=1)
    return _said_again(err, f"{err}; training finished (at {_counts(progress)}), its checkpoint kept at "
                            f"{run / 'checkpoints' / 'latest.pt'}, but the final evaluation stopped: evaluate it again "
                            f"with {shell('robolearn', 'eval', run)} ({shell('robolearn', 'train', '--resume', run)} "
                            "also writes eval.json, curves and video)")


def _said_again(err: NonFiniteError | SimulationFailed, message: str) -> NonFiniteError | SimulationFailed:
    """``err``'s type (a NaN's keeps its sources) with ``message``."""
    return NonFiniteError(message, err.sources) if isinstance(err, NonFiniteError) else SimulationFailed(message)


def _counts(progress: dict[str, Any]) -> str:
    """``env_steps=24,576``: how far a run (its progress, or a checkpoint's) had trained, for the NaN stop."""
    return ", ".join(f"{key}={value:,}" for key, value in trained_counts(progress).items()) or "the start"


@stops_as_ctrl_c()  # (a context manager of contextlib's: one per call)
def finish_run(result: RunResult, logger: RunLogger, cfg: TrainConfig, controller: Controller, control_dt: float,
               progress: Any, annotate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
               adaptation: dict[str, Any] | None = None) -> None:
    """The end of every run: export the controller (saying in ``controller.json`` how far it had trained:
    ``progress``'s counts), evaluate it (``eval.json``, with ``annotate(evaluation)``'s keys added; automatic
    randomization at the width ``adaptation`` reached), draw its learning curves (``curves.png``), film it.
    A Ctrl+C in any of these says how to finish: a resume exports and evaluates a run without ``eval.json``;
    ``robolearn play`` films one; so does a kill or a closed terminal (``stops_as_ctrl_c``). A NaN in the
    evaluation fails the run, its training kept (:func:`evaluation_failed`)."""
    run = result.run_dir
    counts = progress if isinstance(progress, dict) else vars(progress)
    result.trained = trained_counts(counts)
    _say_if_ended_early(run, cfg, counts, result.trained)
    env_cfg = at_trained_width(cfg.env, adaptation)
    resume = shell("robolearn", "train", "--resume", run)
    with _hint_on_ctrl_c(f"its checkpoint is saved; {resume} exports, evaluates and films it"):
        # an earlier end's controller.json goes first: cut short, this export leaves the run unfinished (resumable)
        (run / "export" / "controller.json").unlink(missing_ok=True)
        result.exported = export_controller(controller, run / "export", extra=export_meta(run, cfg.env, control_dt,
                                                                                          progress))
    episodes = cfg.runner.eval_episodes
    if episodes > 0:
        print(f"evaluating: {episodes} episode(s), {evaluation_dynamics(env_cfg)}", flush=True)  # minutes, on big tasks
        try:
            with _hint_on_ctrl_c(f"its checkpoint and export are saved; {resume} evaluates and films it"):
                with make_env(env_cfg, num_envs=episodes, seed=cfg.seed + 10_000) as eval_env:
                    result.evaluation = evaluate(controller.to(eval_env.device), eval_env, episodes,
                                                 seed=cfg.seed + 10_000)
        except TRAINING_FAILURES as err:
            raise evaluation_failed(run, logger, counts, err) from None
        if annotate is not None:
            result.evaluation |= annotate(result.evaluation)
        backend = "gymnasium" if cfg.env.task.startswith("gym:") else cfg.env.backend  # a Gymnasium env brings its own
        result.evaluation |= {"dynamics": evaluation_dynamics(env_cfg), "backend": backend,
                              "device": cfg.env.device}
        atomic_write_bytes(run / "eval.json", lambda f: f.write(strict_json.dumps(result.evaluation, indent=2).encode()))
        logger.summary({f"eval/{k}": v for k, v in result.evaluation.items()})
    with _hint_on_ctrl_c(f"its checkpoint, export and evaluation are saved; {shell('robolearn', 'plot', run)} "
                         "draws its curves"):
        try:  # after the evaluation, which the curves show at the run's end
            if result.trained:
                result.curves = plot_runs([run], run / "curves.png", at_end=True)
            else:  # (plot_runs would call the folder "not a run directory")
                print(f"no curves: nothing was trained (runner.total_steps={cfg.runner.total_steps})")
        except Exception as err:  # a picture must not cost the trained run
            print(f"curves skipped: {type(err).__name__}: {err}")
    if cfg.runner.video_seconds > 0:
        try:
            with _hint_on_ctrl_c(f"its checkpoint, export and evaluation are saved; "
                                 f"{shell('robolearn', 'play', run, '--video', run / 'video.mp4')} films it"):
                with make_env(env_cfg, num_envs=1, seed=cfg.seed) as video_env:
                    result.video = record_video(controller.to(video_env.device), video_env, run / "video.mp4",
                                                seconds=cfg.runner.video_seconds, progress=cfg.logging.progress)
        except Exception as err:  # a missing GL stack must not cost the trained run
            print(f"video skipped: {type(err).__name__}: {err}")


def _say_if_ended_early(run: Path, cfg: TrainConfig, counts: dict[str, Any], trained: dict[str, int]) -> None:
    """Say a run that ends short of its budget (``trained``: its counts; ``counts``: its whole progress), as
    `list` says it later: runner.max_minutes or train()'s stop ended it, not the budget, and a resume trains on.
    The budget is the phase's it ended in: a fine-tune's offline updates, a skill agent's pretraining updates,
    else runner.total_steps of env steps (updates, offline)."""
    done, total = trained.get("env_steps", trained.get("updates", 0)), cfg.runner.total_steps
    counted, budget = ("env steps" if "env_steps" in trained else "updates"), "runner.total_steps"
    if counts.get("phase") == "offline":  # a fine-tune ended before its online phase: its updates' own budget
        done, total = trained.get("updates", 0), cfg.agent.pretrain_updates
        counted, budget = "offline updates", "agent.pretrain_updates"
    elif counts.get("pretrained") is False and counts.get("pretrain_updates", 0) > 0:  # skills, cut in pretraining
        done, total = counts["pretrain_updates"], cfg.agent.pretrain_updates
        counted, budget = "pretraining updates", "agent.pretrain_updates"
    if 0 < done < total:
        why = "runner.max_minutes" if cfg.runner.max_minutes > 0 else "train()'s stop"
        print(f"ended early: {done:,} of {budget}={total:,} {counted} ({why}); "
              f"{shell('robolearn', 'train', '--resume', run)} trains on", flush=True)


@contextlib.contextmanager
def _hint_on_ctrl_c(how: str) -> Iterator[None]:
    """A Ctrl+C in the block says what of the run is saved and ``how`` to finish it, then goes on as a Ctrl+C."""
    try:
        yield
    except KeyboardInterrupt as err:
        print(f"interrupted after the training ended: {how}", file=sys.stderr)
        err.said = True  # the command line adds no bare "interrupted" after this
        raise


def update_metrics(metrics: Any) -> dict[str, Any]:
    """What an agent's ``update`` returned, checked to be a dict of one number per metric (tensors stay
    on their device: shapes only, no sync), so an agent of one's own returning else is told so."""
    if not isinstance(metrics, dict):
        raise ContractError(f"an agent's update returns a dict of scalar metrics to log, got {type(metrics).__name__}")
    for key, value in metrics.items():
        size = value.numel() if isinstance(value, torch.Tensor) else np.size(value)
        if size != 1:
            raise ContractError(f"update metric '{key}': one number per metric, got {size} values")
    return metrics


class UpdateSums:
    """Updates' metrics (checked: :func:`update_metrics`) summed as they come, tensors on their device (a
    ``float`` per update would be a host sync on a GPU); :meth:`means` averages each over the updates that
    returned it: a metric an agent reports every few updates (TD3's delayed actor, HRAC's high level) had been
    divided by all of them, and logged that many times too small."""

    def __init__(self, state: dict[str, dict[str, Any]] | None = None) -> None:
        """Begun from ``state`` (:meth:`state`, a checkpoint's): the sums of an iteration a Ctrl+C cut short."""
        state = state or {}
        self.sums: dict[str, Any] = dict(state.get("sums", {}))
        self.counts: collections.Counter[str] = collections.Counter(state.get("counts", {}))

    def add(self, metrics: Any) -> None:
        """One update's metrics."""
        metrics = update_metrics(metrics)
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.counts.update(metrics.keys())

    def means(self) -> dict[str, float]:
        """Each metric's mean over the updates that returned it (one read of the device for all)."""
        return {key: total / self.counts[key] for key, total in read_scalars(self.sums).items()}

    def state(self) -> dict[str, dict[str, Any]]:
        """The sums and counts as plain floats and ints (one read of the device), which a checkpoint holds."""
        return {"sums": read_scalars(self.sums), "counts": dict(self.counts)}


@contextlib.contextmanager
def iteration_sums(progress: Any) -> Iterator[UpdateSums]:
    """An iteration's :class:`UpdateSums`, begun from ``progress.update_sums``: those of the part of it before a
    Ctrl+C, which keeps the updates done (the resume finishes the iteration); without them the resumed iteration's
    line averaged only the updates after the resume, not the run trained in one go's. A Ctrl+C in this one leaves
    its sums there for the checkpoint; a second one that goes back to the iteration's start (:class:`Snapshot`,
    taken before this) puts back the progress, and the sums, of then. Data-parallel ranks log rank 0's sums and
    resume from them alike (rank 0 alone saves)."""
    sums, progress.update_sums = UpdateSums(progress.update_sums), {}
    try:
        yield sums
    except KeyboardInterrupt:
        progress.update_sums = sums.state()
        raise


def check_metrics(metrics: dict[str, float]) -> None:
    """Stop on an update metric (a loss) that is NaN or inf: the update that made it has broken the weights."""
    for key, value in metrics.items():
        if not np.isfinite(float(value)):
            raise NonFiniteError(f"update metric '{key}' is {float(value)}", ("update metric",))


def train(cfg: TrainConfig, resume: Path | None = None, stop: Callable[[dict[str, float]], bool] | None = None,
          fresh_replay: bool = False) -> RunResult:
    """Python entry point: ``robolearn.train(load_config("ppo_cartpole"))``; offline algorithms
    (and runs given a ``dataset``) go to :class:`robolearn.offline_runner.OfflineRunner`, and
    offline-to-online ones (``wsrl``, ``calql_finetune``, ``jsrl``) to :class:`robolearn.finetune_runner.FinetuneRunner`.
    With ``resume`` (a run directory), ``cfg`` is the config the run continues with, whole: pass the run's own,
    ``load_run_config(resume)`` (what ``robolearn train --resume`` does, overrides applied), not a config file's
    defaults, which would replace its settings (the run's config before is kept as config.superseded-N.yaml).
    A Ctrl+C (SIGTERM, SIGHUP) during training returns the result with ``interrupted`` True, the run checkpointed,
    rather than raising ``KeyboardInterrupt`` (:func:`robolearn.train` says when it does raise)."""
    with torch_settings_kept(), global_rng_kept():  # threads, precision and random streams: the caller's after
        return _train(cfg, resume, stop, fresh_replay)


@contextlib.contextmanager
def global_rng_kept() -> Iterator[None]:
    """Put torch's and numpy's global random streams back as they were on leaving: a run seeds both with its
    ``seed`` and draws from them, and a script's own draws after ``train()`` had come from the run's streams
    (numpy's reseeded to ``seed``: the same numbers after every run). CUDA's where the caller had started CUDA."""
    cpu, numpy_state = torch.get_rng_state(), np.random.get_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        np.random.set_state(numpy_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _train(cfg: TrainConfig, resume: Path | None, stop: Callable[[dict[str, float]], bool] | None,
           fresh_replay: bool) -> RunResult:
    from robolearn.finetune_runner import FinetuneRunner, is_finetune
    from robolearn.offline_runner import OfflineRunner, is_offline

    if stop is not None and not callable(stop):  # (it had been called after the first iteration, a run folder made)
        raise TypeError(f"stop: a function of an iteration's metrics that returns True to end the run, e.g. "
                        f"stop=lambda m: m.get('env_steps', 0) >= 100_000; got {type(stop).__name__} {stop!r:.60}")
    check_data_parallel(cfg, distributed.world_size(), f"{distributed.world_size()} ranks")
    if fresh_replay:
        check_fresh_replay(cfg, resume)
    # Rank 0 holds the run while it trains: a resume is claimed before anything is built from it.
    lock = RunLock(resume) if resume and Path(resume).is_dir() and distributed.is_main() else None
    sigterm_before = None  # set where this rank lost its peers: torchrun's SIGTERM must not end it mid-teardown
    try:
        if resume is not None and Path(resume).is_dir():
            if not (Path(resume) / "checkpoints" / "latest.pt").is_file():
                raise CheckpointError(checkpoint_missing(Path(resume), "no checkpoint to resume from"))
            refuse_task_change(Path(resume), cfg)
            refuse_wandb_move(Path(resume), cfg)
        if is_finetune(cfg):
            runner: Runner | OfflineRunner = FinetuneRunner(cfg, resume=resume, fresh_replay=fresh_replay)
        else:
            runner = OfflineRunner(cfg, resume=resume) if is_offline(cfg) else \
                Runner(cfg, resume=resume, fresh_replay=fresh_replay)
        try:
            lock = lock or (RunLock(runner.run_dir) if distributed.is_main() else None)
            if resume is not None and distributed.is_main() and (original := copied_from(runner.run_dir)):
                runner.progress.run_id = new_run_id()  # (rank 0's progress is the one saved and exported)
                aside = set_aside_wandb(runner.run_dir, original)
                print(f"{runner.run_dir} is a copy of {original}, which still holds the run: it takes a run id of its "
                      "own, so that the two runs' exports are told apart"
                      + (f", and a W&B run of its own (the original's W&B files copied with it are in {aside})"
                         if aside else ""), flush=True)
            if distributed.is_main():
                (runner.run_dir / FAILURE_FILE).unlink(missing_ok=True)  # this attempt's outcome replaces it
                remove_partial_writes(runner.run_dir / "checkpoints")  # a kill -9's, now that the run is held
            result = runner.train(stop=stop)
            result.trained = result.trained or trained_counts(vars(runner.progress))  # (every rank, not only 0's end)
            return result
        except Exception as err:
            end_progress_bars()  # the error is printed on a line of its own, not after the bar's
            failure = (distributed.lost_peers(err, runner.run_dir) if distributed.active() else None) or err
            if isinstance(failure, distributed.PeersLost):
                sigterm_before = distributed.deaf_to_torchruns_sigterm()
            if distributed.is_main():
                record_failure(runner.run_dir, failure)
            if runner.run_logger is not None:  # W&B: failed, not left open for the exit to call it finished
                with contextlib.suppress(OSError):  # (a full disk fails the metrics file's close too)
                    runner.run_logger.close(exit_code=1)
            if failure is err:
                raise
            raise failure from err
        finally:
            runner.close()
    finally:
        if lock is not None:
            lock.release()
        if sigterm_before is not None:
            signal.signal(signal.SIGTERM, sigterm_before)
