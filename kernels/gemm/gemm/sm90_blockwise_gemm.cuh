// Block-scaled GEMM on Hopper built from CUTLASS's SM90 blockwise-scaling mainloop.
//
//   D[m, n] = sum_k A[m, k] B[n, k] sfa[m, k/128] sfb[n/128, k/128]
//
// The mainloop runs the tensor cores over one 128-deep K tile with a zeroed temporary
// accumulator, then folds it into the FP32 accumulator times the tile's two scales
// (promotion once per 128 of K). The same mainloop serves FP8 operands (fast mode)
// and BF16 operands holding exactly converted FP8 values (exact mode): the
// composition below mirrors what CUTLASS's collective builder does for FP8, without
// its FP8-only restriction.
//
// Scale tensors are addressed through runtime strides on both modes, so any layout
// (the challenge's (KB, M), the model's (M, KB), transposed views) is read in place.
//
// Split-K variants cut K into `splits` equal slices of whole 128-blocks and run them as
// the batch mode L of one launch (A, B and the scales advance by one slice per batch),
// writing FP32 partial products to scratch; a second kernel sums the slices into the
// bf16 output. This fills the GPU when the tile grid alone would not (few rows, long K)
// and keeps both warp groups of the ping-pong kernel busy.
//
// A translation unit that defines CUTLASS_ENABLE_GDC_FOR_SM90 before including this
// header gets kernels that wait for the previous grid (griddepcontrol.wait) before their
// first global read; only those are launched as programmatic dependents. (The stream-K
// scheduler of CUTLASS 4.2 does not compile with it.)
#pragma once

#include <cuda_runtime_api.h>

// Before any other CUTLASS header: CUTLASS's TMA descriptors then use its cached encoder.
#include "driver_entry.h"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "gemm_api.h"
#include "smem_reserve.h"

namespace kfgemm::sm90 {

using namespace cute;

// ((1, M), (128, KB), L) -> offset; strides are runtime values.
using LayoutSFA = Layout<Shape<Shape<_1, int32_t>, Shape<_128, int32_t>, int32_t>,
                         Stride<Stride<_0, int32_t>, Stride<_0, int32_t>, int32_t>>;
// ((128, NB), (128, KB), L) -> offset.
using LayoutSFB = Layout<Shape<Shape<_128, int32_t>, Shape<_128, int32_t>, int32_t>,
                         Stride<Stride<_0, int32_t>, Stride<_0, int32_t>, int32_t>>;

using StrideA = cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>;     // (M, K) K-major
using StrideB = cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>;  // (N, K) K-major
using StrideD = cutlass::gemm::TagToStrideC_t<cutlass::layout::RowMajor>;     // (M, N) N-major

template <class ElementAB_, class TileShape_, class ClusterShape_, bool Cooperative_,
          bool StreamK_, bool SplitK_ = false>
struct BlockwiseGemm {
  using ElementAB = ElementAB_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr bool kCooperative = Cooperative_;
  static constexpr bool kStreamK = StreamK_;
  static constexpr bool kSplitK = SplitK_;
  static_assert(!(kStreamK && !kCooperative), "stream-K needs the cooperative kernel");
  static_assert(!(kStreamK && kSplitK), "split-K through the batch mode excludes stream-K");

  using KernelSchedule =
      cute::conditional_t<kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                          cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise>;
  using EpilogueSchedule =
      cute::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                          cutlass::epilogue::TmaWarpSpecialized>;
  using Scheduler = cute::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler,
                                        cutlass::gemm::PersistentScheduler>;

  // Split-K writes FP32 partials (16-byte rows of 4), the others bf16 (rows of 8).
  using ElementD = cute::conditional_t<kSplitK, float, cutlass::bfloat16_t>;
  static constexpr int kAlignD = kSplitK ? 4 : 8;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
      cutlass::layout::RowMajor, kAlignD, ElementD, cutlass::layout::RowMajor, kAlignD,
      EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  // Mainloop: both operands K-major in shared memory, read by wgmma from there.
  using AtomLayout =
      cute::conditional_t<kCooperative, Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _1, _1>>>;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementAB, ElementAB, float, TileShape, cute::GMMA::Major::K,
                                 cute::GMMA::Major::K>(),
      AtomLayout{}));
  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<0>(ClusterShape{})));
  using SmemLayoutAtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   cute::GMMA::Major::K, ElementAB, decltype(get<0>(TileShape{})),
                                   decltype(get<2>(TileShape{}))>());
  using SmemLayoutAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   cute::GMMA::Major::K, ElementAB, decltype(get<1>(TileShape{})),
                                   decltype(get<2>(TileShape{}))>());

  static constexpr int kScaleMsPerTile = size<0>(TileShape{});
  static constexpr int kScaleNsPerTile = size<1>(TileShape{}) / 128;
  static constexpr int kStages = cutlass::gemm::collective::detail::compute_stage_count_with_blockwise_scale<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, ElementAB, ElementAB, float,
      TileShape, kScaleMsPerTile, kScaleNsPerTile>(
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>{});

  using DispatchPolicy =
      cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8<kStages, ClusterShape,
                                                                    KernelSchedule>;
  using CollectiveMainloop = cutlass::gemm::collective::CollectiveMma<
      DispatchPolicy, TileShape, ElementAB, cute::tuple<StrideA, LayoutSFA>, ElementAB,
      cute::tuple<StrideB, LayoutSFB>, TiledMma, GmemTiledCopyA, SmemLayoutAtomA, void,
      cute::identity, GmemTiledCopyB, SmemLayoutAtomB, void, cute::identity>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // Number of K slices this launch runs as its batch mode (1 unless split-K).
  static int slices(const GemmArgs& g) { return kSplitK ? g.splits : 1; }

  // Bytes of FP32 partials, 256-byte aligned so that CUTLASS's scratch can follow.
  static size_t partials_bytes(const GemmArgs& g) {
    if constexpr (!kSplitK) {
      return 0;
    } else {
      const size_t bytes = static_cast<size_t>(g.splits) * g.m * g.n * sizeof(float);
      return (bytes + 255) / 256 * 256;
    }
  }

  // A split must be a whole number of 128-blocks: the scales of a slice start at a
  // block boundary and the slices tile K exactly.
  static const char* check_splits(const GemmArgs& g) {
    if constexpr (kSplitK) {
      if (g.splits < 2) return "split-K variants need splits >= 2";
      if (g.k % (128 * g.splits) != 0) {
        return "split-K needs K (padded to 16) to be a multiple of 128 * splits";
      }
      if (g.n % 4 != 0) return "split-K needs N to be a multiple of 4";
    }
    return nullptr;
  }

  static typename Gemm::Arguments make_arguments(const GemmArgs& g, void* partials) {
    const int l = slices(g);
    const int ks = g.k / l;  // elements of K per slice
    const int kb = (ks + 127) / 128;
    const int nb = (g.n + 127) / 128;
    const int32_t sfa_l = static_cast<int32_t>(kb * g.sfa_stride_k);
    const int32_t sfb_l = static_cast<int32_t>(kb * g.sfb_stride_k);
    LayoutSFA sfa = make_layout(
        make_shape(make_shape(_1{}, g.m), make_shape(_128{}, kb), l),
        make_stride(make_stride(_0{}, static_cast<int32_t>(g.sfa_stride_m)),
                    make_stride(_0{}, static_cast<int32_t>(g.sfa_stride_k)), sfa_l));
    LayoutSFB sfb = make_layout(
        make_shape(make_shape(_128{}, nb), make_shape(_128{}, kb), l),
        make_stride(make_stride(_0{}, static_cast<int32_t>(g.sfb_stride_n)),
                    make_stride(_0{}, static_cast<int32_t>(g.sfb_stride_k)), sfb_l));

    typename Gemm::Arguments args{};
    args.mode = l > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                      : cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(g.m, g.n, ks, l);
    args.mainloop.ptr_A = static_cast<const ElementAB*>(g.a);
    args.mainloop.dA = make_stride(static_cast<int64_t>(g.lda), _1{}, static_cast<int64_t>(l > 1 ? ks : 0));
    args.mainloop.ptr_B = static_cast<const ElementAB*>(g.b);
    args.mainloop.dB = make_stride(static_cast<int64_t>(g.ldb), _1{}, static_cast<int64_t>(l > 1 ? ks : 0));
    args.mainloop.ptr_SFA = g.sfa;
    args.mainloop.layout_SFA = sfa;
    args.mainloop.ptr_SFB = g.sfb;
    args.mainloop.layout_SFB = sfb;
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    if constexpr (kSplitK) {
      // Partials: (M, N, L) rows of N floats, one (M, N) plane per slice.
      args.epilogue.ptr_D = static_cast<ElementD*>(partials);
      args.epilogue.dD = make_stride(static_cast<int64_t>(g.n), _1{}, static_cast<int64_t>(g.m) * g.n);
    } else {
      (void)partials;
      args.epilogue.ptr_D = static_cast<ElementD*>(g.d);
      args.epilogue.dD = make_stride(static_cast<int64_t>(g.ldd), _1{}, int64_t(0));
    }
    args.hw_info.device_id = g.device;
    args.hw_info.sm_count = g.sm_count;
    if (g.swizzle > 0) args.scheduler.max_swizzle_size = g.swizzle;
    if constexpr (kStreamK) {
      using Decomp = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::
          DecompositionMode;
      if (g.splits > 1) {
        args.scheduler.splits = g.splits;
        args.scheduler.decomposition_mode = Decomp::SplitK;
      } else if (g.splits == 1) {
        args.scheduler.decomposition_mode = Decomp::DataParallel;
      } else {
        args.scheduler.decomposition_mode = Decomp::Heuristic;
      }
    }
    return args;
  }

  static size_t workspace_size(const GemmArgs& g) {
    if (check_splits(g)) return 0;
    return partials_bytes(g) + Gemm::get_workspace_size(make_arguments(g, nullptr));
  }

  static Status run(const GemmArgs& g, void* workspace, cudaStream_t stream, const char** why,
                    bool pdl_capable) {
    if (const char* bad = check_splits(g)) {
      if (why) *why = bad;
      return Status::kUnsupported;
    }
    const size_t pbytes = partials_bytes(g);
    void* partials = workspace;
    void* cutlass_ws = pbytes ? static_cast<char*>(workspace) + pbytes : workspace;
    typename Gemm::Arguments args = make_arguments(g, partials);
    if (Gemm::can_implement(args) != cutlass::Status::kSuccess) {
      if (why) *why = "the kernel cannot implement this problem (alignment or shape)";
      return Status::kUnsupported;
    }
    // What the adapter's initialize() does, with the kernel's shared-memory attribute set
    // once per device rather than on every call (a driver call of 2-3 us on the host).
    using Kernel = typename Gemm::GemmKernel;
    static uint64_t smem_reserved = 0;
    if (Kernel::initialize_workspace(args, cutlass_ws, stream, nullptr) != cutlass::Status::kSuccess ||
        !reserve_smem_once(cutlass::device_kernel<Kernel>, g.device, Kernel::SharedStorageSize,
                           &smem_reserved)) {
      if (why) *why = "kernel initialization failed";
      return Status::kLaunchFailed;
    }
    driver::encode_error = CUDA_SUCCESS;
    typename Kernel::Params params = Kernel::to_underlying_arguments(args, cutlass_ws);
    if (driver::encode_error != CUDA_SUCCESS) {  // launching would fault the context
      if (why) *why = "encoding a TMA descriptor failed (cuTensorMapEncodeTiled)";
      return Status::kLaunchFailed;
    }
    if (Gemm::run(params, stream, nullptr, g.pdl && pdl_capable) != cutlass::Status::kSuccess) {
      if (why) *why = "kernel launch failed";
      return Status::kLaunchFailed;
    }
    if (cudaPeekAtLastError() != cudaSuccess) {
      if (why) *why = cudaGetErrorString(cudaGetLastError());
      return Status::kLaunchFailed;
    }
    if constexpr (kSplitK) {
      const Status st = reduce_splits(static_cast<const float*>(partials), g.splits, g.m, g.n,
                                      g.d, g.ldd, g.sm_count, stream);
      if (st != Status::kOk) {
        if (why) *why = "split-K reduction launch failed";
        return st;
      }
    }
    return Status::kOk;
  }
};

}  // namespace kfgemm::sm90

#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
#define KFGEMM_PDL_CAPABLE true
#else
#define KFGEMM_PDL_CAPABLE false
#endif

// One translation unit per variant keeps the builds parallel.
#define KFGEMM_DEFINE_VARIANT(NAME, ...)                                                     \
  namespace kfgemm::variants {                                                               \
  using NAME##_t = ::kfgemm::sm90::BlockwiseGemm<__VA_ARGS__>;                               \
  size_t NAME##_workspace(const GemmArgs& g) { return NAME##_t::workspace_size(g); }         \
  Status NAME##_run(const GemmArgs& g, void* ws, cudaStream_t s, const char** why) {         \
    return NAME##_t::run(g, ws, s, why, KFGEMM_PDL_CAPABLE);                                 \
  }                                                                                          \
  }
