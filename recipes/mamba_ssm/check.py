"""Kernel check for mamba-ssm 2.3.2.post1: selective_scan_fn against selective_scan_ref.

API as the sdist defines it (mamba_ssm/ops/selective_scan_interface.py):
selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
return_last_state=False) runs the selective_scan_cuda kernels; selective_scan_ref takes the
same arguments and computes the scan step by step in plain torch (fp32). u, delta, z:
(batch, dim, seqlen); A: (dim, dstate) fp32; B, C: (batch, dstate, seqlen) when variable;
D, delta_bias: (dim,) fp32.

Tolerances: mamba's own test of this op (tests/ops/test_selective_scan.py upstream; the sdist
ships no op tests): rtol/atol 6e-4/2e-3 (fp32), 3e-3/5e-3 (fp16), 3e-2/5e-2 (bf16) for the
output and last state; du at 2x those; ddelta at rtol 5x, atol 10x; the fp32 parameters' grads
at rtol/atol 1e-3/1e-3 raised to the input dtype's when z is given (as here), dA's atol 5x;
dB and dC (variable) at the input dtype's. Those tolerances hold for the test's own sizes and
seed (batch 2, dim 4, dstate 8, ``torch.random.manual_seed(0)``), which the check takes too: on an
H100 (torch 2.11.0+cu130) the same tolerances at dim 8, dstate 16 and an unseeded draw failed dA
in fp16 (0.56 against 0.15) and bf16 (3.6 against 3.1), a gradient summed over batch x seqlen
whose error grows with the sizes (state-spaces/mamba issue 255: the test fails as dim grows).
"""

OPS = ("selective_scan_fn", "selective_scan_fn.backward")

#: (rtol, atol) per input dtype name, from mamba's test.
TOLERANCE = {"float32": (6e-4, 2e-3), "float16": (3e-3, 5e-3), "bfloat16": (3e-2, 5e-2)}


def run(check):
    """fp32, fp16, bf16; variable B and C, D, z, delta_bias and softplus: the layer's path."""
    torch = check.torch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    dev = check.device
    batch, dim, dstate, seqlen = 2, 4, 8, 128          # mamba's test's sizes (seqlen: its first)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        torch.random.manual_seed(0)                    # as mamba's test, before each case's draw
        rtol, atol = TOLERANCE[str(dtype).removeprefix("torch.")]
        rtolw, atolw = max(1e-3, rtol), max(1e-3, atol)  # with z, as in mamba's test
        A = (-0.5 * torch.rand(dim, dstate, device=dev, dtype=torch.float32)).requires_grad_()
        B = torch.randn(batch, dstate, seqlen, device=dev, dtype=dtype, requires_grad=True)
        C = torch.randn(batch, dstate, seqlen, device=dev, dtype=dtype, requires_grad=True)
        D = torch.randn(dim, device=dev, dtype=torch.float32, requires_grad=True)
        z = torch.randn(batch, dim, seqlen, device=dev, dtype=dtype, requires_grad=True)
        delta_bias = (0.5 * torch.rand(dim, device=dev, dtype=torch.float32)).requires_grad_()
        u = torch.randn(batch, dim, seqlen, device=dev, dtype=dtype, requires_grad=True)
        delta = (0.5 * torch.rand(batch, dim, seqlen, device=dev, dtype=dtype)).requires_grad_()
        inputs = {"u": u, "delta": delta, "A": A, "B": B, "C": C, "D": D, "z": z,
                  "delta_bias": delta_bias}
        refs = {k: t.detach().clone().requires_grad_() for k, t in inputs.items()}

        out, state = selective_scan_fn(u, delta, A, B, C, D, z=z, delta_bias=delta_bias,
                                       delta_softplus=True, return_last_state=True)
        ref, state_ref = selective_scan_ref(
            refs["u"], refs["delta"], refs["A"], refs["B"], refs["C"], refs["D"], z=refs["z"],
            delta_bias=refs["delta_bias"], delta_softplus=True, return_last_state=True)
        check.compare("selective_scan_fn", out, ref, atol=atol, rtol=rtol, case="out")
        check.compare("selective_scan_fn", state, state_ref, atol=atol, rtol=rtol,
                      case="last_state")

        grad = torch.randn_like(out)
        ref.backward(grad)
        out.backward(grad)
        grad_tolerance = {
            "u": (rtol * 2, atol * 2), "delta": (rtol * 5, atol * 10),
            "A": (rtolw, atolw * 5), "B": (rtol, atol), "C": (rtol, atol),
            "D": (rtolw, atolw), "z": (rtolw, atolw), "delta_bias": (rtolw, atolw),
        }
        for name, (r, a) in grad_tolerance.items():
            want = refs[name].grad
            check.compare("selective_scan_fn.backward", inputs[name].grad,
                          want.to(inputs[name].grad.dtype), atol=a, rtol=r, case=f"d{name}")
