"""Kernel check for torch-spline-conv 1.2.2: B-spline bases, weighting and the convolution.

API as the sdist defines it: torch_spline_conv/basis.py: spline_basis(pseudo, kernel_size,
is_open_spline, degree) returns (basis, weight_index), both (E, (degree + 1) ** D), from
torch.ops.torch_spline_conv.spline_basis (csrc/cpu/basis_cpu.cpp, csrc/cuda/basis_cuda.cu): for
each edge e and each s, with k_d = (s // (degree + 1) ** d) % (degree + 1) and
v_d = pseudo[e, d] * (kernel_size[d] - degree * is_open_spline[d]) (one multiply in the
tensor's dtype), weight_index = sum_d ((floor(v_d) + k_d) % kernel_size[d]) * prod_{d' < d}
kernel_size[d'] and basis = prod_d B_{degree, k_d}(v_d - floor(v_d)), B the uniform B-spline
pieces of degree 1 to 3 (Basis<scalar_t, degree>::forward); its backward is d basis / d pseudo.
torch_spline_conv/weighting.py: spline_weighting(x, weight, basis, weight_index) returns
out[e, o] = sum_s basis[e, s] * sum_i x[e, i] * weight[weight_index[e, s], i, o]
(csrc/cpu/weighting_cpu.cpp), with backward kernels for x, weight and basis.
torch_spline_conv/conv.py: spline_conv(x, edge_index, pseudo, weight, kernel_size,
is_open_spline, degree=1, norm=True, root_weight=None, bias=None) weights x[col] per edge,
scatter-adds the result to row, divides by the degree (clamped at 1), adds x @ root_weight and
bias.

Dtypes: the CUDA kernels dispatch float32 and float64 only (AT_DISPATCH_FLOATING_TYPES; the CPU
ones add bfloat16), so both are checked on every device.

Tolerances: the sdist ships no tests (torch_spline_conv/testing.py lists float, double and
bfloat16). The references are the formulas above in plain torch, computed in float64 with
autograd for the gradients. weight_index selects, so it must match exactly; the indices are
computed from the same one-multiply v_d the kernel computes, so floor() sees the same value.
float64 at torch.testing.assert_close's float64 defaults (rtol 1e-7, atol 1e-7). float32 at
its float32 defaults (rtol 1.3e-6, atol 1e-5), widened by the harness's baseline rule to twice
the error of the same reference computed by plain torch in float32: the kernels add their terms
one after another, torch in blocks, so their rounding differs only in order.
"""

OPS = ("spline_basis", "spline_basis_backward", "spline_weighting",
       "spline_weighting_backward", "spline_conv")

#: (rtol, atol) per dtype name: torch.testing.assert_close's defaults.
TOLERANCE = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def _piece(torch, v, k, degree):
    """B_{degree, k}(v) for v in [0, 1): Basis<scalar_t, degree>::forward, term by term."""
    if degree == 1:
        return v if k == 1 else 1 - v
    if degree == 2:
        return (0.5 * v * v - v + 0.5, -v * v + v + 0.5, 0.5 * v * v)[k]
    return ((1 - v) ** 3 / 6, (3 * v ** 3 - 6 * v * v + 4) / 6,
            (-3 * v ** 3 + 3 * v * v + 3 * v + 1) / 6, v ** 3 / 6)[k]


def _basis(torch, pseudo, leaf, kernel_size, is_open, degree):
    """Reference (basis, weight_index) in ``leaf``'s dtype; differentiable in ``leaf``.

    ``pseudo`` is the kernel's input and ``leaf`` the same values in the reference's dtype.
    v = pseudo * scale is one multiply in the input's own dtype, as the kernel computes it, so
    floor() sees the kernel's value; floor() is held constant, so the gradient is the one the
    kernel's backward computes (scale * B'(frac) * the other pieces).
    """
    dtype = leaf.dtype
    scale = (kernel_size - degree * is_open.long()).to(pseudo.dtype)
    v_in = pseudo.detach() * scale
    whole = v_in.floor().to(dtype)
    # v_in's value with the leaf's gradient attached (d v / d leaf = scale)
    v = leaf * scale.to(dtype)
    v = v + (v_in.to(dtype) - v).detach()
    frac = v - whole
    n_dims = pseudo.shape[1]
    basis, index = [], []
    for s in range((degree + 1) ** n_dims):
        b = torch.ones_like(frac[:, 0])
        wi = torch.zeros_like(whole[:, 0], dtype=torch.long)
        offset = 1
        for d in range(n_dims):
            k = (s // (degree + 1) ** d) % (degree + 1)
            b = b * _piece(torch, frac[:, d], k, degree)
            wi = wi + ((whole[:, d].long() + k) % kernel_size[d]) * offset
            offset *= int(kernel_size[d])
        basis.append(b)
        index.append(wi)
    return torch.stack(basis, 1), torch.stack(index, 1)


def _weighting(torch, x, weight, basis, weight_index):
    """out[e, o] = sum_s basis[e, s] * sum_i x[e, i] * weight[weight_index[e, s], i, o]."""
    return torch.einsum("es,ei,esio->eo", basis, x, weight[weight_index])


def _conv(torch, x, edge_index, basis, weight_index, weight, root_weight, bias):
    """spline_conv's own composition (conv.py) over reference parts, norm=True."""
    row, col = edge_index
    per_edge = _weighting(torch, x[col], weight, basis, weight_index)
    out = x.new_zeros((x.shape[0], weight.shape[2])).index_add_(0, row, per_edge)
    deg = x.new_zeros(x.shape[0]).index_add_(0, row, torch.ones_like(row, dtype=x.dtype))
    return out / deg.clamp(min=1).unsqueeze(-1) + x @ root_weight + bias


def _leaves(tensors, dtype):
    """Fresh leaves in ``dtype`` that require grad, one per tensor."""
    return [t.detach().to(dtype).requires_grad_() for t in tensors]


def _compare(check, op, got, want, base, case):
    """float64: its defaults; float32: its defaults, at least twice plain fp32 torch's error."""
    rtol, atol = TOLERANCE[str(got.dtype).removeprefix("torch.")]
    if got.dtype == check.torch.float64:
        check.compare(op, got, want, atol=atol, rtol=rtol, case=case)
    else:
        check.compare(op, got, want, atol=atol, rtol=rtol, baseline=base, case=case)


def _check_basis(check, dtype, degree, pseudo, kernel_size, is_open, grad):
    torch = check.torch
    from torch_spline_conv import spline_basis

    case = f"degree={degree}, open/closed"
    p = pseudo.detach().clone().requires_grad_()
    basis, index = spline_basis(p, kernel_size, is_open, degree)
    (basis * grad).sum().backward()
    refs = {}
    for ref_dtype in (torch.float64, dtype):
        rp = pseudo.detach().to(ref_dtype).requires_grad_()
        rb, ri = _basis(torch, pseudo, rp, kernel_size, is_open, degree)
        (rb * grad.to(ref_dtype)).sum().backward()
        refs[ref_dtype] = (rb.detach(), ri, rp.grad)
    want, base = refs[torch.float64], refs[dtype]
    check.compare("spline_basis", index, want[1], atol=0.0, case=case + ", weight_index")
    _compare(check, "spline_basis", basis, want[0], base[0], case + ", basis")
    _compare(check, "spline_basis_backward", p.grad, want[2], base[2], case + ", d/dpseudo")
    return basis.detach(), index


def run(check):
    """float32 and float64; 2-d pseudo coordinates (one open, one closed spline), degrees 1-3,
    a random graph of 60 nodes and 400 edges, 4 input and 3 output channels."""
    torch = check.torch
    from torch_spline_conv import spline_conv, spline_weighting

    dev = check.device
    nodes, edges, m_in, m_out = 60, 400, 4, 3
    kernel_size = torch.tensor([5, 4], device=dev)
    is_open = torch.tensor([1, 0], dtype=torch.uint8, device=dev)
    n_weights = int(kernel_size.prod())
    for dtype in (torch.float32, torch.float64):
        pseudo = torch.rand(edges, 2, device=dev, dtype=dtype)
        edge_index = torch.randint(0, nodes, (2, edges), device=dev)
        x = torch.rand(nodes, m_in, device=dev, dtype=dtype)
        weight = torch.rand(n_weights, m_in, m_out, device=dev, dtype=dtype)
        root_weight = torch.rand(m_in, m_out, device=dev, dtype=dtype)
        bias = torch.rand(m_out, device=dev, dtype=dtype)
        for degree in (1, 2, 3):
            grad_b = torch.rand(edges, (degree + 1) ** 2, device=dev, dtype=dtype)
            basis, index = _check_basis(check, dtype, degree, pseudo, kernel_size, is_open,
                                        grad_b)

            # weighting: the kernel's own basis and index as inputs to both sides
            case = f"degree={degree}"
            xe = x[edge_index[1]]
            grad_o = torch.rand(edges, m_out, device=dev, dtype=dtype)
            args = _leaves((xe, weight, basis), dtype)
            got = spline_weighting(args[0], args[1], args[2], index)
            (got * grad_o).sum().backward()
            refs = {}
            for ref_dtype in (torch.float64, dtype):
                r = _leaves((xe, weight, basis), ref_dtype)
                out = _weighting(torch, r[0], r[1], r[2], index)
                (out * grad_o.to(ref_dtype)).sum().backward()
                refs[ref_dtype] = (out.detach(), [t.grad for t in r])
            want, base = refs[torch.float64], refs[dtype]
            _compare(check, "spline_weighting", got, want[0], base[0], case)
            for name, g, w, b in zip(("d/dx", "d/dweight", "d/dbasis"), [a.grad for a in args],
                                     want[1], base[1]):
                _compare(check, "spline_weighting_backward", g, w, b, f"{case}, {name}")

            # the whole operator, forward and its gradients in x, pseudo, weight and root_weight
            leaves = _leaves((x, pseudo, weight, root_weight), dtype)
            got = spline_conv(leaves[0], edge_index, leaves[1], leaves[2], kernel_size,
                              is_open, degree, True, leaves[3], bias)
            grad_c = torch.rand_like(got)
            (got * grad_c).sum().backward()
            refs = {}
            for ref_dtype in (torch.float64, dtype):
                r = _leaves((x, pseudo, weight, root_weight), ref_dtype)
                rb, ri = _basis(torch, pseudo, r[1], kernel_size, is_open, degree)
                out = _conv(torch, r[0], edge_index, rb, ri, r[2], r[3], bias.to(ref_dtype))
                (out * grad_c.to(ref_dtype)).sum().backward()
                refs[ref_dtype] = (out.detach(), [t.grad for t in r])
            want, base = refs[torch.float64], refs[dtype]
            _compare(check, "spline_conv", got, want[0], base[0], case)
            for name, g, w, b in zip(("d/dx", "d/dpseudo", "d/dweight", "d/droot_weight"),
                                     [a.grad for a in leaves], want[1], base[1]):
                _compare(check, "spline_conv", g, w, b, f"{case}, {name}")
