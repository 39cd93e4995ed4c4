"""The benchmarks still run (they are not imported by anything else, so nothing else would notice
them break): the shadow-overhead benchmark at its smallest, which also asserts the oracle stays
silent on its correct launches."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.interpreter  # the benchmark measures the CPU shadow: it asserts Triton's interpreter
def test_the_shadow_overhead_benchmark_runs_and_prints_a_ratio_per_row():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the script must set it itself
    r = subprocess.run([sys.executable, "benchmarks/shadow_overhead.py", "--reps", "1", "--sizes", "small,gather"],
                       capture_output=True, text=True, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["small", "gather"]
    assert all(float(row[-2]) > 0 for row in rows)


@pytest.mark.slow
def test_the_stage_profile_benchmark_prints_a_table_and_a_rate():
    r = subprocess.run([sys.executable, "benchmarks/stage_profile.py", "--targets", "reference_runner", "--workers",
                        "1", "--budget", "60", "--max-examples", "2", "--device", "cpu"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert any(line.split()[:1] == ["run"] for line in lines)
    assert any(line.startswith("wall ") and line.endswith("cases/s") for line in lines)
    assert "reference_runner   --workers 1" in r.stdout
