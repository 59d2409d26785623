"""Kernel check for xformers 0.0.35: the 2:4-sparsity kernels its CUDA extension holds.

What the extension really exposes, read from the sdist: on CUDA, xformers._C registers only
the sparse24 ops (xformers/csrc/sparse24/*.cu, under torch.ops.xformers) and
_nvcc_build_version; its attention sources are ROCm-only (csrc/attention/attention.cpp defines
ops under USE_ROCM), and memory_efficient_attention on NVIDIA GPUs runs torch's own kernels
(aten._efficient_attention_forward) or flash-attn's, which are not this wheel's code. So the
check covers the sparse24 ops, against plain torch:

- sparse24_largest_mask_2d(input) -> mask: the 4x4 example of xformers' own test
  (tests/test_sparsity24.py), whose mask is known exactly.
- sparseNM_dense(input, N, M, sort_preproc) (bf16, sizes multiple of 64): the N largest of each
  M consecutive values kept, the rest zeroed; reference by ranking in plain torch, as in
  xformers' test, which allows 0.2% of elements to differ because ties may go either way.
- sparse24_sparsify_both_ways(input) -> (packed, meta, packed_t, meta_t, threads_masks) and
  sparse24_apply_dense_output(input, threads_masks, mul0, mul1): the dense result must keep
  input values exactly where it keeps anything, keep at most 2 of every 4 consecutive values
  along rows and along columns, and with mul0 = mul1 = 1 give the input back exactly.
- sparse24_apply(input, threads_masks) must pack exactly what sparsify_both_ways packed.
- _sparse24_gemm(packed, b, meta_reordered): CUTLASS 2:4 GEMM, compute capability 8.x only
  (gemm.cu refuses others), against the masked dense matmul, fp16 rtol/atol 2e-3/1e-2, bf16
  1e-1/1e-1 (the test's values).
- _sparse24_fp8_sm90_cutlass_gemm(a, a_mdata, b, a_scale=, b_scale=) with
  _sparse24_sm90_cutlass_compress(a): compute capability 9.x only, against torch._scaled_mm,
  rtol/atol 1e-2/1e-2 (the test's values).
"""

OPS = ("sparse24_largest_mask_2d", "sparseNM_dense", "sparse24_sparsify_both_ways",
       "sparse24_apply_dense_output", "sparse24_apply", "_sparse24_gemm",
       "_sparse24_fp8_sm90_cutlass_gemm")

#: (rtol, atol) of the 2:4 GEMM per dtype name, from xformers' test.
GEMM_TOLERANCE = {"float16": (2e-3, 1e-2), "bfloat16": (1e-1, 1e-1)}
#: Fraction of elements sparseNM_dense may choose differently from the reference (ties).
TIE_FRACTION = 0.002


def _groups_over_two(torch, kept):
    """How many runs of 4 consecutive values along rows, and along columns, keep more than 2."""
    rows = kept.reshape(kept.shape[0], -1, 4).sum(-1)
    cols = kept.t().reshape(kept.shape[1], -1, 4).sum(-1)
    return int((rows > 2).sum()) + int((cols > 2).sum())


def _random_mask(torch, shape):
    """A valid 2:4 mask along rows, each group of 4 drawn from the six patterns."""
    patterns = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0],
                             [1, 0, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    pick = torch.randint(0, 6, (shape[0], shape[1] // 4), generator=torch.Generator()
                         .manual_seed(0))
    return patterns[pick].reshape(shape)


def run(check):
    """fp16 and bf16 where the op takes both; bf16 where it takes only that."""
    torch = check.torch
    from xformers import _cpp_lib

    # xformers only logs a warning when xformers._C fails to load (xformers/_cpp_lib.py), so
    # an import succeeds without a single kernel: say why instead of a missing-op error
    if _cpp_lib._cpp_library_load_exception is not None:
        raise RuntimeError(f"xformers._C did not load: {_cpp_lib._cpp_library_load_exception}")
    ops = torch.ops.xformers
    dev = check.device
    major, _ = torch.cuda.get_device_capability(dev)

    for dtype in (torch.float16, torch.bfloat16):
        example = torch.tensor([[4, 3, 2, 1], [0, 0, 0.5, 0.5], [1, 2, 3, 4], [10, 2, -1, 5]],
                               device=dev, dtype=dtype)
        expected = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1]],
                                device=dev, dtype=torch.float32)
        mask = ops.sparse24_largest_mask_2d(example)
        check.compare("sparse24_largest_mask_2d", mask.float(), expected, atol=0.0,
                      case="xformers' 4x4 example")

        x = torch.randn(256, 512, device=dev, dtype=dtype)
        packed, meta, packed_t, meta_t, threads_masks = ops.sparse24_sparsify_both_ways(x)
        dense = ops.sparse24_apply_dense_output(x, threads_masks, mul0=0.0, mul1=1.0)
        kept = dense != 0
        check.compare("sparse24_sparsify_both_ways", dense, x * kept, atol=0.0,
                      case="kept values are the input's")
        check.record("sparse24_sparsify_both_ways", error=_groups_over_two(torch, kept.int()),
                     tolerance=0, metric="groups of 4 keeping more than 2", dtype=dtype,
                     shape=x.shape, case="2:4 along rows and columns")
        same = ops.sparse24_apply_dense_output(x, threads_masks, mul0=1.0, mul1=1.0)
        check.compare("sparse24_apply_dense_output", same, x, atol=0.0,
                      case="mul0=mul1=1 gives the input")
        check.compare("sparse24_apply_dense_output", dense, x * kept, atol=0.0,
                      case="mul0=0 zeroes the pruned")
        packed2, _, packed_t2, _ = ops.sparse24_apply(x, threads_masks)
        check.compare("sparse24_apply", packed2, packed, atol=0.0, case="packed")
        check.compare("sparse24_apply", packed_t2, packed_t, atol=0.0, case="packed_t")

        if major == 8:
            m, n, k = 32, 32, 64
            a = torch.randn(m, k, device=dev, dtype=dtype)
            b = torch.randn(k, n, device=dev, dtype=dtype)
            a_mask = _random_mask(torch, (m, k))
            meta_reordered = ops._sparse24_reorder_meta(ops._sparse24_pack_mask(a_mask))
            # the packing op is registered for CPU tensors (meta_utils.cu)
            packed_a = ops._sparse24_pack_tensor_according_to_mask(a.cpu(), meta_reordered)
            got = ops._sparse24_gemm(packed_a.to(dev), b, meta_reordered.to(dev))
            want = (a.float() * a_mask.to(dev)) @ b.float()
            rtol, atol = GEMM_TOLERANCE[str(dtype).removeprefix("torch.")]
            check.compare("_sparse24_gemm", got, want, atol=atol, rtol=rtol,
                          case="masked dense matmul")

    if major != 8:
        check.skip("_sparse24_gemm", f"CUTLASS 2:4 GEMM runs on compute capability 8.x only; "
                                     f"this GPU is {major}.x")

    a = torch.randn(128, 128, device=dev, dtype=torch.bfloat16)
    for m in (4, 8):
        for preproc in ("largest", "largest_abs"):
            got = ops.sparseNM_dense(a, N=2, M=m, sort_preproc=preproc)
            groups = a.reshape(-1, m)
            keys = groups.abs() if preproc == "largest_abs" else groups
            rank = keys.argsort().argsort()  # 0 = smallest of its group
            want = groups.clone()
            want[rank < m - 2] = 0
            differ = (got != want.reshape_as(a)).float().mean().item()
            check.record("sparseNM_dense", error=differ, tolerance=TIE_FRACTION,
                         metric="fraction of elements differing", dtype=torch.bfloat16,
                         shape=a.shape, case=f"N=2 M={m} {preproc}")

    if major == 9 and int(torch.version.cuda.split(".")[0]) >= 12:
        fp8 = torch.float8_e4m3fn

        def rowwise(t):
            scale = (t.abs().max(1, keepdim=True)[0] / torch.finfo(fp8).max).float()
            return (t / scale).to(fp8), scale

        a = torch.randn(512, 256, device=dev, dtype=torch.bfloat16)
        a[a == 0] = 1
        a = ops.sparseNM_dense(a, N=2, M=4, sort_preproc="largest")
        a8, a_scale = rowwise(a)
        b8, b_scale = rowwise(torch.randn(1024, 256, device=dev, dtype=torch.bfloat16))
        a_packed, a_mdata = ops._sparse24_sm90_cutlass_compress(a8)
        got = ops._sparse24_fp8_sm90_cutlass_gemm(a_packed, a_mdata, b8.T, a_scale=a_scale,
                                                  b_scale=b_scale.T)
        want = torch._scaled_mm(a8, b8.T, scale_a=a_scale, scale_b=b_scale.T,
                                out_dtype=got.dtype)
        check.compare("_sparse24_fp8_sm90_cutlass_gemm", got, want, atol=1e-2, rtol=1e-2,
                      case="against torch._scaled_mm")
    else:
        check.skip("_sparse24_fp8_sm90_cutlass_gemm",
                   f"the fp8 2:4 GEMM runs on compute capability 9.x only; this GPU is "
                   f"{major}.x")
