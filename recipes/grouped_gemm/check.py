"""Kernel check for grouped-gemm 0.3.0: gmm forward and backward against a loop of matmuls.

API as the sdist defines it (grouped_gemm/ops.py, grouped_gemm/backend.py): gmm(a, b,
batch_sizes, trans_b=False), a (tokens, k) bf16, b (experts, k, n) or with trans_b
(experts, n, k), batch_sizes a 1-d int64 tensor of rows of a per expert summing to tokens;
returns (tokens, n). Backward calls the same backend.gmm for da and (trans_a) for db.

Tolerances: the package's own test (grouped_gemm/ops_test.py in the sdist), bf16 only, against
a loop of a[rows] @ b[i] in bf16: at most 2% of the elements may fall outside
torch.isclose(rtol=1e-5), recorded here as the fraction not close. Because that rule lets 2%
of elements be anything, every output is also compared with an fp32 loop under the harness's
baseline rule (at most twice the error of the same loop of bf16 torch.matmul, and never
below rtol/atol 1e-2: a few bf16 ulps at the outputs' O(1) scale).
"""

OPS = ("gmm", "gmm.backward")

#: The package test's rule: torch.isclose(rtol=1e-5), at most this fraction not close.
NOT_CLOSE_FRACTION = 0.02


def _loop(torch, a, b, batch_sizes, trans_b):
    out, start = [], 0
    for i, size in enumerate(batch_sizes.tolist()):
        rhs = b[i].t() if trans_b else b[i]
        out.append(a[start:start + size] @ rhs)
        start += size
    return torch.cat(out)


def _not_close(torch, got, want):
    mask = torch.isclose(got, want, rtol=1e-5)
    return float((~mask).sum()) / mask.numel()


def run(check):
    """bf16; 8 experts of k=128, n=256 over 1024 tokens split unevenly, with and without trans_b."""
    torch = check.torch
    from grouped_gemm import ops

    dev = check.device
    experts, tokens, k, n = 8, 1024, 128, 256
    # Uneven split with one empty expert, as a router produces.
    batch_sizes = torch.tensor([200, 0, 96, 160, 64, 256, 120, 128])
    assert int(batch_sizes.sum()) == tokens
    for trans_b in (False, True):
        case = "trans_b" if trans_b else "b (k, n)"
        # Scaled as the package's test scales its inputs, so outputs stay O(1).
        a = (torch.randn(tokens, k, device=dev) / k ** 0.5).to(torch.bfloat16)
        shape = (experts, n, k) if trans_b else (experts, k, n)
        b = (torch.randn(*shape, device=dev) / k ** 0.5).to(torch.bfloat16)
        a.requires_grad_()
        b.requires_grad_()
        a_bf, b_bf = (t.detach().clone().requires_grad_() for t in (a, b))
        a32, b32 = (t.detach().float().requires_grad_() for t in (a, b))

        out = ops.gmm(a, b, batch_sizes, trans_b)
        ref_bf = _loop(torch, a_bf, b_bf, batch_sizes, trans_b)
        ref32 = _loop(torch, a32, b32, batch_sizes, trans_b)
        check.record("gmm", error=_not_close(torch, out, ref_bf), tolerance=NOT_CLOSE_FRACTION,
                     metric="fraction_not_close", dtype=out.dtype, shape=out.shape,
                     case=f"{case} vs bf16 loop")
        check.compare("gmm", out, ref32, atol=1e-2, rtol=1e-2, baseline=ref_bf,
                      case=f"{case} vs fp32 loop")

        grad = torch.randn_like(out)
        out.backward(grad)
        ref_bf.backward(grad)
        ref32.backward(grad.float())
        for name, got, bf, full in (("da", a.grad, a_bf.grad, a32.grad),
                                    ("db", b.grad, b_bf.grad, b32.grad)):
            check.record("gmm.backward", error=_not_close(torch, got, bf),
                         tolerance=NOT_CLOSE_FRACTION, metric="fraction_not_close",
                         dtype=got.dtype, shape=got.shape, case=f"{name} {case} vs bf16 loop")
            check.compare("gmm.backward", got, full, atol=1e-2, rtol=1e-2, baseline=bf,
                          case=f"{name} {case} vs fp32 loop")
