"""Kernel check for mmcv 2.2.0 (the ops build): nms and sigmoid_focal_loss against plain torch.

API as the sdist defines it: mmcv/ops/nms.py: nms(boxes, scores, iou_threshold, offset=0,
score_threshold=0, max_num=-1) returns (dets, inds), inds the kept boxes by descending score,
from ext_module.nms; mmcv/ops/csrc/common/cuda/nms_cuda_kernel.cuh suppresses a box when
inter > iou_threshold * (area_a + area_b - inter), areas (x2 - x1 + offset) * (y2 - y1 + offset).
mmcv/ops/focal_loss.py: sigmoid_focal_loss(input, target, gamma=2.0, alpha=0.25, weight=None,
reduction="mean") (an autograd Function's apply, so positional), input (N, C), target (N,)
int64 class indices; per element (sigmoid_focal_loss_cuda_kernel.cuh)
-alpha (1-p)^gamma log p for the target class and -(1-alpha) p^gamma log(1-p) for the others,
times weight[target]; "mean" divides the sum by N, and backward scales the same way.

Tolerances: the sdist ships no op tests (tests/ holds two unrelated files). nms returns
indices: with distinct scores and the kernel's own IoU rule computed in fp32, the kept indices
must match exactly. The focal loss is elementwise fp32 arithmetic (expf, pow, log): rtol/atol
1e-4/1e-5 against the formula in fp64, for the loss and its gradient; the logits are standard
normal, because for large ones fp32's 1 - p keeps too few digits for any fp32 kernel to match.
"""

OPS = ("nms", "sigmoid_focal_loss", "sigmoid_focal_loss.backward")

#: (rtol, atol) of the fp32 focal loss and its gradient against the fp64 formula.
FOCAL_TOLERANCE = (1e-4, 1e-5)


def _greedy_nms(torch, boxes, scores, iou_threshold, offset):
    order = scores.argsort(descending=True).tolist()
    b = boxes.tolist()
    kept = []
    for i in order:
        x1, y1, x2, y2 = b[i]
        suppressed = False
        for j in kept:
            a1, b1, a2, b2 = b[j]
            w = max(min(x2, a2) - max(x1, a1) + offset, 0.0)
            h = max(min(y2, b2) - max(y1, b1) + offset, 0.0)
            inter = w * h
            area_i = (x2 - x1 + offset) * (y2 - y1 + offset)
            area_j = (a2 - a1 + offset) * (b2 - b1 + offset)
            if inter > iou_threshold * (area_i + area_j - inter):
                suppressed = True
                break
        if not suppressed:
            kept.append(i)
    return torch.tensor(kept, dtype=torch.long)


def _focal(torch, x, target, gamma, alpha, weight):
    p = torch.sigmoid(x)
    onehot = torch.nn.functional.one_hot(target, x.size(1)).to(x.dtype)
    tiny = torch.finfo(torch.float32).tiny
    pos = -alpha * (1 - p) ** gamma * torch.log(p.clamp(min=tiny))
    neg = -(1 - alpha) * p ** gamma * torch.log((1 - p).clamp(min=tiny))
    return (onehot * pos + (1 - onehot) * neg) * weight[target][:, None]


def run(check):
    """fp32: 400 random boxes at two IoU thresholds and both offsets; focal loss with 80
    classes, per-class weights, reductions none and mean."""
    torch = check.torch
    from mmcv.ops import nms, sigmoid_focal_loss

    dev = check.device
    count = 400
    xy = torch.rand(count, 2) * 200
    wh = torch.rand(count, 2) * 60 + 4
    boxes = torch.cat([xy, xy + wh], dim=1)
    scores = torch.randperm(count).float() / count  # distinct: no ordering ties
    for iou_threshold in (0.3, 0.6):
        for offset in (0, 1):
            _, inds = nms(boxes.to(dev), scores.to(dev), iou_threshold, offset=offset)
            want = _greedy_nms(torch, boxes, scores, iou_threshold, offset)
            check.compare("nms", inds.cpu(), want, atol=0.0,
                          case=f"iou {iou_threshold} offset {offset}", shape=[count])

    rtol, atol = FOCAL_TOLERANCE
    n, classes, gamma, alpha = 64, 80, 2.0, 0.25
    x = torch.randn(n, classes, device=dev, requires_grad=True)
    target = torch.randint(0, classes, (n,), device=dev)
    weight = torch.rand(classes, device=dev) + 0.5
    x64 = x.detach().double().requires_grad_()
    for reduction in ("none", "mean"):
        x.grad = x64.grad = None
        got = sigmoid_focal_loss(x, target, gamma, alpha, weight, reduction)
        full = _focal(torch, x64, target, gamma, alpha, weight.double())
        want = full if reduction == "none" else full.sum() / n
        check.compare("sigmoid_focal_loss", got, want, atol=atol, rtol=rtol,
                      case=f"reduction={reduction}")
        grad = torch.randn_like(got)
        got.backward(grad)
        want.backward(grad.double())
        check.compare("sigmoid_focal_loss.backward", x.grad, x64.grad, atol=atol, rtol=rtol,
                      case=f"dinput reduction={reduction}")
