"""The gemm op on a GPU other than the current one (a node with several Hopper GPUs).

The op runs on its operands' device whichever device is current, sets each kernel's
shared-memory limit and reads the device's attributes per device, runs on that device's
current stream, and is safe to call from threads driving different GPUs. Each case runs
a kernel on device 0 first and then on device 1 with device 0 current, so the second
device's first launch of that kernel is the one under test.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from test_gemm import Checker, check_graph_replay, fresh_seed, make_nt, poisoned  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.sm90]


@pytest.fixture(scope="module")
def two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    if any(torch.cuda.get_device_capability(d) != (9, 0) for d in (0, 1)):
        pytest.skip("needs two Hopper GPUs")
    torch.cuda.set_device(0)
    return (0, 1)


def inputs_on(device: int, m, n, k, seed, **layout):
    with torch.cuda.device(device):
        return make_nt(m, n, k, seed=seed, **layout)


# (what, m, n, k, precision, layout): the op's own choice covers the split-K sum, the
# few-row kernel, the CUTLASS kernels, the hand-written ones (with multicast on GPUs under
# 4 TB/s), A read MN-major in place, the operand preparation, and exact mode's in-place
# kernels; `plan_nt` names each in the failure message.
AUTO = [
    ("split-k", 64, 2112, 7168, "fast", {}),
    ("few-row", 64, 7168, 16384, "fast", {}),
    ("ping-pong", 128, 7168, 2048, "fast", {}),
    ("overlap", 4096, 4096, 1024, "fast", {}),
    ("overlap-long-k", 4096, 4096, 7168, "fast", {}),
    ("prepared", 1024, 1536, 7168, "fast", dict(a_major="mn", b_major="mn")),
    ("a-mn-in-place", 6144, 576, 7168, "fast", dict(a_major="mn", b_major="mn",
                                                     sa_layout="col", sb_layout="col")),
    ("exact-few-row", 64, 2112, 7168, "exact", {}),
    ("exact-mn", 1024, 1536, 7168, "exact", dict(a_major="mn", b_major="mn")),
    ("exact-k", 1024, 4096, 7168, "exact", {}),
]


@pytest.mark.parametrize("what,m,n,k,precision,layout", AUTO, ids=[c[0] for c in AUTO])
def test_op_on_the_device_that_is_not_current(gemm_kernel, two_gpus, what, m, n, k,
                                              precision, layout):
    seed = fresh_seed()
    outs = []
    for device in two_gpus:
        a, b, sa, sb = inputs_on(device, m, n, k, seed, **layout)
        assert torch.cuda.current_device() == 0
        plan = gemm_kernel.plan_nt(a, b, sa, sb, precision=precision)
        out = gemm_kernel.gemm_nt(a, b, sa, sb, precision=precision)
        assert out.device == a.device
        c = Checker(gemm_kernel, a, b, sa, sb, f"{what} on cuda:{device}, {plan.name} "
                    f"splits {plan.splits}, seed={seed}")
        (c.exact if precision == "exact" else c.fast)(out)
        outs.append(out)
    # Same GPU model, same kernel, same inputs: the same bits.
    assert torch.equal(outs[0].cpu().view(torch.int16), outs[1].cpu().view(torch.int16))


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4, 7, 9, 10, 17])
def test_every_variant_on_the_second_device(gemm_kernel, two_gpus, variant):
    m, n, k = 300, 400, 1920
    seed = fresh_seed()
    exact = variant in (3, 4, 9, 17)
    for device in two_gpus:
        a, b, sa, sb = inputs_on(device, m, n, k, seed, a_major="mn")
        with torch.cuda.device(device):
            out = poisoned(m, n)
        gemm_kernel._ops.ops.gemm_nt_out(out, a, b, sa, sb, exact, variant, 0)
        c = Checker(gemm_kernel, a, b, sa, sb, f"variant {variant} on cuda:{device} seed={seed}")
        (c.exact if exact else c.fast)(out)


def test_quantization_on_the_second_device(gemm_kernel, two_gpus):
    x = torch.randn(300, 7168 + 64, device="cuda:1")
    ref = gemm_kernel.reference
    for fn, rfn in ((gemm_kernel.quantize_activation, ref.quantize_activation_reference),
                    (gemm_kernel.quantize_weight, ref.quantize_weight_reference)):
        q, s = fn(x)
        rq, rs = rfn(x)
        assert q.device == x.device and s.device == x.device
        assert torch.equal(s, rs)
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))


def test_second_device_side_stream_and_graph(gemm_kernel, two_gpus):
    """On device 1 with device 0 current: the op runs on device 1's current stream, and
    a graph captured there replays with new inputs."""
    m, n, k = 200, 576, 1152
    seed = fresh_seed()
    a, b, sa, sb = inputs_on(1, m, n, k, seed, a_major="mn", b_major="mn")
    s = torch.cuda.Stream(device=1)
    s.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.stream(s):  # also makes device 1 current inside the block
        torch.cuda._sleep(50_000_000)  # the result is only ready after this, on s
        out = gemm_kernel.gemm_nt(a, b, sa, sb)
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    Checker(gemm_kernel, a, b, sa, sb, f"device 1 side stream seed={seed}").fast(out)

    check_graph_replay(gemm_kernel, m, n, k, seed + 1, device=1)
    assert torch.cuda.current_device() == 0


def test_threads_driving_two_gpus(gemm_kernel, two_gpus):
    """Two threads, one per GPU, each calling the op repeatedly on shapes that take
    different kernels: every result equals the one computed alone on that GPU."""
    seed = fresh_seed()
    shapes = [(64, 2112, 7168, {}), (1024, 1536, 7168, dict(a_major="mn", b_major="mn")),
              (4096, 4096, 1024, {})]
    work = {d: [inputs_on(d, m, n, k, seed + i, **lay) for i, (m, n, k, lay) in enumerate(shapes)]
            for d in two_gpus}
    alone = {d: [gemm_kernel.gemm_nt(*args) for args in work[d]] for d in two_gpus}
    for d in two_gpus:
        torch.cuda.synchronize(d)
    errors: list[BaseException] = []
    differing = {d: 0 for d in two_gpus}

    def drive(device: int) -> None:
        try:
            for _ in range(20):
                for args, expected in zip(work[device], alone[device], strict=True):
                    out = gemm_kernel.gemm_nt(*args)
                    differing[device] += int(not torch.equal(out, expected))
            torch.cuda.synchronize(device)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=drive, args=(d,)) for d in two_gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert differing == {d: 0 for d in two_gpus}, f"seed={seed}"
