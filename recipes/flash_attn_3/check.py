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
    """SDPA on flash-attn's (batch, seqlen, heads, dim) layout; K and V with fewer heads than Q
    (grouped-query attention) are repeated to Q's, as FlashAttention 3 reads them."""
    groups = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


#: (head dim, query heads, key/value heads): plain attention and grouped-query attention,
#: which FlashAttention 3 takes natively (FlashAttention 2's check has no GQA case).
SHAPES = ((64, 4, 4), (128, 4, 4), (128, 8, 2))


def _dense(check, flash_attn_func, dtype, shape, causal, label):
    """One forward and backward against the fp32 reference and the same-dtype baseline."""
    torch, dev = check.torch, check.device
    floor = FLOOR[str(dtype).removeprefix("torch.")]
    headdim, heads, kv_heads = shape
    q = torch.randn(2, 128, heads, headdim, device=dev, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, 128, kv_heads, headdim, device=dev, dtype=dtype, requires_grad=True)
            for _ in range(2))
    inputs = (q, k, v)
    exact = [t.detach().float().requires_grad_() for t in inputs]
    plain = [t.detach().clone().requires_grad_() for t in inputs]
    case = f"causal={causal} headdim={headdim} heads={heads}/{kv_heads} {label}"
    out = flash_attn_func(*inputs, causal=causal)
    ref, base = _sdpa(torch, *exact, causal), _sdpa(torch, *plain, causal)
    check.compare("flash_attn_func", out, ref, atol=floor, baseline=base, factor=2, case=case)
    grad = torch.randn_like(out)
    for result, g in ((out, grad), (ref, grad.float()), (base, grad)):
        result.backward(g)
    for name, got, want, baseline in zip("qkv", inputs, exact, plain):
        check.compare("flash_attn_func.backward", got.grad, want.grad, atol=floor,
                      baseline=baseline.grad, factor=3, case=f"d{name} {case}")


def _varlen(check, flash_attn_varlen_func, dtype):
    """Two sequences of different lengths packed into one batch, each against SDPA alone."""
    torch, dev = check.torch, check.device
    floor = FLOOR[str(dtype).removeprefix("torch.")]
    lengths = (100, 60)
    bounds = torch.tensor([0, lengths[0], sum(lengths)], device=dev, dtype=torch.int32)
    packed = [torch.randn(sum(lengths), 4, 64, device=dev, dtype=dtype) for _ in range(3)]
    for causal in (False, True):
        out = flash_attn_varlen_func(*packed, bounds, bounds, max(lengths), max(lengths),
                                     causal=causal)
        for i, n in enumerate(lengths):
            rows = slice(int(bounds[i]), int(bounds[i + 1]))
            one = [t[rows].unsqueeze(0) for t in packed]
            check.compare("flash_attn_varlen_func", out[rows],
                          _sdpa(torch, *(t.float() for t in one), causal)[0], atol=floor,
                          baseline=_sdpa(torch, *one, causal)[0], factor=2,
                          case=f"causal={causal} sequence {i} of length {n}")


def run(check):
    """fp16 and bf16, causal and not, head dims 64 and 128 and a GQA shape: forward, backward,
    varlen; on compute capability 9.0 (sm_90a) or 8.x (sm_80) only."""
    torch = check.torch
    major, minor = torch.cuda.get_device_capability(check.device)
    if (major, minor) != (9, 0) and major != 8:
        for op in OPS:
            check.skip(op, f"FlashAttention 3's kernels are sm_90a (compute capability 9.0) "
                           f"and sm_80 (8.x); this GPU is {major}.{minor}")
        return
    from flash_attn_interface import flash_attn_func, flash_attn_varlen_func

    for dtype in (torch.float16, torch.bfloat16):
        for shape in SHAPES:
            for causal in (False, True):
                _dense(check, flash_attn_func, dtype, shape, causal, f"sm{major}{minor}")
        _varlen(check, flash_attn_varlen_func, dtype)
