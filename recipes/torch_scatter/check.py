"""Kernel check for torch-scatter 2.1.2: its compiled reductions against torch's scatter_reduce.

API as the sdist defines it: torch_scatter/scatter.py: scatter(src, index, dim=-1, out=None,
dim_size=None, reduce="sum"); "sum" and "mean" are plain torch (scatter_add_), "max" and "min"
call the compiled torch.ops.torch_scatter.scatter_max/scatter_min and return (out, argmax);
torch_scatter/segment_csr.py: segment_csr(src, indptr, out=None, reduce="sum") reduces along
dim indptr.dim() - 1 over the ranges indptr[i]:indptr[i + 1]; torch_scatter/segment_coo.py:
segment_coo(src, index, out=None, dim_size=None, reduce="sum") with a sorted index. Both call
torch.ops.torch_scatter.segment_{sum,mean,min,max}_{csr,coo} (csrc/cuda/*.cu). Empty segments
give 0, as scatter_reduce(include_self=False) into zeros does.

Tolerances: the sdist ships no tests (torch_scatter/testing.py lists the dtypes they cover:
half, bfloat16, float, double, int, long). max and min select an element, so they must match
exactly. Sums and means differ from the reference only in the order of additions: fp32 at
torch.testing.assert_close's fp32 defaults (rtol 1.3e-6, atol 1e-5), fp16/bf16 against an fp32
reference with the harness's baseline rule (at most twice the error of plain torch computing
the same reduction in that dtype, and never below the dtype's assert_close default).
"""

OPS = ("scatter_max", "scatter_min", "segment_csr", "segment_coo")

#: (rtol, atol) per dtype name: torch.testing.assert_close's defaults.
TOLERANCE = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}


def _reference(torch, src, index, size, reduce):
    """scatter_reduce along dim 0 into zeros, skipping the zeros (include_self=False)."""
    out = torch.zeros((size,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    return out.scatter_reduce(0, idx, src, reduce=reduce, include_self=False)


def run(check):
    """fp32, fp16, bf16; 1000 rows of 16 features into 64 segments, some of them empty."""
    torch = check.torch
    from torch_scatter import scatter, scatter_max, segment_coo, segment_csr

    dev = check.device
    rows, feats, size = 1000, 16, 64
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        rtol, atol = TOLERANCE[str(dtype).removeprefix("torch.")]
        src = torch.randn(rows, feats, device=dev, dtype=dtype)
        # Unsorted for scatter; indices >= 60 never drawn, so the last segments stay empty.
        index = torch.randint(0, size - 4, (rows,), device=dev)
        for reduce, op, torch_name in (("max", "scatter_max", "amax"),
                                       ("min", "scatter_min", "amin")):
            got = scatter(src, index, dim=0, dim_size=size, reduce=reduce)
            want = _reference(torch, src, index, size, torch_name)
            check.compare(op, got, want, atol=0.0, case=f"scatter reduce={reduce}")
        # argmax must point at the selected element (src.size(0) for an empty segment).
        out, arg = scatter_max(src, index, dim=0, dim_size=size)
        filled = arg < rows
        picked = src.gather(0, arg.clamp(max=rows - 1))
        check.compare("scatter_max", picked[filled], out[filled], atol=0.0, case="argmax")

        sorted_index = index.sort().values
        counts = torch.bincount(sorted_index, minlength=size)
        indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        for reduce, torch_name in (("sum", "sum"), ("mean", "mean"), ("max", "amax"),
                                   ("min", "amin")):
            want32 = _reference(torch, src.float(), sorted_index, size, torch_name)
            base = _reference(torch, src, sorted_index, size, torch_name)
            exact = reduce in ("max", "min")
            for op, got in (("segment_csr", segment_csr(src, indptr, reduce=reduce)),
                            ("segment_coo", segment_coo(src, sorted_index, dim_size=size,
                                                        reduce=reduce))):
                if exact:
                    check.compare(op, got, base, atol=0.0, case=f"reduce={reduce}")
                elif dtype == torch.float32:
                    check.compare(op, got, want32, atol=atol, rtol=rtol,
                                  case=f"reduce={reduce}")
                else:
                    check.compare(op, got, want32, atol=atol, rtol=rtol, baseline=base,
                                  case=f"reduce={reduce}")
