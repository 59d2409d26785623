"""Kernel check for torch-cluster 1.6.3: knn, radius and fps against brute force in plain torch.

API as the sdist defines it: torch_cluster/knn.py: knn(x, y, k, batch_x=None, batch_y=None,
cosine=False, ...) returns a (2, E) LongTensor, row 0 the index into y, row 1 the index into x,
the k nearest x of every y (csrc/cuda/knn_cuda.cu: squared Euclidean distance);
torch_cluster/radius.py: radius(x, y, r, batch_x=None, batch_y=None, max_num_neighbors=32, ...)
in the same layout, every x with squared distance < r * r (csrc/cuda/radius_cuda.cu), the first
max_num_neighbors of them; torch_cluster/fps.py: fps(src, batch=None, ratio=0.5,
random_start=True, ...) picks ceil(ratio * n) points per example, with random_start=False
starting at the example's first point, then each time the point whose smallest squared distance
to the points already picked is largest (csrc/cuda/fps_cuda.cu).

Tolerances: the sdist ships no tests. These ops return indices, so they are checked as sets:
the fraction of query points whose neighbours are wrong must be 0. A neighbour is wrong when
its distance is beyond the k-th smallest (knn) or the radius (radius) by more than fp32
rounding (relative 1e-5, computed in fp64), or a neighbour within it is missing. fps must pick
exactly the points a plain fp32 loop picks (random inputs leave no ties).
"""

import math

OPS = ("knn", "radius", "fps")

#: Relative slack for distances compared at a boundary (fp32 kernel, fp64 reference).
SLACK = 1e-5


def _sqdist(torch, y, x):
    return ((y.double()[:, None, :] - x.double()[None, :, :]) ** 2).sum(-1)


def _per_query(torch, edges, m):
    """Neighbour sets of each of the m query points from a (2, E) edge index."""
    sets = [set() for _ in range(m)]
    for q, n in edges.t().tolist():
        sets[q].add(n)
    return sets


def run(check):
    """fp32; two examples (batch vectors) of 3-d points in the unit cube."""
    torch = check.torch
    from torch_cluster import fps, knn, radius

    dev = check.device
    n, m, k, r = 300, 100, 8, 0.2
    x = torch.rand(n, 3, device=dev)
    y = torch.rand(m, 3, device=dev)
    batch_x = (torch.arange(n, device=dev) >= n // 2).long()
    batch_y = (torch.arange(m, device=dev) >= m // 2).long()
    d = _sqdist(torch, y, x)
    d[batch_y[:, None] != batch_x[None, :]] = float("inf")

    got = _per_query(torch, knn(x, y, k, batch_x, batch_y).cpu(), m)
    kth = d.sort(dim=1).values[:, k - 1].cpu()
    dcpu = d.cpu()
    wrong = 0
    for q in range(m):
        limit = float(kth[q]) * (1 + SLACK)
        if len(got[q]) != k or any(float(dcpu[q, i]) > limit for i in got[q]):
            wrong += 1
    check.record("knn", error=wrong / m, tolerance=0.0, metric="fraction_wrong_sets",
                 dtype=x.dtype, shape=[m, k], case=f"k={k}, 2 examples")

    got = _per_query(torch, radius(x, y, r, batch_x, batch_y, max_num_neighbors=n).cpu(), m)
    wrong = 0
    for q in range(m):
        must = {i for i in range(n) if float(dcpu[q, i]) < r * r * (1 - SLACK)}
        may = {i for i in range(n) if float(dcpu[q, i]) < r * r * (1 + SLACK)}
        if not must <= got[q] <= may:
            wrong += 1
    check.record("radius", error=wrong / m, tolerance=0.0, metric="fraction_wrong_sets",
                 dtype=x.dtype, shape=[m, n], case=f"r={r}, 2 examples")

    ratio = 0.25
    got = fps(x, batch_x, ratio=ratio, random_start=False)
    want = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        pts = x[lo:hi]
        count = math.ceil((hi - lo) * ratio)
        best = torch.full((hi - lo,), 5e4, device=dev)  # the kernel's initial distance
        picked = [0]
        for _ in range(count - 1):
            best = torch.minimum(best, ((pts - pts[picked[-1]]) ** 2).sum(-1))
            picked.append(int(best.argmax()))
        want.extend(lo + p for p in picked)
    check.compare("fps", got, torch.tensor(want, device=dev), atol=0.0,
                  case=f"ratio={ratio}, random_start=False, 2 examples")
