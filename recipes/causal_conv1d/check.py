"""Kernel check for causal-conv1d 1.6.1 against the package's own plain-torch references.

API as the sdist defines it (causal_conv1d/causal_conv1d_interface.py):
- causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
  return_final_states=False, final_states_out=None, activation=None), x (batch, dim, seqlen),
  weight (dim, width), bias (dim,); activation None, "silu" or "swish". Reference:
  causal_conv1d_ref(x, weight, bias=None, initial_states=None, ...), built on F.conv1d.
- causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
  conv_state_indices=None), x (batch, dim, seqlen), conv_state (batch, dim, state_len) updated
  in place. Reference: causal_conv1d_update_ref(x, conv_state, weight, bias, activation,
  cache_seqlens).

Tolerances: the package's own tests (tests/test_causal_conv1d.py in the sdist): outputs and dx
rtol/atol 3e-4/1e-3 (fp32), 3e-3/5e-3 (fp16), 1e-2/5e-2 (bf16); dweight and dbias (fp32
parameters) 1e-3/1e-3; the updated conv_state must equal the reference's exactly.
"""

OPS = ("causal_conv1d_fn", "causal_conv1d_fn.backward", "causal_conv1d_update")

#: (rtol, atol) per input dtype name, from the package's tests.
TOLERANCE = {"float32": (3e-4, 1e-3), "float16": (3e-3, 5e-3), "bfloat16": (1e-2, 5e-2)}
#: (rtol, atol) of the fp32 weight and bias gradients.
WEIGHT_TOLERANCE = (1e-3, 1e-3)


def run(check):
    """fp32, fp16, bf16; channel-first and channel-last layouts; silu; width 4."""
    torch = check.torch
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    from causal_conv1d.causal_conv1d_interface import (causal_conv1d_ref,
                                                       causal_conv1d_update_ref)

    dev = check.device
    batch, dim, seqlen, width = 2, 64, 256, 4
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        rtol, atol = TOLERANCE[str(dtype).removeprefix("torch.")]
        for channel_last in (False, True):
            case = "silu channel-last" if channel_last else "silu channel-first"
            if channel_last:
                x = torch.randn(batch, seqlen, dim, device=dev, dtype=dtype).transpose(1, 2)
            else:
                x = torch.randn(batch, dim, seqlen, device=dev, dtype=dtype)
            x.requires_grad_()
            weight = torch.randn(dim, width, device=dev, dtype=torch.float32,
                                 requires_grad=True)
            bias = torch.randn(dim, device=dev, dtype=torch.float32, requires_grad=True)
            x_ref, weight_ref, bias_ref = (t.detach().clone().requires_grad_()
                                           for t in (x, weight, bias))
            out = causal_conv1d_fn(x, weight, bias, activation="silu")
            ref = causal_conv1d_ref(x_ref, weight_ref, bias_ref, activation="silu")
            check.compare("causal_conv1d_fn", out, ref, atol=atol, rtol=rtol, case=case)
            grad = torch.randn_like(out)
            out.backward(grad)
            ref.backward(grad)
            check.compare("causal_conv1d_fn.backward", x.grad, x_ref.grad.to(dtype),
                          atol=atol, rtol=rtol, case=f"dx {case}")
            wr, wa = WEIGHT_TOLERANCE
            check.compare("causal_conv1d_fn.backward", weight.grad, weight_ref.grad,
                          atol=wa, rtol=wr, case=f"dweight {case}")
            check.compare("causal_conv1d_fn.backward", bias.grad, bias_ref.grad,
                          atol=wa, rtol=wr, case=f"dbias {case}")

        # One decoding step against a rolling state, as inference calls it.
        state_len = width + 2
        x = torch.randn(batch, 1, dim, device=dev, dtype=dtype).transpose(1, 2)
        conv_state = torch.randn(batch, state_len, dim, device=dev,
                                 dtype=dtype).transpose(1, 2)
        conv_state_ref = conv_state.detach().clone()
        weight = torch.randn(dim, width, device=dev, dtype=torch.float32)
        bias = torch.randn(dim, device=dev, dtype=torch.float32)
        out = causal_conv1d_update(x, conv_state, weight, bias, activation="silu")
        ref = causal_conv1d_update_ref(x, conv_state_ref, weight, bias, activation="silu")
        check.compare("causal_conv1d_update", out, ref, atol=atol, rtol=rtol, case="silu out")
        check.compare("causal_conv1d_update", conv_state, conv_state_ref, atol=0.0,
                      case="conv_state")
