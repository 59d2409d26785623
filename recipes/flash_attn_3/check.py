"""Kernel check for FlashAttention 3 (flash_attn_3 3.0.0) against scaled_dot_product_attention.

API as the source defines it (hopper/flash_attn_interface.py, installed as the top-level module
``flash_attn_interface``; importing it loads ``flash_attn_3._C``, which registers the ops):
- flash_attn_func(q, k, v, softmax_scale=None, causal=False, ...) -> out, q/k/v of shape
  (batch, seqlen, nheads, headdim), fp16 or bf16 (fp8 e4m3 forward only); no dropout. Its causal
  mask is aligned to the bottom right; with seqlen_q == seqlen_k (as here) that is SDPA's.
- flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...,
  causal=False, ...) -> out, q/k/v of shape (total_tokens, nheads, headdim), cu_seqlens int32.

Where the kernels run: the *_sm90 units are compiled for sm_90a, which runs on compute
capability 9.0 alone (Hopper); the *_sm80 units for sm_80 (Ampere and Ada: 8.x, when the wheel
holds them). On any other GPU every op is skipped, with the reason.

Tolerance: flash-attn's own rule (hopper/test_flash_attn.py): against an fp32 reference, the
forward error may be at most 2x, the gradients' at most 3x, the error of plain torch doing the
same in the same dtype (SDPA in fp16/bf16), with a floor of 1e-3 (fp16) or 1e-2 (bf16) absolute
so that a baseline that happens to be nearly exact fails nothing.
"""

OPS = ("flash_attn_func", "flash_attn_func.backward", "flash_attn_varlen_func")

#: Absolute floor of the tolerance per dtype name (see the module docstring).
FLOOR = {"float16": 1e-3, "bfloat16": 1e-2}


def _sdpa(torch, q, k, v, causal):
    """SDPA on flash-attn's (batch, seqlen, heads, dim) layout."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def run(check):
    """fp16 and bf16, causal and not, head dims 64 and 128: forward, backward, varlen."""
    torch = check.torch
    dev = check.device
    major, minor = torch.cuda.get_device_capability(dev)
    if (major, minor) != (9, 0) and major != 8:
        for op in OPS:
            check.skip(op, f"FlashAttention 3's kernels are sm_90a (compute capability 9.0) "
                           f"and sm_80 (8.x); this GPU is {major}.{minor}")
        return
    from flash_attn_interface import flash_attn_func, flash_attn_varlen_func

    batch, seqlen, heads = 2, 128, 4
    for dtype in (torch.float16, torch.bfloat16):
        floor = FLOOR[str(dtype).removeprefix("torch.")]
        for headdim in (64, 128):
            for causal in (False, True):
                case = f"causal={causal} headdim={headdim} sm{major}{minor}"
                q, k, v = (torch.randn(batch, seqlen, heads, headdim, device=dev, dtype=dtype,
                                       requires_grad=True) for _ in range(3))
                # fp32 reference and same-dtype torch baseline, from the same rounded inputs
                q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
                qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
                out = flash_attn_func(q, k, v, causal=causal)
                ref = _sdpa(torch, q32, k32, v32, causal)
                base = _sdpa(torch, qb, kb, vb, causal)
                check.compare("flash_attn_func", out, ref, atol=floor, baseline=base, factor=2,
                              case=case)
                grad = torch.randn_like(out)
                out.backward(grad)
                ref.backward(grad.float())
                base.backward(grad)
                for name, got, want, baseline in (("dq", q, q32, qb), ("dk", k, k32, kb),
                                                  ("dv", v, v32, vb)):
                    check.compare("flash_attn_func.backward", got.grad, want.grad, atol=floor,
                                  baseline=baseline.grad, factor=3, case=f"{name} {case}")

        # Two sequences of different lengths packed into one batch.
        lengths = (100, 60)
        cu = torch.tensor([0, lengths[0], sum(lengths)], device=dev, dtype=torch.int32)
        q, k, v = (torch.randn(sum(lengths), heads, 64, device=dev, dtype=dtype)
                   for _ in range(3))
        for causal in (False, True):
            out = flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths),
                                         causal=causal)
            for i, n in enumerate(lengths):
                part = slice(int(cu[i]), int(cu[i + 1]))
                pieces = [t[part].unsqueeze(0) for t in (q, k, v)]
                ref = _sdpa(torch, *(p.float() for p in pieces), causal)[0]
                base = _sdpa(torch, *pieces, causal)[0]
                check.compare("flash_attn_varlen_func", out[part], ref, atol=floor,
                              baseline=base, factor=2,
                              case=f"causal={causal} sequence {i} of length {n}")
