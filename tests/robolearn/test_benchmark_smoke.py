"""Benchmarks that need no peer, run end to end at tiny settings (their tables go to a temp folder): a script
that no longer runs against today's code is found here, not by the next person reproducing BENCHMARKS.md."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fas_latency_times_both_exported_formats(tmp_path):
    """It had crashed on every run: its ONNX export, into the TorchScript file's folder, removed that file."""
    quoted = ROOT / "benchmarks" / "results" / "fas_latency.md"  # BENCHMARKS.md's table: not overwritten
    before = quoted.read_bytes()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fas.py"), "latency", "--latency-steps", "20",
                           "--latency-task", "pendulum", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "fas_latency.md").read_text()
    for row in ("| SAC | torchscript | 1 | 20 / 20 |", "| SAC | onnx |", "| SRL (J=16) | torchscript | 16 | 2 / 20 |",
                "| SRL (J=16) | onnx |"):
        assert row in table
    assert quoted.read_bytes() == before
