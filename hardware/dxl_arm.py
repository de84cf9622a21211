"""The 4-joint Dynamixel arm (``sims/assets/dxl_arm.xml``) as a Robot doing the arm-reach task.

Its observation, reward and success are those of :class:`sims.tasks.arm_reach.ArmReach`,
built by the same functions from the servos' positions and velocities and a
target the robot samples itself (or one you fix), so a controller trained on
``task=arm_reach`` deploys unchanged. The link is a :class:`DynamixelBus`
(Protocol 2.0 through the vendor SDK): one sync read and one sync write per
control step. Bus errors map onto the Robot's contract: a timeout or garbled
reply after the bus's retries is a transient failure (the watchdog decides when
that has lasted too long), a lost port is :class:`~hardware.safety.ConnectionLost`,
and a hardware alert stops the run with the servo's own error, after the servos
still working have parked (an alert of the servo's Shutdown kinds, such as overload
or overheating, has cut its torque).

Four times a second (``SERVO_CHECK_S``) the arm asks the servos whether their
torque is still on (one 1-byte sync read): one that rebooted (a power dip) went
limp. After a gap on the bus long enough for the servos' own watchdog to fire, it
also asks whether it did (such a servo ignores goals). Either stops the run
(:class:`~hardware.safety.ServosStopped`): the servos are re-armed where they
stand and the arm parks, rather than going on against a limp or frozen joint.

The task's settings (episode length, goal-step limit, success distance, reward
weights) come from the ``task`` it is given, which deploy builds from what the
export records (``controller.json``'s ``task_kwargs``). A ``max_goal_step`` below ``safety.max_step`` tightens the safety
layer's jump limit to it: the robot never allows larger goal steps than the
controller was trained under. A fixed ``target`` must lie in the range the task
samples targets from (``sims.tasks.arm_reach.TARGET_RANGE``).

A robot config that names a ``control_dt`` must agree with the task's
(``frame_skip`` x 2 ms), or the arm is refused.

The safety settings are the ``safety`` given, else the robot config's ``safety:``
section, else :class:`~hardware.safety.SafetyConfig`'s defaults. The config's motors
must drive the MJCF's actuated joints in actuator order (the order of the
observation and actions the controller was trained on), or the arm is refused.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from hardware.dynamixel.bus import DynamixelBus
from hardware.dynamixel.calibration import Calibration, RobotConfig
from hardware.dynamixel.errors import (CommTimeoutError, DynamixelError, HardwareAlertError, NotConnectedError,
                                       PacketError, hardware_status_text)
from hardware.robot import Robot
from hardware.safety import ConnectionLost, EmergencyStop, SafetyConfig, ServosStopped
from robolearn.interfaces import Obs
from sims.tasks.arm_reach import (ArmReach, check_target, fingertip_position, reach_observation, reach_rewards,
                                   sample_targets)

REPO = Path(__file__).resolve().parent.parent
SERVO_CHECK_S = 0.25  # how often the servos are asked whether their torque is still on (one 1-byte sync read)

class DynamixelArm(Robot):
    """``config``'s servos on ``port`` (default: the config's), reaching targets. ``config``: a ``RobotConfig``, or as
    ``deploy`` takes it, a name in ``configs/robots/`` or a YAML path."""

    def __init__(self, config: RobotConfig | str | Path, *, port: str | Path | None = None,
                 safety: SafetyConfig | None = None, task: ArmReach | None = None,
                 target: tuple[float, float, float] | None = None, retries: int = 3) -> None:
        if isinstance(config, (str, Path)):  # ('dxl_arm' had failed as "'str' object has no attribute 'calibration'")
            config = load_robot_config(config)
        if isinstance(port, os.PathLike):  # Path("/dev/ttyUSB0"): it had failed as "'PosixPath' has no 'strip'"
            port = os.fspath(port)
        if port is not None and not port.strip():  # `--port ""`: said, not the config's port used instead
            raise ValueError("--port is empty: give the serial port (/dev/ttyUSB0, /dev/pts/N), or leave it out to use "
                             "the robot config's")
        self.config, self.port, self.port_from_config = config, port or config.port, port is None
        if not self.port.strip():  # `port: ""` in the YAML: it had been "cannot open : ... No such file or directory: ''"
            raise ValueError("the robot config's port is empty: set it to the serial port (/dev/ttyUSB0), or give "
                             "--port (`robolearn emulate dynamixel` prints an emulated arm's)")
        self.task = task or ArmReach()
        calibration = config.calibration
        check_joint_order(calibration.joints, config.model_xml)
        check_joint_limits(calibration, config.model_xml)
        if len(calibration.ids) != 4:
            raise ValueError(f"the arm-reach task needs 4 joints, the robot config has {len(calibration.ids)}")
        if target is not None:
            check_target(target)
        self.fixed_target = None if target is None else torch.tensor(target, dtype=torch.float64)
        safety = safety_settings(config, safety)
        top = min(m.velocity_limit if m.max_speed is None else m.max_speed for m in config.calibration.motors)
        if safety.ramp_speed > top:  # faster than the servos follow: the ramp's waypoints would run ahead of the
            raise ValueError(f"safety.ramp_speed {safety.ramp_speed:g} rad/s is above what the servos move at "  # arm
                             f"(max_speed, else velocity_limit: {top:g} rad/s): ramps to a pose would run ahead of the "
                             f"arm and parks fall short; give at most {top:g}")
        if self.task.max_goal_step < safety.max_step:  # never allow larger goal steps than training did
            safety = dataclasses.replace(safety, max_step=self.task.max_goal_step)
        elif self.task.max_goal_step > safety.max_step:
            warnings.warn(f"the task was trained with goal steps up to {self.task.max_goal_step} rad, "
                          f"safety.max_step limits the robot to {safety.max_step} rad: expect jump_limit events",
                          stacklevel=2)
        self.target = torch.zeros(3, dtype=torch.float64)
        # The servos' own bus watchdog is the last line of defence (this process hung or died):
        # it fires when the host has been silent as long as the software watchdog takes to stop.
        # Shorter, and a slow first controller call would trip it while all is well (a tripped
        # servo ignores goals until torque is re-enabled).
        stop_after_s = safety.stop_after_s
        self.bus = DynamixelBus(self.port, calibration, baudrate=config.baudrate, retries=retries,
                                watchdog_ms=min(2540, round(1000 * stop_after_s)))
        self._left_limp: set[int] = set()
        control_dt = self.task.frame_skip * 0.002  # the MJCF's timestep: train and deploy at one rate
        if config.control_dt is not None and abs(config.control_dt - control_dt) > 1e-9:
            raise ValueError(f"the robot config's control_dt is {config.control_dt} s, but the task runs at "
                             f"{control_dt:g} s (frame_skip {self.task.frame_skip}): deploy a controller trained at "
                             "the config's rate, or change its control_dt")
        super().__init__(joint_low=calibration.min_positions, joint_high=calibration.max_positions,
                         home=np.zeros(4), control_dt=control_dt, max_episode_steps=self.task.max_episode_steps,
                         safety=safety, joint_names=calibration.joints)
        # "policy" is what controllers read; "joint_state" (q, qd) lets recordings replay on the robot.
        self.observation_spec = {"policy": _box(14), "joint_state": _box(8)}

    # ---- link ----------------------------------------------------------------

    def _connect(self) -> None:
        try:
            self.bus.connect()
        except NotConnectedError as err:
            if self.port_from_config:  # the port nobody typed: say where it came from and the ways on
                err.args = (f"{err} (the robot config's port; --port names another, and `robolearn emulate "
                            "dynamixel` serves an emulated arm on one)",)
            raise
        self._heard_at = self._checked_at = time.monotonic()
        self._left_limp = set()  # servos a re-arm left limp outside their limits: not asked about again

    def _check_servos(self, quiet_s: float, q: np.ndarray, gap: bool) -> bool:
        """Ask whether every servo still follows goals: one with torque off rebooted (a power dip) or shut down,
        and after a ``gap`` (``quiet_s``, the time since the last state read, was long enough: the bus or this
        process stalled) one whose bus watchdog fired ignores goals; either way the run would go on against a
        limp or frozen joint. Re-arm them where they stand (``enable_torque(True)``: goals taken again), take that
        pose as the last command, and fault the robot (:class:`~hardware.safety.ServosStopped`: the run stops and
        parks). Within the park of a stop (``parking``) the same holds (a tripped servo would ignore every
        waypoint); once stopped otherwise, torque is off on purpose and stays so. Returns whether the question was
        answered (False: ask again on the next read)."""
        if isinstance(self.stopped, EmergencyStop) or (self.stopped is not None and not self.parking) \
                or not self.connected:
            return True
        try:
            # not re-armed: those that cut their own torque (the run's fault already), and those a re-arm left limp
            # outside their limits (asked again, each check would re-arm the others anew and restart the park)
            kept_off = set(self.bus.alerted) | self._left_limp
            limp = [i for i in self.bus.torque_off() if i not in kept_off]
            tripped = [i for i in self.bus.watchdog_tripped() if i not in kept_off] if gap else []
            left = []  # limp outside their limits: torque on would snap them in; the others are re-armed
            if (limp or tripped) and not isinstance(self.stopped, EmergencyStop):  # (a Ctrl+\ during the reads)
                left = self.bus.enable_torque(True, skip=kept_off, leave_outside=True)
                self._left_limp.update(left)
        except NotConnectedError as err:
            raise ConnectionLost(str(err)) from err
        except (CommTimeoutError, PacketError):
            return False  # not answering yet
        except DynamixelError as err:  # answered with an error: the servos cannot be trusted to follow goals
            self.fault = self.fault or ServosStopped(f"the servos' state could not be checked or re-armed ({err}); "
                                                     "stopped")
            return True
        if limp or tripped:
            self.safety.start(q)
            self.rearms += 1
            self.safety.events["servo_watchdog" if tripped else "servo_torque_off"] += 1
            why = []
            if tripped:
                why.append(f"their bus watchdog fired (ids {tripped}): nothing reached them for about {quiet_s:.2f} s "
                           f"(the bus or this process stalled; their window is safety.stop_after_s, "
                           f"{self.bus.watchdog_ms} ms), so they ignored goals")
            if limp:
                why.append(f"servos {limp} had turned their torque off (rebooted after a power dip, or another "
                           "program turned it off), so they went limp")
            rearmed = "re-armed where they stood, to park" + (
                f"; servos {left} were left limp: they had fallen outside their limits, and torque on would have "
                "snapped them in at full speed" if left else "")
            self.fault = self.fault or ServosStopped(f"the servos stopped following goals: {'; '.join(why)}; {rearmed}")
        return True

    def _disconnect(self) -> None:
        self.bus.close()

    def _refuse_outside_limits(self, q: np.ndarray) -> None:
        """The bus judged this at connect, servo by servo: a limp joint outside its limits is refused, one that
        holds torque there (sagged past it under load; an arm a killed run left holding) is no snap, and kept."""

    def _read(self) -> tuple[np.ndarray, np.ndarray] | None:
        try:
            state = self.bus.read_state(allow_alerts=True)
        except CommTimeoutError as err:
            if err.late_ms is not None:  # (said by a park that reads nothing: a slow line, not a silent bus)
                self.read_failure = f"late replies, {err.late_ms:.0f} ms after the request: past the bus's timeout"
            return None  # transient: the bus already retried; the watchdog judges how long this lasts
        except PacketError as err:  # (as transient) replies came, but garbled or refused: no silent bus
            self.read_failure = (f"replies refused (status error 0x{err.error:02x})" if err.error else
                                 "garbled replies, failing their checksum or length check")
            return None
        except NotConnectedError as err:
            raise ConnectionLost(str(err)) from err
        if self.bus.alerted and self.fault is None:  # the run stops; the others park before torque goes off
            servo, status = next(iter(self.bus.alerted.items()))
            self.fault = HardwareAlertError(servo, status)
            others = [f"servo {i} ({hardware_status_text(bits)})" for i, bits in self.bus.alerted.items() if i != servo]
            self.fault.args = (f"{self.fault}" + (f"; also {', '.join(others)}" if others else ""),)
        now = time.monotonic()
        quiet_s = now - self._heard_at
        # a gap long enough that the servos' watchdog may have fired, or the regular check: asked, and asked
        # again on the next read if unanswered
        gap = quiet_s >= self.bus.watchdog_ms / 2000
        due = gap or now - self._checked_at >= SERVO_CHECK_S
        if not due or self._check_servos(quiet_s, state[0], gap):
            self._heard_at = now
            if due:
                self._checked_at = now
        return state

    def _write(self, goal: np.ndarray) -> None:
        try:
            self.bus.write_goal(goal)
        except NotConnectedError as err:
            raise ConnectionLost(str(err)) from err

    def _set_torque(self, on: bool) -> None:
        try:
            self.bus.enable_torque(on)  # (off: an alert-only status is a write done, not raised)
        except NotConnectedError as err:
            raise ConnectionLost(str(err)) from err

    # ---- task ------------------------------------------------------------------

    def _begin_episode(self, rng: np.random.Generator) -> np.ndarray:
        if self.fixed_target is not None:
            self.target = self.fixed_target
        else:
            generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
            self.target = sample_targets(1, generator)[0]
        return self.home

    def _observe(self, q: np.ndarray, qd: np.ndarray) -> Obs:
        q_t, qd_t = torch.as_tensor(q).unsqueeze(0), torch.as_tensor(qd).unsqueeze(0)
        return {**reach_observation(q_t, qd_t, self.target.unsqueeze(0)),
                "joint_state": torch.cat([q_t, qd_t], dim=1).float()}

    def _actuate(self, action: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """As :meth:`ArmReach.actuate`: each goal moves at most ``max_goal_step`` from the previous one."""
        step = self.task.max_goal_step
        return previous + np.clip(action - previous, -step, step)

    def _score(self, q: np.ndarray, qd: np.ndarray, action: np.ndarray, previous: np.ndarray) -> tuple[float, bool]:
        q_t, qd_t = torch.as_tensor(q), torch.as_tensor(qd)
        change = torch.as_tensor(action - previous)
        reward = sum(term for term in reach_rewards(q_t, qd_t, self.target, change, self.task).values())
        return float(reward), self._distance(q) < self.task.success_distance

    def _metrics(self, q: np.ndarray, qd: np.ndarray) -> dict[str, float]:
        return {"distance_m": self._distance(q)}

    def _distance(self, q: np.ndarray) -> float:
        """The fingertip's distance to the target (m): success is being within success_distance at the end."""
        return float((fingertip_position(torch.as_tensor(q)) - self.target).norm())


def safety_settings(config: RobotConfig, safety: SafetyConfig | None = None) -> SafetyConfig:
    """The safety settings an arm runs with: ``safety`` if given, else the robot config's ``safety:``,
    else :class:`~hardware.safety.SafetyConfig`'s defaults."""
    if safety is not None:
        return safety
    return config.safety if config.safety is not None else SafetyConfig()


def _box(size: int):
    from gymnasium import spaces

    return spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)


def model_path(model_xml: str | Path) -> Path:
    """A robot config's ``model_xml``: as given, else from the repository root (as the emulator reads it)."""
    path = Path(model_xml)
    if not path.is_absolute() and not path.exists():
        path = REPO / path
    if not path.is_file():
        raise FileNotFoundError(f"model_xml {model_xml}: no such file (relative paths are from the repository root)")
    return path


def actuated_joints(model_xml: str | Path) -> list[str]:
    """The joints the MJCF's actuators drive, in actuator order: the order of the joint vectors
    (observation, actions) a controller trained on that model reads and writes."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(model_path(model_xml)))
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, int(model.actuator_trnid[a, 0]))
            for a in range(model.nu) if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT]


def check_joint_order(joints: list[str], model_xml: str | Path) -> None:
    """Refuse motors that do not drive exactly the model's actuated joints in its actuator order:
    swapped motors or a misspelt joint would run the controller on the wrong joints."""
    expected = actuated_joints(model_xml)
    if list(joints) != expected:
        raise ValueError(f"the robot config's motors drive joints {list(joints)}, but {model_xml} actuates "
                         f"{expected}: list one motor per actuated joint, in that order")


def actuator_ranges(model_xml: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The MJCF's joint actuators' control ranges, in actuator order: the action box simulation clips a
    controller's goals to (unbounded where an actuator sets none)."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(model_path(model_xml)))
    joint = [a for a in range(model.nu) if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT]
    limited = model.actuator_ctrllimited[joint].astype(bool)
    low = np.where(limited, model.actuator_ctrlrange[joint, 0], -np.inf)
    high = np.where(limited, model.actuator_ctrlrange[joint, 1], np.inf)
    return low, high


def check_joint_limits(calibration: Calibration, model_xml: str | Path) -> None:
    """Refuse a motor whose limits are wider than its actuator's range in the model: the controller trained with
    its goals clipped to that range, and the robot, which clips to the config's limits, would send the arm where
    training never went."""
    low, high = actuator_ranges(model_xml)
    for motor, lo, hi in zip(calibration.motors, low, high):
        if motor.min_position < lo - 1e-9 or motor.max_position > hi + 1e-9:
            raise ValueError(f"motor {motor.id} ({motor.joint}): its limits [{motor.min_position:g}, "
                             f"{motor.max_position:g}] are wider than {model_xml}'s range for {motor.joint}, "
                             f"[{lo:g}, {hi:g}], which simulation clipped the controller's goals to: the arm would "
                             "go where training never went; set min_position and max_position within it")


def robot_config_path(name: str | Path) -> Path:
    """A robot YAML by path, or by name from ``configs/robots/``."""
    if not isinstance(name, (str, os.PathLike)):  # (deploy(run, RobotConfig(...)) had been pathlib's TypeError)
        saved = "; write it to a file (RobotConfig.save(path)) and give that path" if isinstance(name, RobotConfig) \
            else ""
        raise TypeError(f"a robot config is given as a name in configs/robots/ or a YAML path, got "
                        f"{type(name).__name__}{saved}")
    path = Path(name)
    for candidate in (path, REPO / "configs" / "robots" / path, REPO / "configs" / "robots" / f"{path}.yaml"):
        if candidate.is_file():
            return candidate
    known = ", ".join(sorted(p.stem for p in (REPO / "configs" / "robots").glob("*.yaml")))
    if len(path.parts) > 1 or path.suffix in (".yaml", ".yml"):  # a path, not a name: it is the file that is missing
        raise FileNotFoundError(f"no robot config '{name}': no such file (from {Path.cwd()}); give a YAML path that "
                                f"exists, or a name in configs/robots/: {known}")
    raise FileNotFoundError(f"no robot config '{name}': give a YAML path or one of: {known}")


def load_robot_config(name: str | Path) -> RobotConfig:
    return RobotConfig.load(robot_config_path(name))
