// Table of GEMM variants: names, scratch sizes and launches, one entry per
// translation unit that instantiates a variant.
#include "gemm_api.h"

namespace kfgemm::variants {
#define KFGEMM_DECLARE_VARIANT(NAME)                                                        \
  size_t NAME##_workspace(const GemmArgs& g);                                               \
  Status NAME##_run(const GemmArgs& g, void* ws, cudaStream_t s, const char** why);
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_streamk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_cluster2)
KFGEMM_DECLARE_VARIANT(fp8_pingpong_64x128)
KFGEMM_DECLARE_VARIANT(bf16_coop_128x128_streamk)
KFGEMM_DECLARE_VARIANT(bf16_pingpong_64x128)
KFGEMM_DECLARE_VARIANT(fp8_pingpong_64x128_splitk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_splitk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128)
KFGEMM_DECLARE_VARIANT(bf16_pingpong_64x128_splitk)
KFGEMM_DECLARE_VARIANT(bf16_coop_128x128)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap)
KFGEMM_DECLARE_VARIANT(fp8_cluster_splitk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap_cluster2)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap_amn)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap_amn_cluster2)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap_splitk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_overlap_amn_splitk)
KFGEMM_DECLARE_VARIANT(bf16_coop_128x128_overlap)
KFGEMM_DECLARE_VARIANT(fp8_fewrow)
KFGEMM_DECLARE_VARIANT(fp8_fewrow_exact)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_exact_amn)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_exact_amn_splitk)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_exact_ak)
KFGEMM_DECLARE_VARIANT(fp8_coop_128x128_exact_ak_splitk)
#undef KFGEMM_DECLARE_VARIANT
size_t overlap_splitk_zeroed_bytes(const GemmArgs& g);
}  // namespace kfgemm::variants

namespace kfgemm {

namespace {
struct Entry {
  const char* name;
  size_t (*workspace)(const GemmArgs&);
  Status (*run)(const GemmArgs&, void*, cudaStream_t, const char**);
};

#define KFGEMM_ENTRY(NAME) \
  { #NAME, &variants::NAME##_workspace, &variants::NAME##_run }
// Order matches enum class Variant.
constexpr Entry kTable[] = {
    KFGEMM_ENTRY(fp8_coop_128x128_streamk), KFGEMM_ENTRY(fp8_coop_128x128_cluster2),
    KFGEMM_ENTRY(fp8_pingpong_64x128),      KFGEMM_ENTRY(bf16_coop_128x128_streamk),
    KFGEMM_ENTRY(bf16_pingpong_64x128),     KFGEMM_ENTRY(fp8_pingpong_64x128_splitk),
    KFGEMM_ENTRY(fp8_coop_128x128_splitk),  KFGEMM_ENTRY(fp8_coop_128x128),
    KFGEMM_ENTRY(bf16_pingpong_64x128_splitk), KFGEMM_ENTRY(bf16_coop_128x128),
    KFGEMM_ENTRY(fp8_coop_128x128_overlap), KFGEMM_ENTRY(fp8_cluster_splitk),
    KFGEMM_ENTRY(fp8_coop_128x128_overlap_cluster2), KFGEMM_ENTRY(fp8_coop_128x128_overlap_amn),
    KFGEMM_ENTRY(fp8_coop_128x128_overlap_amn_cluster2), KFGEMM_ENTRY(fp8_coop_128x128_overlap_splitk),
    KFGEMM_ENTRY(fp8_coop_128x128_overlap_amn_splitk), KFGEMM_ENTRY(bf16_coop_128x128_overlap),
    KFGEMM_ENTRY(fp8_fewrow), KFGEMM_ENTRY(fp8_fewrow_exact),
    KFGEMM_ENTRY(fp8_coop_128x128_exact_amn), KFGEMM_ENTRY(fp8_coop_128x128_exact_amn_splitk),
    KFGEMM_ENTRY(fp8_coop_128x128_exact_ak), KFGEMM_ENTRY(fp8_coop_128x128_exact_ak_splitk),
};
#undef KFGEMM_ENTRY
static_assert(sizeof(kTable) / sizeof(kTable[0]) == static_cast<int>(Variant::kCount),
              "variant table and enum disagree");

const Entry* lookup(Variant v) {
  const int i = static_cast<int>(v);
  if (i < 0 || i >= static_cast<int>(Variant::kCount)) return nullptr;
  return &kTable[i];
}
}  // namespace

const char* variant_name(Variant v) {
  const Entry* e = lookup(v);
  return e ? e->name : "unknown";
}

size_t gemm_workspace_size(Variant v, const GemmArgs& args) {
  const Entry* e = lookup(v);
  return e ? e->workspace(args) : 0;
}

size_t gemm_workspace_zeroed_bytes(Variant v, const GemmArgs& args) {
  return is_overlap_split(v) ? variants::overlap_splitk_zeroed_bytes(args) : 0;
}

Status gemm_run(Variant v, const GemmArgs& args, void* workspace, cudaStream_t stream,
                const char** why) {
  const Entry* e = lookup(v);
  if (!e) {
    if (why) *why = "unknown kernel variant";
    return Status::kUnsupported;
  }
  // The layout flags go only to the variants that read them; those check what they need.
  if ((args.a_mn_major && !reads_a_mn_major(v) && !exact_in_place_amn(v)) ||
      (args.b_kperm16 && !reads_a_mn_major(v)) ||
      (args.b_mn_major && !exact_in_place(v))) {
    if (why) *why = "a_mn_major is for variants 13, 14, 16, 20 and 21, b_kperm16 for 13, 14 and 16, b_mn_major for 20 to 23";
    return Status::kUnsupported;
  }
  return e->run(args, workspace, stream, why);
}

}  // namespace kfgemm
