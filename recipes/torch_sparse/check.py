"""Kernel check for torch-sparse 0.6.18: its compiled CUDA ops against plain torch.

API as the sdist defines it: torch_sparse/tensor.py: SparseTensor(row=, col=, value=,
sparse_sizes=, is_sorted=) holds a matrix in CSR order; its rowptr comes from
torch.ops.torch_sparse.ind2ptr (torch_sparse/storage.py). torch_sparse/matmul.py:
matmul(src, other, reduce) with a dense ``other`` is spmm: row i of the result reduces
value[e] * other[col[e]] over the row's nonzeros e (value 1 when the tensor has none). "sum" and
"mean" call torch.ops.torch_sparse.spmm_sum/spmm_mean, autograd functions (csrc/spmm.cpp) whose
backward computes the value gradient with spmm_value_bw_cuda and the dense gradient with the same
spmm kernel on the transpose; "max"/"min" call spmm_max/spmm_min, which also return the argmax:
the position in col of the nonzero chosen, col.numel() for an empty row, whose output is 0 (all
in csrc/cuda/spmm_cuda.cu and reducer.cuh; mean divides by the row's count). The kernel is
dispatched for AT_DISPATCH_ALL_TYPES_AND(Half): no bfloat16. torch.ops.torch_sparse.ind2ptr(ind,
M) and ptr2ind(ptr, E) (csrc/cuda/convert_cuda.cu) turn a sorted row index into CSR pointers and
back. torch_sparse/diag.py: set_diag(src, values=None, k=0) drops the k-th diagonal and inserts
it, ones, in sorted place by the mask of torch.ops.torch_sparse.non_diag_mask
(csrc/cuda/diag_cuda.cu). torch_sparse/rw.py: random_walk(src, start, walk_length) gives
(len(start), walk_length + 1) node ids, each step to a neighbour drawn uniformly
(csrc/cuda/rw_cuda.cu; undefined for a node without neighbours, so this graph has none).

Tolerances: the sdist ships no tests (torch_sparse/testing.py lists the dtypes its upstream
tests cover: half, float, double, int, long, and bfloat16 with torch_scatter > 2.0.9, which the
CUDA spmm kernel does not dispatch, so fp32 and fp16 here). The index ops (ind2ptr, ptr2ind,
set_diag's entries) must match exactly. max and min select one product, and the kernel
multiplies in the dtype as torch does (a half product is rounded from float): exact, and the
argmax must point at the selected product. Sums and means differ from the reference only in the
order and precision of additions: fp32 at torch.testing.assert_close's fp32 defaults (rtol
1.3e-6, atol 1e-5) against fp64; fp16 against an fp32 reference (fp16 products are exact in
fp32) with the harness's baseline rule, the baseline being plain torch adding the same fp16
products in the kernel's order (one add per nonzero of a row, rounded to fp16 each time), never
below fp16's assert_close default. The backward's reductions run over other axes in another
order, so they are held to twice plain fp32 torch's own error against fp64 (never below the fp32
default). random_walk draws at random: every step must follow an edge, and from one node the 8
neighbours must each be drawn within 25% of a uniform share in 8000 walks (over 8 standard
deviations of a fair draw).
"""

OPS = ("spmm_sum", "spmm_mean", "spmm_max", "spmm_min", "spmm_value_bw", "ind2ptr", "ptr2ind",
       "non_diag_mask", "random_walk")

#: (rtol, atol) per dtype name: torch.testing.assert_close's defaults.
TOLERANCE = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5)}


def _matrix(torch, dev, m, n, density, empty_rows):
    """Sorted unique (row, col) of an m x n matrix: row 0 full (more than one warp's 32
    nonzeros), the last ``empty_rows`` rows empty, the rest at ``density``."""
    flat = torch.nonzero(torch.rand(m, n, device=dev) < density).t()
    row, col = flat[0], flat[1]
    keep = (row > 0) & (row < m - empty_rows)
    full = torch.arange(n, device=dev)
    row = torch.cat([torch.zeros_like(full), row[keep]])
    col = torch.cat([full, col[keep]])
    return row, col


def _reduce_rows(torch, prod, row, m, reduce):
    """scatter_reduce of per-nonzero rows into m zero rows, skipping the zeros."""
    out = torch.zeros((m,) + tuple(prod.shape[1:]), dtype=prod.dtype, device=prod.device)
    idx = row.view(-1, *([1] * (prod.dim() - 1))).expand_as(prod)
    return out.scatter_reduce(0, idx, prod, reduce=reduce, include_self=False)


def _sequential_sum(torch, prod, rowptr, m):
    """Row sums adding one nonzero at a time in CSR order, each add in prod's dtype: the
    order of the kernel's loop (one warp lane per output column)."""
    counts = rowptr[1:] - rowptr[:-1]
    acc = torch.zeros((m,) + tuple(prod.shape[1:]), dtype=prod.dtype, device=prod.device)
    for j in range(int(counts.max())):
        has = counts > j
        acc[has] = acc[has] + prod[rowptr[:-1][has] + j]
    return acc


def _spmm(check, torch, SparseTensor, dev):
    from torch_sparse import matmul
    from torch_sparse.matmul import spmm_max, spmm_min

    m, n, k = 256, 128, 48  # 48 columns: a full and a partial block of 32 in the kernel
    row, col = _matrix(torch, dev, m, n, 0.1, empty_rows=8)
    e = row.numel()
    for dtype in (torch.float32, torch.float16):
        rtol, atol = TOLERANCE[str(dtype).removeprefix("torch.")]
        other = torch.randn(n, k, device=dev, dtype=dtype)
        for has_value in (True, False):
            value = torch.randn(e, device=dev, dtype=dtype) if has_value else None
            src = SparseTensor(row=row, col=col, value=value, sparse_sizes=(m, n),
                               is_sorted=True)
            rowptr = src.storage.rowptr()
            prod = other[col] * value[:, None] if has_value else other[col]
            wide = torch.float64 if dtype == torch.float32 else torch.float32
            exact = (other[col].to(wide) * value[:, None].to(wide) if has_value
                     else other[col].to(wide))
            counts = (rowptr[1:] - rowptr[:-1]).clamp(min=1)[:, None]
            seq = _sequential_sum(torch, prod, rowptr, m)
            case = "with values" if has_value else "no values"
            for reduce, op, want, base in (
                    ("sum", "spmm_sum", _reduce_rows(torch, exact, row, m, "sum"), seq),
                    ("mean", "spmm_mean", _reduce_rows(torch, exact, row, m, "mean"),
                     seq / counts.to(dtype))):
                got = matmul(src, other, reduce=reduce)
                if dtype == torch.float32:
                    check.compare(op, got, want, atol=atol, rtol=rtol, case=case)
                else:
                    check.compare(op, got, want, atol=atol, rtol=rtol, baseline=base, case=case)
            for op, fn, name in (("spmm_max", spmm_max, "amax"), ("spmm_min", spmm_min, "amin")):
                out, arg = fn(src, other)
                check.compare(op, out, _reduce_rows(torch, prod, row, m, name), atol=0.0,
                              case=case)
                filled = (rowptr[1:] > rowptr[:-1])[:, None].expand_as(arg)
                picked = prod.gather(0, arg.clamp(max=e - 1))
                check.compare(op, picked[filled], out[filled], atol=0.0, case=f"argmax, {case}")
                check.compare(op, arg[~filled], torch.full_like(arg[~filled], e), atol=0.0,
                              case=f"argmax of empty rows, {case}")

    # A batch of two dense matrices: the kernel's batch index (mat.numel() / (N * K)).
    batch = torch.randn(2, n, k, device=dev)
    src = SparseTensor(row=row, col=col, value=torch.randn(e, device=dev), sparse_sizes=(m, n),
                       is_sorted=True)
    value = src.storage.value()
    want = torch.stack([_reduce_rows(torch, b.double()[col] * value.double()[:, None], row, m,
                                     "sum") for b in batch])
    rtol, atol = TOLERANCE["float32"]
    check.compare("spmm_sum", matmul(src, batch, reduce="sum"), want, atol=atol, rtol=rtol,
                  case="batch of 2")

    # Backward of sum: the value gradient (its own kernel) and the dense one (the transpose).
    value = torch.randn(e, device=dev, requires_grad=True)
    other = torch.randn(n, k, device=dev, requires_grad=True)
    grad = torch.randn(m, k, device=dev)
    src = SparseTensor(row=row, col=col, value=value, sparse_sizes=(m, n), is_sorted=True)
    (matmul(src, other, reduce="sum") * grad).sum().backward()
    o, g, v = other.detach(), grad, value.detach()
    want_v = (o.double()[col] * g.double()[row]).sum(-1)
    base_v = (o[col] * g[row]).sum(-1)
    check.compare("spmm_value_bw", value.grad, want_v, atol=atol, rtol=rtol, baseline=base_v,
                  case="d value of sum")
    dense = torch.zeros(m, n, device=dev, dtype=torch.float64)
    dense[row, col] = v.double()
    base_o = torch.zeros(m, n, device=dev)
    base_o[row, col] = v
    check.compare("spmm_sum", other.grad, dense.t() @ g.double(), atol=atol, rtol=rtol,
                  baseline=base_o.t() @ g, case="backward: d other (spmm of the transpose)")


def _convert(check, torch, dev):
    m, e = 300, 2000
    # Rows 0-9 and 290-299 never drawn: the kernel's first and last threads fill them.
    ind = torch.randint(10, m - 10, (e,), device=dev).sort().values
    ptr = torch.ops.torch_sparse.ind2ptr(ind, m)
    want = torch.cat([ind.new_zeros(1), torch.bincount(ind, minlength=m).cumsum(0)])
    check.compare("ind2ptr", ptr, want, atol=0.0, case="empty first and last rows")
    back = torch.ops.torch_sparse.ptr2ind(want, e)
    check.compare("ptr2ind", back, ind, atol=0.0, case="empty first and last rows")


def _diag(check, torch, SparseTensor, dev):
    from torch_sparse import set_diag

    m, n = 40, 50
    row, col = _matrix(torch, dev, m, n, 0.2, empty_rows=3)
    value = torch.randn(row.numel(), device=dev)
    value[value == 0] = 1.0  # a zero would vanish from the dense reference below
    src = SparseTensor(row=row, col=col, value=value, sparse_sizes=(m, n), is_sorted=True)
    # k = 15 runs past the last column (r + k >= N); k = -5 starts below row 0.
    for k in (0, 15, -5):
        out = set_diag(src, k=k)
        got_row, got_col, got_value = out.coo()
        dense = torch.zeros(m, n, device=dev)
        dense[row, col] = value
        rows = torch.arange(m, device=dev)
        on = (rows + k >= 0) & (rows + k < n)
        dense[rows[on], rows[on] + k] = 1.0
        want = torch.nonzero(dense).t()
        case = f"set_diag k={k}"
        check.compare("non_diag_mask", got_row, want[0], atol=0.0, case=f"{case}, rows")
        check.compare("non_diag_mask", got_col, want[1], atol=0.0, case=f"{case}, cols")
        check.compare("non_diag_mask", got_value, dense[want[0], want[1]], atol=0.0,
                      case=f"{case}, values")


def _random_walk(check, torch, SparseTensor, dev):
    from torch_sparse import random_walk

    n, length, draws = 200, 10, 8000
    adj = torch.rand(n, n, device=dev) < 0.03
    nodes = torch.arange(n, device=dev)
    adj[nodes, (nodes + 1) % n] = True  # no dead ends: the kernel would read past the row
    neighbours = torch.arange(2, 2 + 8 * 20, 20, device=dev)  # node 1's 8 neighbours
    adj[1] = False
    adj[1, neighbours] = True
    row, col = torch.nonzero(adj).t()
    src = SparseTensor(row=row, col=col, sparse_sizes=(n, n), is_sorted=True)
    start = torch.cat([nodes.repeat(10), torch.ones(draws, dtype=torch.long, device=dev)])
    walks = random_walk(src, start, length)
    steps = adj[walks[:, :-1], walks[:, 1:]]
    wrong = int((~steps).sum()) + int((walks[:, 0] != start).sum())
    check.record("random_walk", error=wrong / steps.numel(), tolerance=0.0,
                 metric="fraction_steps_off_an_edge", dtype=walks.dtype,
                 shape=list(walks.shape), case=f"walk_length={length}")
    first = walks[-draws:, 1]
    share = torch.bincount(first, minlength=n)[neighbours].double() / (draws / 8)
    check.record("random_walk", error=float((share - 1).abs().max()), tolerance=0.25,
                 metric="max_relative_deviation_from_uniform", dtype=walks.dtype,
                 shape=[draws], case="first step from a node of degree 8")


def run(check):
    """spmm in fp32 and fp16 (256 x 128 sparse, 10% dense, times 128 x 48 dense), the index
    ops on int64, random_walk on a 200-node graph."""
    torch = check.torch
    from torch_sparse import SparseTensor

    dev = check.device
    _spmm(check, torch, SparseTensor, dev)
    _convert(check, torch, dev)
    _diag(check, torch, SparseTensor, dev)
    _random_walk(check, torch, SparseTensor, dev)
