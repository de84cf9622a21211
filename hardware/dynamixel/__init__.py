"""Dynamixel Protocol 2.0: codec, X-series control table, calibration, bus driver, emulator.

The driver (:mod:`.bus`) talks through the vendor SDK; the emulator
(:mod:`.emulator`) is the device side, a MuJoCo arm on a pseudo-terminal, so
the real driver path is tested without hardware.
"""
