"""The GEMM benchmark's interleaved timing (benchmarks/gemm.py), without a GPU: every
round times each function once, the orders differ from round to round so that no
function mostly runs right after the same one, and they repeat from run to run; a
baseline far slower than us is timed again and can only get faster."""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
from kf_testutil import REPO


@pytest.fixture(scope="module")
def gemm_benchmark():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("gemm_benchmark", REPO / "benchmarks" / "gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def orders(module, names: list[str], rounds: int, monkeypatch) -> list[list[str]]:
    calls: list[str] = []
    monkeypatch.setattr(module, "bench", lambda fn, rep_ms: calls.append(fn) or float(len(calls)))
    times = module.interleaved({name: name for name in names}, rep_ms=70, rounds=rounds)
    assert set(times) == set(names)
    assert len(calls) == rounds * len(names)
    return [calls[r * len(names):(r + 1) * len(names)] for r in range(rounds)]


def test_each_round_times_every_function_once(gemm_benchmark, monkeypatch) -> None:
    names = ["op", "op exact", "v17", "v20", "cuBLASLt"]
    for order in orders(gemm_benchmark, names, 7, monkeypatch):
        assert sorted(order) == sorted(names)


def test_no_function_mostly_follows_the_same_one(gemm_benchmark, monkeypatch) -> None:
    # Rotating the order each round kept a function behind the same predecessor in 6 of 7
    # rounds, which biased long kernels at the power limit by the clock they inherited.
    names = ["op", "op exact", "v17", "v20", "cuBLASLt"]
    predecessors: dict[str, Counter[str]] = {name: Counter() for name in names}
    for order in orders(gemm_benchmark, names, 7, monkeypatch):
        for before, name in zip(order[:-1], order[1:], strict=True):
            predecessors[name][before] += 1
    most = {name: max(c.values(), default=0) for name, c in predecessors.items()}
    assert max(most.values()) <= 4, most


def test_the_orders_repeat_from_run_to_run(gemm_benchmark, monkeypatch) -> None:
    names = ["fast", "exact", "cuBLASLt", "cuBLASLt+T"]
    first = orders(gemm_benchmark, names, 3, monkeypatch)
    assert orders(gemm_benchmark, names, 3, monkeypatch) == first


def test_reports_the_median_round(gemm_benchmark, monkeypatch) -> None:
    times = iter([5.0, 1.0, 3.0])
    monkeypatch.setattr(gemm_benchmark, "bench", lambda fn, rep_ms: next(times))
    assert gemm_benchmark.interleaved({"only": None}, rep_ms=30, rounds=3) == {"only": 3.0}


def test_keeps_every_round(gemm_benchmark, monkeypatch) -> None:
    times = iter([5.0, 1.0, 3.0])
    monkeypatch.setattr(gemm_benchmark, "bench", lambda fn, rep_ms: next(times))
    rounds: dict = {}
    gemm_benchmark.interleaved({"only": None}, rep_ms=30, rounds=3, per_round=rounds)
    assert rounds == {"only": [5.0, 1.0, 3.0]}


@pytest.mark.parametrize("cublas,fast,again,kept,retimed", [
    (117.7, 17.2, 25.9, 25.9, True),    # an outlier: the new time is kept
    (117.7, 17.2, 130.0, 117.7, True),  # timed again, but the first median was faster
    (30.0, 17.2, 1.0, 30.0, False),     # within 2x: not timed again
])
def test_slow_baseline_is_timed_again_and_only_lowered(gemm_benchmark, monkeypatch, cublas, fast,
                                                        again, kept, retimed) -> None:
    calls: list[object] = []
    monkeypatch.setattr(gemm_benchmark, "bench", lambda fn, rep_ms: calls.append(fn) or again)
    row = {"cublas_us": cublas, "fast_us": fast}
    gemm_benchmark.retime_slow_baseline(row, "cublas", rep_ms=60)
    assert row["cublas_us"] == kept
    assert (calls == ["cublas"]) == retimed
    assert ("cublas_interleaved_us" in row) == retimed
