"""Offline training: an agent learns from a fixed dataset and is evaluated in simulation.

    robolearn train configs/iql_hopper.yaml dataset=hopper-medium

The dataset (``robolearn.data.Dataset``) must come from the config's task with the
env's observation and action shapes. Its transitions go to the device once; the
agent's ``prepare`` fixes its dataset statistics (observation normalizer, reward
scale, Monte-Carlo returns); then ``update`` runs on uniformly sampled minibatches, or,
for agents with a ``sample(batch_size)`` method (the goal-conditioned ones, which
relabel goals from the dataset's trajectories), on the minibatches the agent draws.

Counting: here ``runner.total_steps`` counts gradient updates. An iteration is
``UPDATES_PER_ITERATION`` updates; metrics are written every ``runner.log_every``
iterations, and every ``runner.checkpoint_every`` iterations the controller is
evaluated in simulation (``runner.eval_episodes`` episodes: return, success rate
where the task defines success, and the dataset's normalized score) and a checkpoint
is written atomically. The run directory is an online run's (config.yaml,
metrics.jsonl, checkpoints/latest.pt, eval.json, export/), so ``robolearn eval |
export | play <run>`` work unchanged; ``metrics.jsonl`` lines carry ``updates`` and
``updates_per_s`` where online runs have env steps.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robolearn.checkpoint import load_checkpoint, restore_agent, rng_state, save_checkpoint
from robolearn.config import ConfigError, TrainConfig, load_run_config, to_dict, validated
from robolearn.data import Dataset, DatasetError
from robolearn.data.dataset import no_dataset_hint
from robolearn.data.minari_store import dataset_id
from robolearn.evaluate import differing_settings, evaluate, setting_text
from robolearn.interfaces import VecEnv
from robolearn.logger import RunLogger, keep_seconds
from robolearn.preflight import warn_if_goal_unread
from robolearn.registry import make_agent, make_env
from robolearn.runner import (TRAINING_FAILURES, CtrlC, RunResult, Snapshot, ask_stop, check_metrics, deadline_of,
                              finish_run, give_torch_settings_back, gives_torch_settings_back, interrupted, iteration_rest,
                              iteration_sums, out_of_time, stopped_by_nan, write_config_or_undo)
from robolearn.runs import check_same_folder, new_run_dir, new_run_id, refuse_finished
from robolearn.shell import shell
from robolearn.state_copy import StateCopy
from robolearn.storage import ReplayBuffer

UPDATES_PER_ITERATION = 1000
MIN_EPISODES = 5  # below this many episodes, or MIN_BATCHES minibatches of transitions, a run is warned
MIN_BATCHES = 10


def is_offline(cfg: TrainConfig) -> bool:
    """Whether ``cfg`` is an offline run: an offline algorithm, or a run given a dataset whose
    algorithm does not pretrain on it before training online (those go to the online runner)."""
    from policies import agent_entry

    agent_cls = agent_entry(cfg.algo)[1]
    return bool(getattr(agent_cls, "offline", False)) or (bool(cfg.dataset) and not getattr(agent_cls, "pretrains", False))


def check_dataset_fits(dataset: Dataset, task: str, env: VecEnv, reads_rewards: bool = True,
                       transfer: bool = False, reads_groups: tuple[str, ...] = ()) -> None:
    """Raise naming the dataset and the config's env when task, observation (the env's groups; the
    dataset may hold more) or action shapes differ; say
    what fits by shape only (``reads_rewards``: whether the learner reads the dataset's rewards).
    ``transfer``: another task's data of the same shapes is said, not refused (skills pretrained on one
    maze's play data and used in another: SPiRL's premise). ``reads_groups``: the groups the learner reads
    whatever the task (a goal-conditioned one's ``goal``): the dataset's own task is offered only where it has them."""
    from robolearn.data.importing import no_task_here

    problems = []
    other_task = dataset.task is not None and dataset.task != task
    if other_task and not transfer:
        problems.append(f"task '{dataset.task}' vs '{task}'")
    env_shapes = {g: tuple(b.shape) for g, b in env.observation_spec.items()}
    # Groups the env lacks are kept, not trained on: a deploy recording's joint_state, which only the robot gives
    shapes = {g: tuple(b.shape) for g, b in dataset.observation_spec.items() if g in env_shapes}
    if shapes != env_shapes:
        if missing := sorted(set(env_shapes) - set(shapes)):  # (a Minari goal dataset's observation/desired_goal)
            problems.append(f"observation groups {missing} missing: the dataset's groups are "
                            f"{ {g: tuple(b.shape) for g, b in dataset.observation_spec.items()} }, the env's "
                            f"{env_shapes}; the groups must have the env's names")
        else:
            problems.append(f"observations {shapes} vs {env_shapes}")
    if tuple(dataset.action_spec.shape) != tuple(env.action_spec.shape):
        problems.append(f"actions {tuple(dataset.action_spec.shape)} vs {tuple(env.action_spec.shape)}")
    if problems:
        hint = f"; to train on it, add env.task={dataset.task}" if dataset.task not in (None, task) else ""
        if other_task and (unknown := no_task_here(dataset.task)):  # (env.task= it had been offered: fails in turn)
            source = str(dataset.info.get("source", ""))
            imported = source.partition(":")[0] in ("d4rl", "lerobot", "recording")  # (import's formats)
            again = "import it again" if imported else shell("robolearn", "dataset", "export", dataset.id, "--format",
                                                            "d4rl", "--out", "FILE.hdf5") + ", then import that"
            hint = f"; its task '{dataset.task}' {unknown}: {again} with --task and the task it was recorded on"
        if lacking := [group for group in reads_groups if group not in dataset.observation_spec]:  # (its task
            # would be the next refusal: the learner needs them on any task)
            hint = (f"; the learner reads observation groups {list(reads_groups)} on any task, and the dataset "
                    f"has no {lacking}: give it a dataset of a goal-conditioned task (`robolearn dataset list`)")
        raise DatasetError(f"dataset '{dataset.id}' does not fit the config's env '{task}': "
                           + "; ".join(problems) + f" (dataset vs env){hint}")
    if other_task:  # transfer: the shapes fit
        unknown = f", which {said}" if (said := no_task_here(dataset.task)) else ""  # (a typo, not another task)
        warnings.warn(f"dataset '{dataset.id}' was recorded on task '{dataset.task}'{unknown}, and its skills are "
                      f"used on '{task}': they transfer as far as the two tasks' observations and actions mean the same",
                      stacklevel=3)
    for doubt in _doubts(dataset, task, env, reads_rewards):
        warnings.warn(f"dataset '{dataset.id}': {doubt}", stacklevel=3)


def rate_doubt(recorded_dt: Any, env_dt: float | None) -> str | None:
    """Data recorded at another control period than the env steps at, said; None when they agree (or
    either is unknown)."""
    if not isinstance(recorded_dt, (int, float)) or not env_dt or abs(recorded_dt - env_dt) <= 1e-6 * env_dt:
        return None
    return (f"recorded at a control period of {recorded_dt:.4g} s, the env steps {env_dt:.4g} s: a policy learnt "
            "from it acts at the wrong rate")


def from_robot(info: dict[str, Any]) -> bool:
    """Whether a dataset's ``info`` says robot recordings made it: imported from one, or a split or merge of
    such (a split keeps its ``recording``, a merge each source's under ``sources``; their ``source`` is the
    split's or merge's)."""
    from robolearn.data.recordings import recordings_in

    return str(info.get("source", "")).startswith("recording:") or bool(recordings_in(info))


def size_doubt(steps: int, episodes: int, batch_size: int, from_robot: bool = False) -> str | None:
    """A dataset too small to learn a policy from that generalises (a handful of robot episodes), said;
    None from ``MIN_EPISODES`` episodes and ``MIN_BATCHES`` minibatches' worth of transitions on. ``robolearn
    deploy`` is named as a source of more only for a robot's recording (``from_robot``): it runs no hopper."""
    few = [f"{episodes} episode(s), under {MIN_EPISODES}"] * (episodes < MIN_EPISODES) + \
          [f"{steps} transitions, under {MIN_BATCHES} minibatches of agent.batch_size={batch_size}"] * (
              steps < MIN_BATCHES * batch_size)
    if not few:
        return None
    return (f"it holds only {' and '.join(few)}: each update sees the same few episodes, "
            "and a policy learnt from them rarely does well beyond their starts and targets; record more "
            # (a robot's recordings hold its joint_state, which the sim's recordings lack: merge refuses the two)
            f"({'robolearn deploy --episodes N, then robolearn dataset import' if from_robot else 'robolearn dataset record'}) "
            "and join them with robolearn dataset merge")


def _doubts(dataset: Dataset, task: str, env: VecEnv, reads_rewards: bool) -> list[str]:
    """What fits by shape but may still be the wrong data for ``env``: said, then trained on."""
    doubts = []
    if dataset.task is None:
        doubts.append(f"it does not say which task it was recorded on, so only its shapes were checked against "
                      f"'{task}'; to record that it is, import it with --task {task} (from Python: DatasetWriter(..., "
                      f"metadata=robolearn.data.env_metadata(env, {task!r})), or write task={task!r} "
                      "in its metadata)")
    if rate := rate_doubt(dataset.info.get("control_dt"), getattr(env, "control_dt", None)):
        doubts.append(rate)
    # Said to learners of the data's rewards and ends, which these settings defined; skill pretraining and
    # imitation take play data from other settings on purpose.
    # (the episode length the recording ran is in its metadata even where its task settings were the defaults)
    recorded = {**({"max_episode_steps": length} if isinstance(length := dataset.info.get("max_episode_steps"), int)
                   else {}), **(dataset.info.get("task_kwargs") or {})}
    differ = differing_settings(recorded, env) if dataset.task == task and reads_rewards else {}
    if differ:  # a robot recording's episode length or success distance: evaluation would run another task
        # a list or mapping as JSON, which the override reads as YAML, quoted for the shell ([[-1.0, 1.0], ...])
        doubts.append(f"it was recorded with task settings "
                      f"{', '.join(f'{k}={setting_text(v)}' for k, (v, _) in differ.items())}, the env has "
                      f"{', '.join(f'{k}={setting_text(v)}' for k, (_, v) in differ.items())}; to run the task as it "
                      f"was recorded, add {shell(*(f'env.kwargs.{k}={setting_text(v)}' for k, (v, _) in differ.items()))}")
    if reads_rewards and dataset.info.get("rewards") == "absent":
        doubts.append("its source had no rewards (they are all 0), which this algorithm learns from: imitation "
                      "(bc, or the goal-conditioned algorithms, which relabel their own) learns from it")
    return doubts


def _spanning_the_run(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``agent.total_updates`` 0 (auto) set to this run's ``runner.total_steps``, so schedules
    (IQL's cosine) span it. The written config keeps 0: a resume that raises total_steps stretches the
    schedule with it, instead of going on at the finished schedule's zero learning rate."""
    if getattr(cfg.agent, "total_updates", 1) > 0:
        return cfg
    return dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, total_updates=cfg.runner.total_steps))


@dataclass
class OfflineProgress:
    """Where an offline run is; saved in every checkpoint."""

    iteration: int = 0
    updates: int = 0
    evaluation: dict[str, float] = field(default_factory=dict)  # the latest periodic one
    seconds: float = 0.0  # training time so far, metrics' ``time`` (0: a checkpoint from before it was kept)
    dataset: dict[str, Any] = field(default_factory=dict)  # what it trains on: dataset_fingerprint
    update_sums: dict[str, Any] = field(default_factory=dict)  # of an iteration a Ctrl+C cut short: iteration_sums
    run_id: str = field(default_factory=new_run_id)  # kept by resumes and in its export (runs.new_run_id)


def dataset_fingerprint(dataset: Dataset) -> dict[str, Any]:
    """What tells a dataset from another written under its name: its size and when it was written."""
    return {"episodes": dataset.num_episodes, "steps": dataset.num_steps, "created": dataset.info.get("created")}


def check_same_dataset(progress: Any, dataset: Dataset, run_dir: Path, reads_it: bool = True) -> None:
    """Refuse a resume whose dataset was replaced (re-recorded, overwritten) since the run trained on it: its
    restored normalizers and scales were fitted to the other data. A run that reads it no more (a fine-tune
    online without dataset rows) is told that it changes nothing. A checkpoint from before the fingerprint
    was kept takes the dataset's now."""
    now, then = dataset_fingerprint(dataset), progress.dataset
    if then and then != now:
        said = (f"dataset '{dataset.id}' is not the data {run_dir} trained on: it held {then['episodes']:,} episodes "
                f"and {then['steps']:,} steps (written {then['created']}), it now holds {now['episodes']:,} and "
                f"{now['steps']:,} (written {now['created']})")
        if reads_it:
            raise ConfigError(f"{said}; a resume goes on with the same data: put that dataset back, or train a new "
                              "run on this one")
        warnings.warn(f"{said}; the run reads it no more (online, agent.offline_ratio=0), so it changes nothing",
                      stacklevel=3)
        return
    progress.dataset = now


class UpdateLogger(RunLogger):
    """:class:`RunLogger` counting gradient updates (and updates/s) instead of env steps."""

    def __init__(self, run_dir: Path, **kwargs: Any) -> None:
        super().__init__(run_dir, counter="updates", unit="update", **kwargs)

    def log(self, updates: int, metrics: dict[str, float]) -> None:
        now, rate = self.clock(updates)
        record = {"updates": updates, "time": now, "updates_per_s": round(rate, 1),
                  **{k: float(v) for k, v in metrics.items()}}
        postfix = {"upd/s": f"{rate:,.0f}"}
        if "eval/normalized_score" in metrics:
            postfix["score"] = f"{100 * metrics['eval/normalized_score']:.1f}"
        elif "eval/return" in metrics:
            postfix["eval/return"] = f"{metrics['eval/return']:.1f}"
        self._emit(record, updates, updates, postfix)


class OfflineRunner:
    """Trains offline ``cfg.algo`` on ``cfg.dataset`` and leaves a self-contained run directory."""

    def __init__(self, cfg: TrainConfig, resume: Path | None = None, fresh_replay: bool = False) -> None:
        """``fresh_replay``: a fine-tune (a subclass) resumed online with an empty replay buffer."""
        from policies import AGENTS, agent_entry

        cfg = validated(cfg)
        if not getattr(agent_entry(cfg.algo)[1], "offline", False):
            takes = {kind: sorted(name for name, (_, cls) in AGENTS.items()
                                  if getattr(cls, kind, False) and (kind == "finetune" or not getattr(cls, "finetune", False)))
                     for kind in ("offline", "pretrains", "finetune")}
            raise ConfigError(f"dataset: algo '{cfg.algo}' learns online and takes no dataset; algorithms that do: "
                              f"offline {takes['offline']}, pretraining skills on it {takes['pretrains']}, "
                              f"offline-to-online {takes['finetune']}")
        if not cfg.dataset:
            raise ConfigError(f"dataset: algo '{cfg.algo}' trains offline; give dataset=<name> "
                              f"({no_dataset_hint(cfg.env.task)})")
        # (a fine-tune's 0 is meaningful: it only pretrains)
        if cfg.runner.total_steps < 1 and not getattr(agent_entry(cfg.algo)[1], "finetune", False):
            raise ConfigError(f"runner.total_steps: an offline run counts updates, at least 1; got "
                              f"{cfg.runner.total_steps} (it would export an untrained controller)")
        if resume:
            before = load_run_config(resume)
            raised = before.runner.total_steps != cfg.runner.total_steps
            # IQL's auto horizon, written as the old total_steps before it was kept as 0: stretch it too
            if raised and getattr(cfg.agent, "total_updates", None) == before.runner.total_steps:
                cfg.agent.total_updates = 0
            trained_on = before.dataset
            if dataset_id(trained_on) != dataset_id(cfg.dataset):
                raise ConfigError(f"dataset={cfg.dataset}: {resume} was trained on '{trained_on}'; a resume goes on with "
                                  "the same data (for another, train a new run; or one whose online phase starts from this run's export: "
                                  "jsrl with agent.guide=RUN)")
        self.cfg, self.fresh_replay = cfg, fresh_replay
        self.ctrl_c = CtrlC()
        self._rewind_to: Snapshot | None = None  # an iteration's start, for a second Ctrl+C (_rewind)
        self._agent_copy = StateCopy()  # the buffers _rewind_to's agent state lives in, reused every iteration
        self.run_logger: RunLogger | None = None  # while training (its seconds go into each checkpoint)
        self.deadline = float("inf")  # runner.max_minutes, from train()'s start (time.monotonic())
        self._lap = 0.0  # the last iteration's seconds, with its evaluation and checkpoint: the next one's expected length
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed)
        self.rows_unread = self._rows_unread(resume)
        try:
            self.dataset: Dataset | None = Dataset.load(cfg.dataset)  # an unknown name lists the known ones
        except DatasetError:
            if not self.rows_unread:
                raise
            self.dataset = None  # gone (deleted, or the run copied without it): its checkpoint kept what is read of it
        self.run_dir = Path(resume) if resume else None
        # the run's torch settings until train() returns (or close(), a failed build's too): as Runner
        self.callers_torch_settings = cfg.runner.apply_torch_settings()
        try:
            self._build(resume)
            # after every refusal the build can make (a fine-tune's replay and guide too)
            trains_on = bool(resume) and self._refuse_finished()
        except BaseException:
            self.close()
            raise
        # Only now, with everything built and restored: a config that fails leaves no run behind,
        # and a failed --resume does not rewrite the run's config.
        self.run_dir = self.run_dir or new_run_dir(cfg)
        write_config_or_undo(self, resume, trains_on)  # (eval.json set aside after it where the run trains on)

    def _build(self, resume: Path | None) -> None:
        """Eval env, agent and offline buffer from the dataset; ``resume``'s checkpoint restored."""
        from policies import agent_entry

        cfg = self.cfg
        self.env = make_env(cfg.env, num_envs=max(1, cfg.runner.eval_episodes), seed=cfg.seed + 10_000)
        agent_cls = agent_entry(cfg.algo)[1]
        reads_rewards = getattr(agent_cls, "reads_rewards", True)  # an agent of one's own: assume so
        if self.dataset is not None:  # (a class's own obs_groups: those it reads on any task, a GoalAgent's)
            check_dataset_fits(self.dataset, cfg.env.task, self.env, reads_rewards,
                               reads_groups=tuple(getattr(agent_cls, "obs_groups", None) or ()))
        self.agent = make_agent(_spanning_the_run(cfg), self.env)
        warn_if_goal_unread(cfg, self.agent, self.env)
        self.replay: ReplayBuffer | None = None
        if not self.rows_unread:  # (else what prepare fits, the normalizer, comes from the checkpoint alone)
            data = self.agent.prepare(self.dataset.transitions(self.env.device))
            self.replay = ReplayBuffer(int(data["reward"].shape[0]), self.env.device)
            self.replay.add(data)
        if self.dataset is not None and not self.rows_unread:  # once its rows are read: a truncated file's error
            # comes alone, not after this; a resume that reads none (offline_ratio 0) is not told of them
            if doubt := size_doubt(self.dataset.num_steps, self.dataset.num_episodes, cfg.agent.batch_size,
                                   from_robot(self.dataset.info)):
                warnings.warn(f"dataset '{self.dataset.id}': {doubt}", stacklevel=2)
        if resume:
            self._restore()
            if self.dataset is not None:
                check_same_dataset(self.progress, self.dataset, self.run_dir, self._reads_dataset_on())
        else:
            self.progress = OfflineProgress(dataset=dataset_fingerprint(self.dataset))

    def _rows_unread(self, resume: Path | None) -> bool:
        """Whether the run, resumed from ``resume``, reads none of the dataset's transitions (so they are not
        loaded, and the dataset may be gone); an offline run reads them."""
        return False

    def _reads_dataset_on(self) -> bool:
        """Whether the rest of the run reads the dataset (an offline run does)."""
        return True

    def _refuse_finished(self) -> bool:
        """:func:`~robolearn.runs.refuse_finished` by updates: whether the run trains on."""
        return refuse_finished(self.run_dir, "updates", self.progress.updates, self.cfg.runner.total_steps,
                               self.cfg.runner.eval_episodes)

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "latest.pt"

    def save(self) -> None:
        check_same_folder(self.run_dir, getattr(self, "folder", None))
        keep_seconds(self.progress, self.run_logger)
        progress = {**self.progress.__dict__, "rng": rng_state()}
        save_checkpoint(self.checkpoint_path, config=to_dict(self.cfg), agent=self.agent.state_dict(), progress=progress)

    def _restore(self) -> None:
        self.progress = OfflineProgress(**restore_agent(self.agent, load_checkpoint(self.checkpoint_path), to_dict(self.cfg)))

    # -- the loop ------------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """The controller on ``eval_episodes`` sim episodes: return and the dataset's normalized score."""
        episodes = self.cfg.runner.eval_episodes
        if episodes <= 0:
            return {}
        held = self.env.adaptation_state() if hasattr(self.env, "adaptation_state") else None
        controller = self.agent.controller().to(self.env.device)
        result = evaluate(controller, self.env, episodes, seed=self.cfg.seed + 10_000)
        if held is not None:  # automatic randomization: the evaluations' own success is not what moves its width
            self.env.load_adaptation_state(held)
        out = {"eval/return": result["return_mean"], "eval/return_std": result["return_std"]}
        if "success_rate" in result:
            out["eval/success_rate"] = result["success_rate"]
        return out | {f"eval/{k}": v for k, v in self._score(result).items()}

    def _score(self, evaluation: dict[str, Any]) -> dict[str, Any]:
        score = self.dataset.score(evaluation["return_mean"])
        return {} if score is None else {"normalized_score": score}

    @gives_torch_settings_back
    def train(self, stop: Callable[[dict[str, float]], bool] | None = None) -> RunResult:
        """Run ``runner.total_steps`` updates (or until ``stop(metrics)``); then export, evaluate, film.

        Ctrl+C saves a checkpoint that ``--resume`` continues from exactly: it is taken between
        updates (:class:`~robolearn.runner.CtrlC`), and the resume finishes the iteration it cut
        short; a second Ctrl+C, which may land inside an update, goes back to the iteration's start.
        NaN or inf in a loss stops the run with the last good checkpoint kept.
        """
        cfg = self.cfg
        logger = UpdateLogger(self.run_dir, total_steps=cfg.runner.total_steps, config=to_dict(cfg),
                              initial_steps=self.progress.updates, initial_seconds=self.progress.seconds,
                              **cfg.logging.logger_args(cfg.run_name))
        self.run_logger = logger
        self.start_deadline()
        result = RunResult(self.run_dir)
        with self.ctrl_c:
            try:
                self._offline_phase(cfg.runner.total_steps, logger, stop, {})
            except KeyboardInterrupt:
                self._rewind()
                return interrupted(self, result, logger)
            except TRAINING_FAILURES as err:
                raise stopped_by_nan(self, logger, err) from None
        self.save()
        logger.end_progress()
        finish_run(result, logger, cfg, self.agent.controller(), self.env.control_dt, self.progress,
                   annotate=lambda e: {"dataset": self.dataset.id, "updates": self.progress.updates, **self._score(e),
                                       **self.dataset.reference_scores()})
        logger.close()
        return result

    def start_deadline(self) -> None:
        """Start ``runner.max_minutes``'s clock (none when 0)."""
        self.deadline, self._lap = deadline_of(self.cfg.runner.max_minutes), 0.0
        if self.run_logger is not None:
            self.run_logger.set_deadline(self.deadline)  # the bar's ETA: the time left, where that comes first

    def out_of_time(self) -> bool:
        """Whether the next iteration, as long as the last, would end past ``runner.max_minutes``."""
        return out_of_time(self.deadline, self._lap)

    def _offline_phase(self, total: int, logger: RunLogger, stop: Callable[[dict[str, float]], bool] | None,
                       tags: dict[str, Any], ask_last: bool = True) -> bool:
        """Iterations of ``UPDATES_PER_ITERATION`` updates until ``total``: evaluated and checkpointed every
        ``runner.checkpoint_every``, logged every ``runner.log_every`` and at the end. ``stop`` sees each
        iteration's metrics (with ``tags`` and ``updates``), the last one's where ``ask_last`` (the run's end: as
        an online run's stop, it sees the last iteration, its evaluation included); returns whether it, or
        ``runner.max_minutes`` (before an iteration that would end past it), ended the phase before ``total``."""
        cfg = self.cfg
        while self.progress.updates < total:
            if self.out_of_time():
                return True
            start = time.perf_counter()
            self._rewind_to = Snapshot(self.progress, self.agent, self._agent_copy)
            left = iteration_rest(self.progress.updates, UPDATES_PER_ITERATION)
            metrics = self._iteration(min(left, total - self.progress.updates), logger)
            self._rewind_to = None
            self.progress.iteration += 1
            metrics["iteration_time"] = time.perf_counter() - start
            done = self.progress.updates >= total
            saving = self.progress.iteration % cfg.runner.checkpoint_every == 0 or done
            if saving:
                self.progress.evaluation = self.evaluate()
                metrics |= self.progress.evaluation
            # logged, then saved (as the online runner): a kill between the two had lost the row and its
            # evaluation for good; a row past the checkpoint is set aside on resume and done again
            if self.progress.iteration % cfg.runner.log_every == 0 or done:
                logger.log(self.progress.updates, metrics)
            if saving:
                self.save()
            if stop is not None and (ask_last or not done):
                if ask_stop(self, stop, {**tags, "updates": self.progress.updates, "iteration": self.progress.iteration,
                                         **metrics}) and not done:
                    return True
            self._lap = time.perf_counter() - start
        self.ctrl_c.check()  # one pressed during the last iteration
        return False

    def _iteration(self, count: int, logger: RunLogger | None = None) -> dict[str, float]:
        """``count`` updates on sampled minibatches, each counted in ``progress`` as it lands (a Ctrl+C
        is taken between two); their metrics averaged (one device sync at the end)."""
        sample = getattr(self.agent, "sample", self.replay.sample)
        with iteration_sums(self.progress) as sums:  # (with those of the updates before a Ctrl+C in it)
            for _ in range(count):
                self.ctrl_c.check()
                sums.add(self.agent.update(sample(self.cfg.agent.batch_size)))
                self.progress.updates += 1
                if logger is not None:
                    logger.advance(self.progress.updates)
        metrics = sums.means()  # each metric averaged over the updates that returned it
        check_metrics(metrics)
        return metrics

    def _rewind(self) -> None:
        """Before a Ctrl+C checkpoint: a first Ctrl+C stopped between updates, and progress counts exactly the
        updates the agent holds; a second one may have split an update, so go back to the iteration's start."""
        if self.ctrl_c.forced and self._rewind_to is not None:
            self.progress = self._rewind_to.restore(self.agent)
            self.rewound = True  # said by ``interrupted``: the resume redoes that iteration
        self._rewind_to = None

    def close(self) -> None:
        if hasattr(self, "env"):  # not when its construction failed
            self.env.close()
        give_torch_settings_back(self)
