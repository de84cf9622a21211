"""Offline-to-online in one run: pretrain on a dataset, then fine-tune in simulation.

    robolearn train configs/wsrl_hopper.yaml dataset=hopper-medium

Phase ``offline``: ``agent.pretrain_updates`` updates on the dataset, exactly as
:class:`~robolearn.offline_runner.OfflineRunner` (evaluation and checkpoint every
``runner.checkpoint_every`` x 1000 updates). At the boundary the pretrained controller is
exported to ``pretrained/`` and the agent switches to its online hyperparameters
(:meth:`policies.offline.wsrl.Finetune.go_online`).

Phase ``online``: ``runner.total_steps`` env steps counted from 0 on ``env.num_envs``
envs, into a fresh replay buffer. The first ``agent.warmup_steps`` are acted by the
frozen pretrained policy with no update (WSRL); then, once the buffer holds a batch's online
rows (as the authors' code waits), ``runner.utd_ratio`` updates per
env step on batches of ``agent.online_batch_size``, ``agent.offline_ratio`` of each
drawn from the dataset (0 drops the dataset when the phase starts, and a resume in the
online phase then neither loads it nor needs it: its checkpoint keeps what the phase reads
of it, the reference scores of the normalized score). With ``agent.guide``
a guide controller acts for the first h steps of each episode (JSRL,
:mod:`robolearn.jsrl_curriculum`). Evaluation and checkpoint (with ``replay.pt``) every
``runner.checkpoint_every`` x 1000 env steps.

``metrics.jsonl`` holds both phases, each line with ``phase``: offline lines count
``updates``, online lines ``env_steps`` (and ``online_updates``). Each phase
has its own progress bar. ``--resume`` continues in whichever phase the run stopped;
the end of the run is an online run's (export, eval.json, video).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robolearn.checkpoint import (load_checkpoint, load_replay, mark_resume_seam, refill_instead, restore_agent,
                                  rng_state, save_checkpoint, saved_num_envs)
from robolearn.config import ConfigError, TrainConfig, to_dict
from robolearn.data.dataset import normalized_score
from robolearn.evaluate import FiniteWatch, NonFiniteError, check_finite, warn_if_trained_elsewhere
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Obs
from robolearn.logger import RunLogger, keep_seconds
from robolearn.offline_runner import OfflineRunner, dataset_fingerprint
from robolearn.registry import make_env, stagger_episodes
from robolearn.runner import (OFF_POLICY_STEPS_PER_ITERATION, TRAINING_FAILURES, EpisodeStats, RunResult, ask_stop,
                              check_metrics, finish_run, gives_torch_settings_back, interrupted, iteration_rest,
                              iteration_sums, pay_update_debt, step_envs, stopped_by_nan)
from robolearn.runs import (check_same_folder, export_meta, new_run_id, refuse_finished, refuse_other_pretraining,
                            saved_progress)
from robolearn.shell import shell
from robolearn.storage import ReplayBuffer
from robolearn.jsrl_curriculum import HorizonCurriculum


def is_finetune(cfg: TrainConfig) -> bool:
    """Whether ``cfg.algo`` pretrains offline and fine-tunes online (``wsrl``, ``calql_finetune``, ``jsrl``)."""
    from policies import agent_entry

    return bool(getattr(agent_entry(cfg.algo)[1], "finetune", False))


@dataclass
class FinetuneProgress:
    """Where a run is in both phases; saved in every checkpoint."""

    phase: str = "offline"
    iteration: int = 0  # logged iterations of the current phase
    updates: int = 0  # offline updates
    evaluation: dict[str, float] = field(default_factory=dict)
    env_steps: int = 0  # online, from 0
    online_updates: int = 0
    update_debt: float = 0.0
    recent_returns: list[float] = field(default_factory=list)
    recent_success: list[float] = field(default_factory=list)
    jsrl: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # training time so far, metrics' ``time`` (0: a checkpoint from before it was kept)
    refill_until: int = 0  # --fresh-replay: no online updates before this env step, while the empty replay refills
    dataset: dict[str, Any] = field(default_factory=dict)  # what its offline phase trains on: dataset_fingerprint
    # what the online phase reads of the dataset (its id, reference_scores, whether its rows carry mc_return), for a
    # resume that reads none of its rows ({}: a checkpoint of before, whose resume loads the dataset)
    offline_data: dict[str, Any] = field(default_factory=dict)
    update_sums: dict[str, Any] = field(default_factory=dict)  # of an iteration a Ctrl+C cut short: iteration_sums
    env_adaptation: dict[str, Any] = field(default_factory=dict)  # the online env's automatic randomization width
    run_id: str = field(default_factory=new_run_id)  # kept by resumes and in its export (runs.new_run_id)


class PhaseLogger(RunLogger):
    """:class:`RunLogger` whose lines carry ``phase`` and count ``counter`` (updates or env steps);
    W&B steps continue across phases (online steps after the pretraining updates)."""

    def __init__(self, run_dir: Path, phase: str, counter: str, step_offset: int = 0, **kwargs: Any) -> None:
        unit = "update" if counter == "updates" else "step"
        super().__init__(run_dir, counter=counter, phase=phase, unit=unit, **kwargs)
        self.phase, self.counter, self.step_offset = phase, counter, step_offset
        self._bar.desc = phase

    def log(self, count: int, metrics: dict[str, float]) -> None:
        now, rate = self.clock(count)
        # the rate as other runs name it: env steps a second are PPO's and SAC's `fps`, updates an offline run's
        rate_name = "updates_per_s" if self.counter == "updates" else "fps"
        record = {"phase": self.phase, self.counter: count, "time": now, rate_name: round(rate, 1),
                  **{k: float(v) for k, v in metrics.items()}}
        postfix = {"upd/s" if self.counter == "updates" else "fps": f"{rate:,.0f}"}
        for key in ("eval/return", "return", "jsrl/h"):
            if key in metrics and np.isfinite(metrics[key]):
                postfix[key] = f"{metrics[key]:.1f}"
        self._emit(record, self.step_offset + count, count, postfix)


class FinetuneRunner(OfflineRunner):
    """Pretrains ``cfg.algo`` on ``cfg.dataset``, then fine-tunes it on ``cfg.env`` in the same run directory."""

    def _build(self, resume: Path | None) -> None:
        super()._build(resume)  # eval env, agent, offline buffer; _restore below
        cfg = self.cfg
        if not resume:
            self.progress = FinetuneProgress(dataset=dataset_fingerprint(self.dataset))
        else:  # its offline phase: as a skill run's pretraining
            refuse_other_pretraining(resume, cfg.agent.pretrain_updates, self.progress.updates,
                                     self.progress.phase == "online", "offline phase",
                                     "pretrain a new run with runner.total_steps=0")
        # Cal-QL: online rows need the column too
        self._mc_return = self.progress.offline_data["mc_return"] if self.rows_unread else "mc_return" in self.replay.data
        if self.dataset is not None:  # kept as the dataset is now, which scores the run (a resume's too)
            self.progress.offline_data = {"id": self.dataset.id, "reference_scores": self.dataset.reference_scores(),
                                          "mc_return": self._mc_return}
        agent_cfg = cfg.agent
        if 0 < cfg.runner.total_steps <= agent_cfg.warmup_steps:  # legitimate (the frozen policy collecting), rarely meant
            warnings.warn(f"agent.warmup_steps={agent_cfg.warmup_steps} covers all runner.total_steps="
                          f"{cfg.runner.total_steps}: the online phase will update nothing; lower it or raise total_steps",
                          stacklevel=2)
        if cfg.runner.total_steps > 0 and cfg.runner.utd_ratio == 0:  # (as the online runner says it)
            warnings.warn("runner.utd_ratio=0: the online phase makes no update (it only collects), so the controller "
                          "it exports is the pretrained one; give it updates per env step (1.0 is SAC's)", stacklevel=2)
        # Cal-QL fine-tuning keeps its regularizer online, and with it the bound: an online episode's rows get their
        # Monte-Carlo returns once it ends, as the paper's code does for each collected trajectory
        self._online_bound = self._mc_return and agent_cfg.online_cql_alpha > 0
        self.train_env = make_env(cfg.env, seed=cfg.seed)
        if self.progress.env_adaptation and hasattr(self.train_env, "load_adaptation_state"):  # as a resume of Runner
            self.train_env.load_adaptation_state(self.progress.env_adaptation)
        stagger_episodes(self.train_env, cfg.env, cfg.seed)  # said now if it cannot be; _finetune draws again
        self._finite = FiniteWatch(self.train_env.device)  # on a GPU, read once per iteration
        self.online = ReplayBuffer(max(1, min(agent_cfg.online_buffer_size, cfg.runner.total_steps)), self.env.device)
        self.curriculum: HorizonCurriculum | None = None
        self.guide: ExportedController | None = None
        if agent_cfg.guide and agent_cfg.guide != "pretrained":  # now, not after hours of pretraining
            self._load_guide(agent_cfg.guide)
        if self.progress.phase == "online":
            self._enter_online(resumed=True)

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self) -> None:
        """Checkpoint, never of online steps not yet verified finite."""
        check_same_folder(self.run_dir, getattr(self, "folder", None))
        self._finite.verify()
        if self.curriculum is not None:
            self.progress.jsrl = self.curriculum.state_dict()
        if hasattr(self.train_env, "adaptation_state"):
            self.progress.env_adaptation = self.train_env.adaptation_state()
        keep_seconds(self.progress, self.run_logger)
        progress = {**self.progress.__dict__, "rng": rng_state()}
        save_checkpoint(self.checkpoint_path, config=to_dict(self.cfg), agent=self.agent.state_dict(), progress=progress,
                        replay=self.online if self.progress.phase == "online" else None)

    def _rows_unread(self, resume: Path | None) -> bool:
        """A resume online whose batches draw no dataset rows (``agent.offline_ratio=0``), from a checkpoint that
        kept what the phase reads of the dataset (``offline_data``)."""
        if not resume or self.cfg.agent.offline_ratio > 0:
            return False
        saved = saved_progress(Path(resume))  # (unreadable: {}, and the restore says why)
        return saved.get("phase") == "online" and bool(saved.get("offline_data"))

    def _reads_dataset_on(self) -> bool:
        """Offline, and online where batches draw dataset rows (``agent.offline_ratio``)."""
        return self.progress.phase == "offline" or self.cfg.agent.offline_ratio > 0

    def _refuse_finished(self) -> bool:
        """Finished = online for ``runner.total_steps`` env steps (the offline phase counts updates apart). A run
        that ended early in its offline phase (a stop, runner.max_minutes) trains on: that end is set aside."""
        if self.progress.phase == "online":
            return refuse_finished(self.run_dir, "online env_steps", self.progress.env_steps,
                                   self.cfg.runner.total_steps, self.cfg.runner.eval_episodes)
        return True  # it trains on (the rest of the offline phase, then online)

    def _restore(self) -> None:
        payload = load_checkpoint(self.checkpoint_path)
        if payload["progress"].get("phase") == "online":
            self.agent.go_online()  # the online hyperparameters are attributes, not state
        self.progress = FinetuneProgress(**restore_agent(self.agent, payload, to_dict(self.cfg)))
        self._saved_num_envs = saved_num_envs(payload, self.cfg.env.num_envs)  # (self.env evaluates)

    def evaluate(self) -> dict[str, float]:
        """As an offline run's, online at the width automatic randomization has reached in training (as the run's
        end evaluates): the evaluation env's own had started at 0 and moved with its own episodes' success."""
        if self.progress.phase == "online" and hasattr(self.train_env, "adaptation_state"):
            self.env.load_adaptation_state({"width": self.train_env.adaptation_state()["width"], "outcomes": []})
        return super().evaluate()

    def _score(self, evaluation: dict[str, Any]) -> dict[str, Any]:
        """On the dataset's reference scores; where it is gone (``rows_unread``), on those the checkpoint kept."""
        if self.dataset is not None:
            return super()._score(evaluation)
        if not (kept := self.progress.offline_data["reference_scores"]):
            return {}
        return {"normalized_score": float(normalized_score(evaluation["return_mean"], kept))}

    # -- the phase boundary --------------------------------------------------------------------

    def _enter_online(self, resumed: bool = False) -> None:
        """Switch the agent online; drop the dataset unless batches draw from it; load the guide."""
        agent_cfg = self.cfg.agent
        if not resumed:
            export_controller(self.agent.controller(), self.run_dir / "pretrained",  # (the run, how far it had
                              extra=export_meta(self.run_dir, self.cfg.env, self.env.control_dt, self.progress))
            self.agent.go_online()
            # (sums a Ctrl+C left of an offline iteration, which a resume with fewer updates does not finish, are
            # no online line's)
            self.progress.phase, self.progress.iteration, self.progress.update_sums = "online", 0, {}
        elif self.fresh_replay:
            # online batches are agent.online_batch_size rows (agent.batch_size is the offline phase's)
            refill_instead(self.progress, max(agent_cfg.warmup_steps, agent_cfg.online_batch_size),
                           self.checkpoint_path.with_name("replay.pt"))
        else:
            load_replay(self.checkpoint_path.with_name("replay.pt"), self.online, self.progress.env_steps, self.env.device,
                        env=self.env)
            mark_resume_seam(self.online, self.agent, self._saved_num_envs, self.cfg.env.num_envs)
            if self._online_bound:
                self._settle_saved_rows(self._saved_num_envs)
        if agent_cfg.offline_ratio <= 0:
            self.replay = None  # WSRL: no offline data retained
        if agent_cfg.guide:
            self.guide = self.guide or self._load_guide(agent_cfg.guide)
            horizon = agent_cfg.jsrl_horizon or self.train_env.max_episode_steps
            self.curriculum = HorizonCurriculum(horizon, agent_cfg.jsrl_step, agent_cfg.jsrl_window,
                                                agent_cfg.jsrl_threshold, agent_cfg.jsrl_tolerance)
            if self.progress.jsrl:
                self.curriculum.load_state_dict(self.progress.jsrl)

    def _load_guide(self, guide: str) -> ExportedController:
        """The guide controller, checked against the task: it must read this env's observations; another task,
        control rate or task settings than it was trained with are said (as evaluate says them)."""
        path = self._guide_path(guide)
        controller = ExportedController(path)
        trained_on = controller.meta.get("task")
        if trained_on and trained_on != self.cfg.env.task:
            warnings.warn(f"agent.guide: {path} was trained on task '{trained_on}', this run is on "
                          f"'{self.cfg.env.task}'", stacklevel=3)
        else:
            warn_if_trained_elsewhere(controller, self.train_env)
        zeros = {name: torch.zeros(1, *space.shape) for name, space in self.train_env.observation_spec.items()}
        try:
            controller.act(zeros)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"agent.guide: {err}") from None
        controller.reset()
        self.guide = controller
        return controller

    def _guide_path(self, guide: str) -> Path:
        """``pretrained``, an exported controller file, its folder or a run directory -> the exported file: its
        ONNX one where there is one, which loads without running code (a run from elsewhere's controller.pt is
        code, as deploy's default says), else its TorchScript one."""
        path = self.run_dir / "pretrained" if guide == "pretrained" else Path(guide)
        if path.is_file():
            return path
        for name in ("controller.onnx", "controller.pt"):
            for candidate in (path / name, path / "export" / name):
                if candidate.is_file():
                    return candidate
        if guide == "pretrained":  # this run's own, gone (deleted, or the run copied without it): it had been told to
            # give a controller.pt, its folder or a run directory, of a setting that names none
            gone = "holds no controller.onnx or controller.pt" if path.is_dir() else "is missing"
            raise FileNotFoundError(f"agent.guide=pretrained: {path} {gone} (this run's controller as pretraining "
                                    "left it, exported at the switch to online); put it back, or guide with another "
                                    "controller: agent.guide=PATH")
        if (path / "checkpoints" / "latest.pt").is_file():  # a run stopped before its end exports nothing: it had
            # been told to give "a run directory", which it is
            raise FileNotFoundError(f"agent.guide: {path} is a run with no export yet (stopped before its end): export "
                                    f"its latest checkpoint with {shell('robolearn', 'export', path)}, or finish it")
        raise FileNotFoundError(f"agent.guide: no exported controller at {path} (give a controller.onnx or "
                                "controller.pt, its folder or a run directory)")

    # -- the loop ------------------------------------------------------------------------------

    @gives_torch_settings_back
    def train(self, stop: Callable[[dict[str, float]], bool] | None = None) -> RunResult:
        """Pretrain (if not done), fine-tune, then export, evaluate and film the fine-tuned controller.

        ``stop(metrics)`` is asked after every logged iteration of either phase (the offline phase's last
        excepted: the online phase follows, as a skill run's pretraining); true ends
        the run there (checkpoint saved, end of run as usual), as ``runner.max_minutes`` does
        before an iteration of either phase that would end past it. Ctrl+C saves a checkpoint
        that ``--resume`` continues from, in either phase.
        """
        cfg = self.cfg
        result = RunResult(self.run_dir)
        logger: PhaseLogger | None = None
        self.start_deadline()  # runner.max_minutes spans both phases
        with self.ctrl_c:
            try:
                stopped = False
                if self.progress.phase == "offline":
                    logger = self._logger("offline", "updates", cfg.agent.pretrain_updates, self.progress.updates, 0)
                    stopped = self._pretrain(logger, stop)
                if not stopped:
                    if logger is not None:
                        logger.end_progress()
                        logger.close()
                    logger = self._logger("online", "env_steps", cfg.runner.total_steps, self.progress.env_steps,
                                          cfg.agent.pretrain_updates)
                    self._finetune(logger, stop)
            except KeyboardInterrupt:
                self._rewind()
                try:
                    return interrupted(self, result, logger)
                except NonFiniteError as err:  # steps kept since the last verification (a GPU run) were not finite
                    raise stopped_by_nan(self, logger, err) from None
            except TRAINING_FAILURES as err:
                raise stopped_by_nan(self, logger, err) from None
        self.save()
        logger.end_progress()
        finish_run(result, logger, cfg, self.agent.controller(), self.env.control_dt, self.progress,
                   annotate=lambda e: {"dataset": self.progress.offline_data["id"],
                                       "pretrain_updates": self.progress.updates, "online_steps": self.progress.env_steps,
                                       **self._score(e), **self.progress.offline_data["reference_scores"]},
                   adaptation=self.progress.env_adaptation)
        logger.close()
        return result

    def _logger(self, phase: str, counter: str, total: int, initial: int, offset: int) -> PhaseLogger:
        cfg = self.cfg
        self.run_logger = PhaseLogger(self.run_dir, phase, counter, offset, total_steps=total, config=to_dict(cfg),
                                      initial_steps=initial, initial_seconds=self.progress.seconds,
                                      **cfg.logging.logger_args(cfg.run_name))
        self.run_logger.set_deadline(self.deadline)  # runner.max_minutes spans both phases: each bar's ETA stops there
        return self.run_logger

    def _pretrain(self, logger: PhaseLogger, stop: Callable[[dict[str, float]], bool] | None) -> bool:
        """The offline phase; enters the online one at its end. Returns whether ``stop`` ended the run."""
        if self._offline_phase(self.cfg.agent.pretrain_updates, logger, stop, {"phase": "offline"}, ask_last=False):
            return True
        self._enter_online()
        self.save()  # the boundary: a resume from here starts the online phase
        return False

    def _finetune(self, logger: PhaseLogger, stop: Callable[[dict[str, float]], bool] | None) -> None:
        """The online phase."""
        cfg = self.cfg
        env = self.train_env
        self._stats = stats = EpisodeStats(env.num_envs, self.progress.recent_returns, env.device,
                                           self.progress.recent_success)
        self._episode_step = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)  # envs start fresh episodes
        self._episode_return = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
        if self.curriculum is not None:  # the guide's horizon each env's episode began with
            self._episode_h = torch.full((env.num_envs,), self.curriculum.h, dtype=torch.long, device=env.device)
        # Cal-QL online: the steps of each env's unfinished episode (rows counted from here) and the steps not read yet
        self._open_episodes: list[list[tuple[int, float]]] = [[] for _ in range(env.num_envs)]
        self._unsettled: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._rows_settled, self._first_position = 0, self.online.position
        obs = env.reset(seed=cfg.seed + 1_000_000 + self.progress.iteration)
        stagger_episodes(env, cfg.env, cfg.seed + 1_000_000 + self.progress.iteration,
                         resumed=self.progress.env_steps > 0)  # (a resume into the online phase)
        check_finite("observation", obs)
        self._lap = 0.0  # an online iteration is not as long as a pretraining one
        while self.progress.env_steps < cfg.runner.total_steps and not self.out_of_time():
            start = time.perf_counter()
            obs, metrics = self._online_iteration(obs, stats, logger)
            self.progress.iteration += 1
            stats.keep(self.progress)
            metrics = {**stats.metrics(), **metrics, "online_updates": self.progress.online_updates,
                       "iteration_time": time.perf_counter() - start}
            if self.curriculum is not None:
                metrics["jsrl/h"] = self.curriculum.h
            last = self.progress.env_steps >= cfg.runner.total_steps
            saving = self.progress.iteration % cfg.runner.checkpoint_every == 0 or last
            if saving:
                self.progress.evaluation = self.evaluate()
                metrics |= self.progress.evaluation
            if self.progress.iteration % cfg.runner.log_every == 0 or last:  # logged, then saved (see the offline
                logger.log(self.progress.env_steps, metrics)  # phase); the last too: `list` reads how far a run got
            if saving:
                self.save()
            if stop is not None and ask_stop(self, stop, {"phase": "online", "env_steps": self.progress.env_steps,
                                                         "iteration": self.progress.iteration, **metrics}):
                return
            self._lap = time.perf_counter() - start
        self.ctrl_c.check()  # one pressed during the last iteration

    def _rewind(self) -> None:
        """Offline: as :meth:`OfflineRunner._rewind`. Online, Ctrl+C is taken between env steps and updates,
        which the replay buffer and the agent hold, so nothing goes back (a second one that splits an update
        is not undone, as in :class:`~robolearn.runner.Runner`'s off-policy loop); the returns of the episodes
        that ended in the cut-short iteration are kept."""
        super()._rewind()
        if self.progress.phase == "online" and getattr(self, "_stats", None) is not None:
            self._stats.keep(self.progress)

    def _online_iteration(self, obs: Obs, stats: EpisodeStats, logger: RunLogger) -> tuple[Obs, dict[str, float]]:
        """``OFF_POLICY_STEPS_PER_ITERATION`` env steps, with updates owed under the UTD ratio after warmup."""
        cfg, env = self.cfg, self.train_env
        left = iteration_rest(self.progress.env_steps, max(1, OFF_POLICY_STEPS_PER_ITERATION // env.num_envs) * env.num_envs)
        with iteration_sums(self.progress) as sums:  # tensors stay on the device until the end
            for _ in range(-(-left // env.num_envs)):
                if self.progress.env_steps >= cfg.runner.total_steps:
                    break
                self.ctrl_c.check()  # between steps: env steps, replay, updates and RNG agree
                next_obs, transition = step_envs(env, self.agent, obs, self._act(obs)["action"], stats, self._finite)
                done = transition["terminated"] | transition["truncated"]
                self._track_episodes(transition["reward"], done)
                if self.guide is not None:  # a recurrent, chunked or skill guide starts each episode afresh
                    self.guide.reset(done)
                if self._mc_return:  # unknown until the episode ends (-inf: plain CQL for that row until then)
                    transition["mc_return"] = torch.full_like(transition["reward"], float("-inf"))
                self.online.add(transition)
                if self._online_bound:
                    self._unsettled.append((transition["reward"], done))
                obs = next_obs
                self.progress.env_steps += env.num_envs
                logger.advance(self.progress.env_steps)
                if (self.progress.env_steps <= cfg.agent.warmup_steps
                        or self.progress.env_steps < self.progress.refill_until):
                    continue  # WSRL warmup (the frozen pretrained policy acts) or a refill: nothing is updated
                if self.online.size < min(self._online_rows(), self.online.capacity):
                    continue  # as WSRL's and Cal-QL's code: no update before the buffer holds a batch's online rows
                pay_update_debt(self.progress, cfg.runner.utd_ratio * env.num_envs, self._update, sums, self.ctrl_c)
        self._finite.verify()  # its updates' losses would be NaN too: the checkpoint before stays the last good one
        self._settle_mc_returns()
        metrics = sums.means()
        check_metrics(metrics)
        return obs, metrics

    def _settle_mc_returns(self) -> None:
        """Cal-QL online: write the discounted Monte-Carlo return (the dataset's rule: ``reward_scale``, ``gamma``,
        no bootstrap at the episode's end) into the replay rows of every episode that ended since the last call,
        read from the device once. Rows the ring has overwritten since are skipped."""
        if not self._unsettled:
            return
        rewards = torch.stack([r for r, _ in self._unsettled]).double().cpu().tolist()
        dones = torch.stack([d for _, d in self._unsettled]).cpu().tolist()
        self._unsettled = []
        envs, cfg, capacity = len(rewards[0]), self.cfg.agent, self.online.capacity
        base = self._rows_settled
        self._rows_settled += len(rewards) * envs
        rows, values = [], []
        for e in range(envs):
            for t in range(len(rewards)):
                self._open_episodes[e].append((base + t * envs + e, rewards[t][e]))
                if dones[t][e]:
                    episode, self._open_episodes[e], running = self._open_episodes[e], [], 0.0
                    for row, reward in reversed(episode):
                        running = reward * cfg.reward_scale + cfg.gamma * running
                        if row >= self._rows_settled - capacity:  # still in the ring
                            rows.append(row)
                            values.append(running)
        if rows:
            self._write_mc_returns((torch.tensor(rows) + self._first_position) % capacity, values)

    def _write_mc_returns(self, index: torch.Tensor, values: list[float]) -> None:
        """Replay rows ``index`` of the online buffer get their Monte-Carlo returns ``values``."""
        column = self.online.data["mc_return"]
        column[index.to(column.device)] = torch.tensor(values, dtype=column.dtype, device=column.device)

    def _settle_saved_rows(self, num_envs: int) -> None:
        """Cal-QL online, at a resume: the saved rows still at -inf get their Monte-Carlo returns (the rule of
        :meth:`_settle_mc_returns`): those of the episodes that ended in an iteration a Ctrl+C cut short (settled
        at an iteration's end), and those of each env's episode that the resume's seam ends. They are each env's
        newest rows, back to its last settled one (``num_envs`` rows a step, the newest step's last env's last)."""
        replay, cfg = self.online, self.cfg.agent
        if replay.data is None or replay.size == 0:
            return
        column, device = replay.data["mc_return"], replay.data["reward"].device
        newest_first = (replay.position - 1 - torch.arange(replay.size, device=device)) % replay.capacity
        unset = torch.isinf(column[newest_first])
        # steps x envs, newest step first: each env's unset rows lead its column; read the steps that hold them all
        steps = -(-replay.size // num_envs)
        grid = torch.cat([unset, unset.new_zeros(steps * num_envs - replay.size)]).view(steps, num_envs)
        depth = int(grid.long().cumprod(0).sum(0).max()) * num_envs
        if depth == 0:
            return
        index = newest_first[:depth]
        rewards = replay.data["reward"][index].double().tolist()  # one read each
        ends = (replay.data["terminated"] | replay.data["truncated"])[index].tolist()
        unset_rows = unset[:depth].tolist()
        rows, values = [], []
        for env in range(num_envs):
            running = 0.0
            for j in range(env, depth, num_envs):  # this env's rows, newest first
                if not unset_rows[j]:
                    break
                running = rewards[j] * cfg.reward_scale + cfg.gamma * (0.0 if ends[j] else running)
                rows.append(j)
                values.append(running)
        self._write_mc_returns(index[torch.tensor(rows, device=device)], values)

    def _update(self) -> dict[str, Any]:
        """One online update, counted as it is made (a Ctrl+C may stop the next)."""
        metrics = self.agent.update(self._batch())
        self.progress.online_updates += 1
        return metrics

    def _act(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The learner's exploring action, or the guide's for envs within the first h steps (JSRL)."""
        out = self.agent.act(obs, explore=True)
        if self.curriculum is not None and self.curriculum.h > 0:
            guided = self.curriculum.guided(self._episode_step)
            guide_action = self.guide.act(obs).to(out["action"].device)
            out = {"action": torch.where(guided.unsqueeze(-1), guide_action, out["action"])}
        return out

    def _track_episodes(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Per-env episode steps and returns, for JSRL's curriculum, which judges ``h`` by the episodes begun at it."""
        self._episode_step += 1
        self._episode_return += reward.double()
        if self.curriculum is not None:  # only JSRL reads finished returns on the host (a sync on a GPU)
            for value, horizon in zip(self._episode_return[done].tolist(), self._episode_h[done].tolist()):
                self.curriculum.episode_done(value, horizon)
            self._episode_h.masked_fill_(done, self.curriculum.h)
        self._episode_return.masked_fill_(done, 0.0)
        self._episode_step.masked_fill_(done, 0)

    def _online_rows(self) -> int:
        """The rows of an online batch drawn from the online buffer (the rest, ``offline_ratio``, from the dataset)."""
        size = self.cfg.agent.online_batch_size
        return size - (int(round(self.cfg.agent.offline_ratio * size)) if self.replay is not None else 0)

    def _batch(self) -> dict[str, Any]:
        """An online batch; ``offline_ratio`` of its rows from the dataset while it is kept."""
        size = self.cfg.agent.online_batch_size
        n_online = self._online_rows()
        n_offline = size - n_online
        online = self.online.sample(n_online)
        if n_offline == 0:
            return online
        offline = self.replay.sample(n_offline)
        return _cat(online, {k: offline[k] for k in online})

    def close(self) -> None:
        super().close()
        if hasattr(self, "train_env"):  # not when its construction failed
            self.train_env.close()


def _cat(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {k: _cat(v, b[k]) if isinstance(v, dict) else torch.cat([v, b[k].to(v.dtype)]) for k, v in a.items()}
