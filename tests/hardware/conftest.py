"""Fixtures for the Dynamixel tests: an emulated arm on a pty, and the real SDK talking to it.

Emulators run in lockstep (physics advances per goal write) so the tests are
deterministic, and every emulator is stopped, its thread joined, at test end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hardware.dynamixel.calibration import Calibration, RobotConfig
from hardware.dynamixel.emulator import DynamixelEmulator

REPO = Path(__file__).resolve().parents[2]
ARM_XML = REPO / "sims/assets/dxl_arm.xml"
ARM_YAML = REPO / "configs/robots/dxl_arm.yaml"
ARM_SERVOS = {1: "j1", 2: "j2", 3: "j3", 4: "j4"}


@pytest.fixture
def calibration() -> Calibration:
    return RobotConfig.load(ARM_YAML).calibration


@pytest.fixture
def make_emulator() -> Iterator[Callable[..., DynamixelEmulator]]:
    """Start emulators of the arm (lockstep unless told otherwise); all are stopped at test end."""
    started: list[DynamixelEmulator] = []

    def make(**kwargs: object) -> DynamixelEmulator:
        kwargs.setdefault("realtime", False)
        emulator = DynamixelEmulator(ARM_XML, ARM_SERVOS, **kwargs).start()
        started.append(emulator)
        return emulator

    yield make
    for emulator in started:
        emulator.stop()
        assert not emulator.running


@pytest.fixture
def emulator(make_emulator: Callable[..., DynamixelEmulator]) -> DynamixelEmulator:
    return make_emulator()
