"""Step 5 of the guide, as written, with only the loader line pointed at our hub.

Run after `kernelforge build` + `kernelforge publish --repo kernels-community/gemm`;
the lines after the snippet check the result against the package's reference.
"""

import torch

from kernelforge import get_kernel

# Load the kernel from the Hub
gemm = get_kernel("kernels-community/gemm")

# Matrix dimensions (must be supported - see gemm_launcher.cpp)
M, N, K = 1024, 1536, 7168
QUANT_SIZE = 128

# Setup device
device = torch.device("cuda")

# Create inputs - kernel expects A:(K,M), B:(K,N)
A_fp32 = torch.randn(M, K, device=device)
B_fp32 = torch.randn(K, N, device=device)

# Convert to FP8
A_fp8 = A_fp32.to(torch.float8_e4m3fnuz)
B_fp8 = B_fp32.to(torch.float8_e4m3fnuz)

# Create scale factors (uniform scaling)
A_scale = torch.ones(K // QUANT_SIZE, M, device=device, dtype=torch.float32)
B_scale = torch.ones(K // QUANT_SIZE, N // QUANT_SIZE, device=device, dtype=torch.float32)

C = torch.zeros(M, N, device=device, dtype=torch.bfloat16)

# Use the kernel
result = gemm.gemm(A_fp8, B_fp8, A_scale, B_scale, C)

# --- check (not part of the guide) ---
# The snippet runs the default precision="fast" (FP8 tensor cores), whose contract is
# calc_diff < 1e-5; precision="exact" must also pass the challenge's checker.
ref = gemm.reference.gemm_reference(A_fp8, B_fp8, A_scale, B_scale)
diff = gemm.reference.calc_diff(result, ref)
bad = gemm.reference.challenge_mismatches(result, A_fp8, B_fp8.t(), A_scale.t(), B_scale.t())
exact = gemm.gemm(A_fp8, B_fp8, A_scale, B_scale, precision="exact")
diff_x = gemm.reference.calc_diff(exact, ref)
bad_x = gemm.reference.challenge_mismatches(exact, A_fp8, B_fp8.t(), A_scale.t(), B_scale.t())
print(f"step 5: result is C: {result is C}; fast: calc_diff {diff:.3g}, checker mismatches "
      f"{bad} of {C.numel()}; exact: calc_diff {diff_x:.3g}, checker mismatches {bad_x}")
assert result is C and diff < 1e-5 and diff_x < 1e-5 and bad_x == 0
