"""Slow, obviously-correct references for the kernel tests and the benchmark: plain Python + numpy.

`heap_tree` is the DDTree reference best-first heap (push next sibling and first child on every
pop), with fp32 scores accumulated parent-first and the documented tie rule as heap key:
(-score, parent node index). `visibility` is the per-request numpy ancestor matrix the CPU ports
build, and `walk` follows the posterior down the tree one request at a time.
"""

from __future__ import annotations

import heapq

import numpy as np


def heap_tree(lp: np.ndarray, budget: int) -> list[tuple[int, tuple[int, ...], np.float32]]:
    """Best-first heap over lp [D, K] (rows sorted descending). Returns pop-ordered
    (parent index, rank path, fp32 score) for nodes 1..budget (the root, index 0, is implicit)."""
    depth_max, k = lp.shape
    out: list[tuple[int, tuple[int, ...], np.float32]] = []
    if budget == 0:
        return out
    heap = [(-float(lp[0, 0]), 0, (0,), np.float32(0.0))]
    while len(out) < budget:
        neg, parent, path, parent_score = heapq.heappop(heap)
        score = np.float32(-neg)
        out.append((parent, path, score))
        node = len(out)
        d, r = len(path), path[-1]
        if r + 1 < k:
            sib = np.float32(parent_score + lp[d - 1, r + 1])
            heapq.heappush(heap, (-float(sib) + 0.0, parent, path[:-1] + (r + 1,), parent_score))
        if d < depth_max:
            kid = np.float32(score + lp[d, 0])
            heapq.heappush(heap, (-float(kid) + 0.0, node, path + (0,), score))
    return out


def visibility(parents: list[int]) -> np.ndarray:
    """Ancestor-or-self matrix [n, n] built row by row as vis[i] = vis[parent(i)] | {i}."""
    n = len(parents)
    vis = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            vis[i] = vis[p]
        vis[i, i] = True
    return vis


def walk(tokens: list[int], parents: list[int], posterior: list[int]) -> tuple[list[int], int]:
    """Accepted node path (root first) and bonus token for one request."""
    children: dict[int, dict[int, int]] = {}
    for i, p in enumerate(parents):
        if p >= 0:
            children.setdefault(p, {})[tokens[i]] = i
    path = [0]
    while posterior[path[-1]] in children.get(path[-1], {}):
        path.append(children[path[-1]][posterior[path[-1]]])
    return path, posterior[path[-1]]
