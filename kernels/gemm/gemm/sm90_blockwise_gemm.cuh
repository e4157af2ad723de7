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
#pragma once

#include <cuda_runtime_api.h>

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
          bool StreamK_>
struct BlockwiseGemm {
  using ElementAB = ElementAB_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr bool kCooperative = Cooperative_;
  static constexpr bool kStreamK = StreamK_;
  static_assert(!(kStreamK && !kCooperative), "stream-K needs the cooperative kernel");

  using KernelSchedule =
      cute::conditional_t<kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                          cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise>;
  using EpilogueSchedule =
      cute::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                          cutlass::epilogue::TmaWarpSpecialized>;
  using Scheduler = cute::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler,
                                        cutlass::gemm::PersistentScheduler>;

  using ElementD = cutlass::bfloat16_t;
  static constexpr int kAlignD = 8;

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

  static typename Gemm::Arguments make_arguments(const GemmArgs& g) {
    const int kb = (g.k + 127) / 128;
    const int nb = (g.n + 127) / 128;
    LayoutSFA sfa = make_layout(
        make_shape(make_shape(_1{}, g.m), make_shape(_128{}, kb), 1),
        make_stride(make_stride(_0{}, static_cast<int32_t>(g.sfa_stride_m)),
                    make_stride(_0{}, static_cast<int32_t>(g.sfa_stride_k)), 0));
    LayoutSFB sfb = make_layout(
        make_shape(make_shape(_128{}, nb), make_shape(_128{}, kb), 1),
        make_stride(make_stride(_0{}, static_cast<int32_t>(g.sfb_stride_n)),
                    make_stride(_0{}, static_cast<int32_t>(g.sfb_stride_k)), 0));

    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = make_shape(g.m, g.n, g.k, 1);
    args.mainloop.ptr_A = static_cast<const ElementAB*>(g.a);
    args.mainloop.dA = make_stride(static_cast<int64_t>(g.lda), _1{}, int64_t(0));
    args.mainloop.ptr_B = static_cast<const ElementAB*>(g.b);
    args.mainloop.dB = make_stride(static_cast<int64_t>(g.ldb), _1{}, int64_t(0));
    args.mainloop.ptr_SFA = g.sfa;
    args.mainloop.layout_SFA = sfa;
    args.mainloop.ptr_SFB = g.sfb;
    args.mainloop.layout_SFB = sfb;
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<ElementD*>(g.d);
    args.epilogue.dD = make_stride(static_cast<int64_t>(g.ldd), _1{}, int64_t(0));
    args.hw_info.device_id = g.device;
    args.hw_info.sm_count = g.sm_count;
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
    return Gemm::get_workspace_size(make_arguments(g));
  }

  static Status run(const GemmArgs& g, void* workspace, cudaStream_t stream, const char** why) {
    typename Gemm::Arguments args = make_arguments(g);
    Gemm op;
    if (op.can_implement(args) != cutlass::Status::kSuccess) {
      if (why) *why = "the kernel cannot implement this problem (alignment or shape)";
      return Status::kUnsupported;
    }
    if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess) {
      if (why) *why = "kernel initialization failed";
      return Status::kLaunchFailed;
    }
    if (op.run(stream) != cutlass::Status::kSuccess) {
      if (why) *why = "kernel launch failed";
      return Status::kLaunchFailed;
    }
    if (cudaPeekAtLastError() != cudaSuccess) {
      if (why) *why = cudaGetErrorString(cudaGetLastError());
      return Status::kLaunchFailed;
    }
    return Status::kOk;
  }
};

}  // namespace kfgemm::sm90

// One translation unit per variant keeps the builds parallel.
#define KFGEMM_DEFINE_VARIANT(NAME, ...)                                                     \
  namespace kfgemm::variants {                                                               \
  using NAME##_t = ::kfgemm::sm90::BlockwiseGemm<__VA_ARGS__>;                               \
  size_t NAME##_workspace(const GemmArgs& g) { return NAME##_t::workspace_size(g); }         \
  Status NAME##_run(const GemmArgs& g, void* ws, cudaStream_t s, const char** why) {         \
    return NAME##_t::run(g, ws, s, why);                                                     \
  }                                                                                          \
  }
