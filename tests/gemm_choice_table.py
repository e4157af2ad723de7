"""The gemm op's kernel choices that differ between the H100 (memory under 4 TB/s) and
the H200, as (M, N, K, layout, kernel under 4 TB/s, kernel from 4 TB/s) rows.

One table, two checks: ``tests/gpu/test_gemm.py`` asks the built op (``plan_nt``) on the
GPU at hand, and ``tests/test_gemm_kernel_choice.py`` asks ``pick_variant`` compiled on
the host, for both GPUs, on any machine. Layouts are those of ``layout_inputs`` in the GPU
tests: ``nt`` (K-major operands, row-major scales), ``nt_cs`` (the same with
column-major scales), ``challenge`` (both operands MN-major, scales transposed views)
and ``guide`` (A K-major, B MN-major, scales transposed views).
"""

from __future__ import annotations

# Exact mode.
EXACT_BY_BANDWIDTH = [
    # long K over two to five waves: converted in the kernel on the H100, the pass and
    # the BF16 kernel on the H200 (v25)
    (4096, 2112, 7168, "guide", "fp8_coop_128x128_exact_ak", "bf16_coop_128x128_overlap"),
    # K <= 2304 over five to nine waves: the same split
    (6144, 3072, 1536, "challenge", "fp8_coop_128x128_exact_amn", "bf16_coop_128x128_overlap"),
    # under two waves, and K <= 2304 under five: converted in the kernel on both
    (6144, 576, 7168, "challenge", "fp8_coop_128x128_exact_amn", "fp8_coop_128x128_exact_amn"),
    (1024, 7168, 2304, "challenge", "fp8_coop_128x128_exact_amn", "fp8_coop_128x128_exact_amn"),
    # 65-256 rows with a larger B: converted in the kernel, on the H100 since v46 and on
    # the H200 since v48 (which took the few-row kernel up to 256 rows before) ...
    (128, 32768, 512, "nt", "fp8_coop_128x128_exact_ak", "fp8_coop_128x128_exact_ak"),
    (128, 7168, 16384, "nt", "fp8_coop_128x128_exact_ak_splitk",
     "fp8_coop_128x128_exact_ak_splitk"),
    (96, 7168, 2048, "challenge", "fp8_coop_128x128_exact_amn_splitk",
     "fp8_coop_128x128_exact_amn_splitk"),
    (128, 7168, 2304, "challenge", "fp8_coop_128x128_exact_amn_splitk",
     "fp8_coop_128x128_exact_amn_splitk"),
    (96, 4608, 7168, "challenge", "fp8_coop_128x128_exact_amn_splitk",
     "fp8_coop_128x128_exact_amn_splitk"),
    # ... and from 129 rows whatever B
    (192, 7168, 2048, "nt", "fp8_coop_128x128_exact_ak", "fp8_coop_128x128_exact_ak"),
    (256, 24576, 1536, "nt", "fp8_coop_128x128_exact_ak", "fp8_coop_128x128_exact_ak"),
    # ... the few-row kernel up to 128 rows with a smaller B (K-major: under 16M elements,
    # under 24M with K >= 4096; MN-major: under 4M), and up to 64 rows
    (128, 7168, 2048, "nt", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    (128, 4096, 4096, "nt", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    (128, 512, 7168, "challenge", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    (64, 24576, 1536, "nt", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    # ... and to 256 rows with both operands K-major, B of up to 4096 columns and K from
    # 1024 to 2048 (v47), not with other K, a wider B nor B MN-major
    (256, 4096, 2048, "nt", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    (160, 2048, 1024, "nt", "fp8_fewrow_exact", "fp8_fewrow_exact"),
    (256, 2048, 512, "nt", "fp8_coop_128x128_exact_ak", "fp8_coop_128x128_exact_ak"),
    (256, 4608, 2048, "nt", "fp8_coop_128x128_exact_ak", "fp8_coop_128x128_exact_ak"),
    (256, 4096, 3072, "nt", "fp8_coop_128x128_exact_ak_splitk",
     "fp8_coop_128x128_exact_ak_splitk"),
    (256, 4096, 2048, "guide", "fp8_coop_128x128_exact_ak_splitk",
     "fp8_coop_128x128_exact_ak_splitk"),
    # ... on half a wave or less with K from 2048 to 4096, in slices on both (v46, v48)
    (128, 7168, 2048, "guide", "fp8_coop_128x128_exact_ak_splitk",
     "fp8_coop_128x128_exact_ak_splitk"),
]

# Fast mode.
FAST_BY_BANDWIDTH = [
    # 65-128 rows, K <= 1024, a wave of 128x128 tiles or more: the hand-written kernel on
    # the H100 (v28), on the H200 with row-major scales where the last wave is at least
    # 60% full (v52) ...
    (128, 32768, 512, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (80, 32768, 1024, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (128, 65536, 512, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (128, 33792, 512, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (128, 28672, 512, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    # ... and the ping-pong kernel on the H200 with a last wave under 60% full
    (128, 24576, 1024, "nt", "fp8_coop_128x128_overlap", "fp8_pingpong_64x128"),
    (96, 40960, 512, "nt", "fp8_coop_128x128_overlap", "fp8_pingpong_64x128"),
    # ... not under a wave, with 64 rows or with longer K
    (128, 8192, 512, "nt", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (64, 32768, 512, "nt", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (128, 24576, 1536, "nt", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    # column-major scales count as nothing to prepare up to four blocks of K (read in
    # place, v49), not beyond (copied row-major); the H200 keeps the ping-pong kernel with
    # them (v52)
    (128, 32768, 512, "nt_cs", "fp8_coop_128x128_overlap", "fp8_pingpong_64x128"),
    (80, 32768, 1024, "nt_cs", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (4096, 32768, 512, "nt_cs", "fp8_coop_128x128_overlap_cluster2",
     "fp8_coop_128x128_overlap_cluster2"),
    # up to 64 rows, K >= 7168, B wider than the cluster split-K's range but below the
    # L2's size: the few-row kernel on the H100 (v46), CUTLASS's kernels on the H200 (v27)
    (64, 4096, 7168, "nt", "fp8_fewrow", "fp8_pingpong_64x128_splitk"),
    (64, 7168, 7168, "nt", "fp8_fewrow", "fp8_pingpong_64x128"),
    # ... not with shorter K
    (64, 4096, 4096, "nt", "fp8_pingpong_64x128_splitk", "fp8_pingpong_64x128_splitk"),
    # six or more waves, K <= 512, N >= 16384, nothing to prepare: CTA pairs sharing B on
    # the H100 (v46) and the H200 (v48) ...
    (4096, 32768, 512, "nt", "fp8_coop_128x128_overlap_cluster2",
     "fp8_coop_128x128_overlap_cluster2"),
    (4096, 32768, 256, "nt", "fp8_coop_128x128_overlap_cluster2",
     "fp8_coop_128x128_overlap_cluster2"),
    # ... not at K = 1024
    (4096, 32768, 1024, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    # ... not with a narrower B; on the H200 with K <= 512 and B of 7168 columns or more
    # from ten waves, whatever the layout (v52); not under ten waves
    (6144, 4096, 512, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (6144, 7168, 256, "challenge", "fp8_coop_128x128_overlap",
     "fp8_coop_128x128_overlap_cluster2"),
    (6144, 7168, 512, "guide", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap_cluster2"),
    (4096, 4096, 256, "challenge", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (2048, 7168, 384, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (4096, 7168, 512, "challenge", "fp8_coop_128x128_overlap",
     "fp8_coop_128x128_overlap_cluster2"),
    # after the preparation launch, K from 1024 to 2048, six to eleven waves: CUTLASS's
    # cooperative kernel on the H100 (v46) ...
    (6144, 3072, 1536, "challenge", "fp8_coop_128x128", "fp8_coop_128x128_overlap"),
    # ... not with nothing to prepare, nor from twelve waves
    (6144, 3072, 1536, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (4096, 7168, 2048, "challenge", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    # K >= 4096 over one to four waves, nothing to prepare: the hand-written kernel on the
    # H100 (v46) ...
    (1024, 7168, 16384, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128"),
    # ... and under one wave from 512 rows where the ping-pong kernel's tiles do not fit
    # one (v47: 80 to 128 tiles); not with a B narrower than 1024 columns (under a wave or
    # over it), nor after the preparation launch
    (1024, 2048, 4096, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (640, 2048, 4096, "nt", "fp8_coop_128x128_overlap", "fp8_coop_128x128_overlap"),
    (4096, 512, 4096, "nt", "fp8_coop_128x128", "fp8_coop_128x128"),
    (8192, 512, 7168, "nt", "fp8_coop_128x128", "fp8_coop_128x128"),
    # ... but on the H200 with B of 256 to 1023 columns, K = 4096, two to five waves
    # (v50); not under two waves, nor with a narrower B, nor from K = 5120, nor after the
    # preparation launch
    (18432, 512, 4096, "nt", "fp8_coop_128x128_overlap_cluster2", "fp8_coop_128x128_overlap"),
    (24576, 256, 4096, "nt", "fp8_coop_128x128", "fp8_coop_128x128_overlap"),
    (16384, 256, 4096, "nt", "fp8_coop_128x128", "fp8_coop_128x128"),
    (36864, 128, 4096, "nt", "fp8_coop_128x128_streamk", "fp8_coop_128x128_streamk"),
    (36864, 256, 5120, "nt", "fp8_coop_128x128_overlap_cluster2", "fp8_coop_128x128"),
    (36864, 256, 7168, "nt", "fp8_coop_128x128_overlap_cluster2", "fp8_coop_128x128"),
    (24576, 256, 4096, "guide", "fp8_coop_128x128", "fp8_coop_128x128"),
    (1024, 2048, 4096, "challenge", "fp8_coop_128x128", "fp8_coop_128x128"),
    # more than 128 rows, K <= 512, one to six waves, nothing to prepare, row-major
    # scales: the hand-written kernel on the H200 (v52), the ping-pong kernel on the H100;
    # not after the preparation launch, nor under a wave
    (4096, 2048, 512, "nt", "fp8_pingpong_64x128", "fp8_coop_128x128_overlap"),
    (1024, 7168, 256, "nt", "fp8_pingpong_64x128", "fp8_coop_128x128_overlap"),
    (1024, 7168, 256, "challenge", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (2048, 4096, 256, "guide", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (1536, 4096, 384, "challenge", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    # ... where after it, with K from 385 to 512, the H200 takes CUTLASS's cooperative
    # kernel (v52)
    (4096, 2048, 512, "guide", "fp8_pingpong_64x128", "fp8_coop_128x128"),
    (1024, 4096, 512, "challenge", "fp8_pingpong_64x128", "fp8_coop_128x128"),
    (4096, 2048, 512, "nt_cs", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    (1024, 2048, 512, "nt", "fp8_pingpong_64x128", "fp8_pingpong_64x128"),
    # ... and the ping-pong kernel where its 64x128 tiles fit in one wave, up to 1024 rows
    (256, 4096, 7168, "nt", "fp8_pingpong_64x128", "fp8_coop_128x128"),
    (256, 4096, 7168, "challenge", "fp8_pingpong_64x128", "fp8_coop_128x128"),
    # ... not beyond one wave of them (and up to 384 rows not the hand-written kernel either)
    (384, 4096, 7168, "nt", "fp8_coop_128x128", "fp8_coop_128x128"),
]
