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


def test_keeps_each_functions_host_time_per_round(gemm_benchmark, monkeypatch) -> None:
    # bench appends the host's time per call to the list it is given: one list per
    # function, one entry per round
    def bench(fn, rep_ms, host=None):
        host.append(f"{fn} host")
        return 1.0

    monkeypatch.setattr(gemm_benchmark, "bench", bench)
    host: dict = {}
    gemm_benchmark.interleaved({"op": "op", "cuBLASLt": "cublas"}, rep_ms=30, rounds=3,
                               host_us=host)
    assert host == {"op": ["op host"] * 3, "cuBLASLt": ["cublas host"] * 3}


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


class FakeCuda:
    """Enough of torch.cuda for `bench`: every call takes `call_us` of GPU time and the
    spin's event reports the spin over (the GPU waiting for the host) in the batches
    listed in `late`."""

    def __init__(self, call_us: list[float], late: set[int]) -> None:
        self.call_us, self.late = iter(call_us), late
        self.spins: list[int] = []
        self.batches = 0
        self.clock = 0.0

    def synchronize(self) -> None:
        pass

    def _sleep(self, cycles: int) -> None:
        self.spins.append(cycles)

    def Event(self, enable_timing: bool = False):  # noqa: N802 (torch's name)
        cuda = self

        class Event:
            def record(self) -> None:
                self.at = cuda.clock
                if not enable_timing:  # the spin's event opens a batch
                    cuda.batches += 1
                    self.batch = cuda.batches

            def query(self) -> bool:
                return self.batch in cuda.late

            def elapsed_time(self, end) -> float:
                return (end.at - self.at) / 1e3

        return Event()


class FakeTorch:
    int8 = "int8"

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def empty(self, *args, **kwargs):
        return type("Flush", (), {"zero_": lambda self: None})()


def fake_bench(module, monkeypatch, call_us: list[float], late: set[int]):
    """`bench` on a fake GPU: its estimate sees 1 ms calls with 30 us of host time each,
    then every timed call lasts the next of `call_us`."""
    cuda = FakeCuda(call_us, late)
    monkeypatch.setattr(module, "torch", FakeTorch(cuda))
    monkeypatch.setattr(module, "_flush_buffer", None)
    monkeypatch.setattr(module, "_estimate", lambda fn, flush: (30.0, 1000.0))

    def fn() -> None:
        if cuda.batches:  # the first call, before any batch, is the warm-up
            cuda.clock += next(cuda.call_us)

    return cuda, fn


def test_bench_reports_the_median_call(gemm_benchmark, monkeypatch) -> None:
    cuda, fn = fake_bench(gemm_benchmark, monkeypatch, [9.0, 1.0, 5.0] + [2.0] * 7, set())
    assert gemm_benchmark.bench(fn, rep_ms=10) == 2.0
    assert cuda.batches == 1


def test_bench_reports_the_middle_of_an_even_number_of_calls(gemm_benchmark,
                                                            monkeypatch) -> None:
    # Ten calls, five of 1 us and five of 3 us: the median is 2 us, neither the faster
    # nor the slower half's; the host's time per call is a median over batches too.
    cuda, fn = fake_bench(gemm_benchmark, monkeypatch, [1.0, 3.0] * 5, set())
    host: list = []
    assert gemm_benchmark.bench(fn, rep_ms=10, host=host) == 2.0
    assert cuda.batches == 1 and len(host) == 1


def test_bench_discards_a_batch_the_host_could_not_keep_ahead_of(gemm_benchmark,
                                                                  monkeypatch) -> None:
    # The first batch's spin ended before the host had queued every call: its times may
    # hold host time, so they are dropped and the batch runs again behind a longer spin.
    cuda, fn = fake_bench(gemm_benchmark, monkeypatch, [50.0] * 10 + [2.0] * 10, {1})
    host: list = []
    assert gemm_benchmark.bench(fn, rep_ms=10, host=host) == 2.0
    assert cuda.batches == 2
    assert cuda.spins[1] == 4 * cuda.spins[0]
    assert len(host) == 1 and host[0] >= 0


def test_bench_gives_up_on_a_host_that_never_keeps_ahead(gemm_benchmark, monkeypatch) -> None:
    cuda, fn = fake_bench(gemm_benchmark, monkeypatch, [1.0] * 100, set(range(1, 10)))
    with pytest.raises(gemm_benchmark.HostBoundError, match="could not queue 10 calls"):
        gemm_benchmark.bench(fn, rep_ms=10)
    assert cuda.batches == 6


def test_bench_spin_covers_the_host_time_of_a_batch(gemm_benchmark, monkeypatch) -> None:
    cuda, fn = fake_bench(gemm_benchmark, monkeypatch, [1.0] * 200, set())
    gemm_benchmark.bench(fn, rep_ms=120)  # 120 calls of 1 ms: batches of 50, 50, 20
    assert cuda.batches == 3
    # 30 us of host time per call, 50 calls: the spin lasts at least twice that, also
    # at the highest SM clock of a Hopper GPU (1980 MHz), where its cycles pass fastest.
    assert cuda.spins[0] >= 2 * 30 * 50 * 1980
