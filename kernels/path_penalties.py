"""SGLang's logit adjustments at every tree node, with the node's own path counted as output.

Plain decoding adjusts the logits of the next token from the request's output-token counts c:
    additive:  x -= frequency * c + presence * (c > 0)   (and -inf on stop tokens while the
               output is shorter than min_new_tokens)
    scaling:   where c > 0: x = x * r if x < 0 else x / r   (repetition penalty r)
    bias:      x += logit_bias
in that order (SGLang's order when the penalties are accumulated, as in overlap scheduling and
its speculative verify). At tree node j the output so far is the request's output plus the
tokens of j's path (j and its ancestors, the root excluded: the root is the last committed
token), so c there is counts + path counts and the output length is length + depth.

Only a few logits change: a request's touched tokens (nonzero counts, stop tokens, logit bias:
a few hundred of a 152k vocabulary) and each node's <= depth path tokens. On CUDA each request's
touched tokens are listed (`touched_tokens`, one pass over the counts; or kept from round to round
by the runtime, `TouchedLists`), then one program per node row reads and
rewrites just those logits in place (`sparse_adjust_triton`; a request with more than TOUCHED_CAP
touched tokens is adjusted over its whole rows). The reference (`path_adjust_torch`, the CPU path)
adjusts densely, then recomputes each node's path tokens and scatters them back. Both equal each
other bit for bit: the same fp32 operations in the same order, no fused multiply-add, IEEE
division. The walk to the root that lists each node's path tokens is one Triton launch
(`path_tokens`). Fixed shapes, no host sync, capturable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Penalties:
    """Per-request penalty state, [bs] unless noted; any of them None when unused."""

    counts: torch.Tensor  # [bs, V] output-token counts before this round (root included), or [pool, V] with rows
    frequency: torch.Tensor | None = None
    presence: torch.Tensor | None = None
    repetition: torch.Tensor | None = None
    out_len: torch.Tensor | None = None  # output length before this round (root included)
    min_new_tokens: torch.Tensor | None = None
    stop_tokens: torch.Tensor | None = None  # [bs, V] bool
    rows: torch.Tensor | None = None  # [bs] int: request b's row of `counts` (read in place, no [bs, V] gather)
    lists: tuple[torch.Tensor, torch.Tensor] | None = None  # kept touched lists (ids, cnt) by the same rows

    def request_counts(self) -> torch.Tensor:
        """fp32 [bs, V]: each request's counts."""
        return (self.counts if self.rows is None else self.counts[self.rows.long()]).float()

    def count_rows(self) -> torch.Tensor:
        """int64 [bs]: each request's row of `counts`."""
        if self.rows is not None:
            return self.rows.to(torch.int64).contiguous()
        return torch.arange(self.counts.shape[0], device=self.counts.device)


def _adjust(x: torch.Tensor, c: torch.Tensor, pen: Penalties, stop: torch.Tensor | None,
            short: torch.Tensor | None, bias: torch.Tensor | None, idx: tuple) -> torch.Tensor:
    """x adjusted for counts c; per-request tensors are indexed by `idx` to broadcast to x."""
    seen = c > 0
    if pen.frequency is not None:
        x = x - pen.frequency[idx] * c
    if pen.presence is not None:
        x = x - torch.where(seen, pen.presence[idx], 0.0)
    if stop is not None:
        x = torch.where(stop & short, float("-inf"), x)
    if pen.repetition is not None:
        r = pen.repetition[idx]
        x = torch.where(seen, torch.where(x < 0, x * r, x / r), x)
    if bias is not None:
        x = x + bias
    return x


@triton.jit
def _walk_kernel(tokens_ptr, parent_ptr, out_ptr, n, D):
    """`path_tokens_torch` for one node row (b * n + j): up to D steps towards the root."""
    row = tl.program_id(0)
    base = (row // n).to(tl.int64) * n
    node = (row % n).to(tl.int64)
    for s in range(D):
        real = node > 0
        at = base + tl.maximum(node, 0)
        tl.store(out_ptr + row.to(tl.int64) * D + s, tl.where(real, tl.load(tokens_ptr + at).to(tl.int64), -1))
        node = tl.where(real, tl.load(parent_ptr + at).to(tl.int64), 0)


def path_tokens_triton(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """`path_tokens_torch` in one launch (the torch loop takes ~6 small kernels per depth step)."""
    bs, n = tokens.shape
    out = torch.empty((bs, n, max_depth), dtype=torch.int64, device=tokens.device)
    if bs * n and max_depth:
        _walk_kernel[(bs * n,)](tokens.contiguous(), parent.contiguous(), out, n, max_depth)
    return out


def path_tokens(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """int64[bs, n, max_depth]: the tokens of node j and its ancestors (root excluded), -1 beyond."""
    walk = path_tokens_triton if tokens.is_cuda else path_tokens_torch
    return walk(tokens, parent, max_depth)


def path_tokens_torch(tokens: torch.Tensor, parent: torch.Tensor, max_depth: int) -> torch.Tensor:
    """`path_tokens`'s reference."""
    bs, n = tokens.shape
    out = torch.full((bs, n, max_depth), -1, dtype=torch.int64, device=tokens.device)
    node = torch.arange(n, device=tokens.device).expand(bs, n)
    for s in range(max_depth):
        real = node > 0
        out[:, :, s] = torch.where(real, tokens.gather(1, node.clamp(min=0)), -1)
        node = torch.where(real, parent.gather(1, node.clamp(min=0)), 0)
    return out


# Tokens a request's adjustment can change (nonzero counts, stop tokens, logit bias) listed per
# request up to this many; a request with more is adjusted densely (still one pass, in place).
TOUCHED_CAP = 8192
SPARSE_CHUNK = 256
DENSE_BLOCK = 1024


@triton.jit
def _touched_kernel(counts_ptr, rows_ptr, out_rows_ptr, stop_ptr, bias_ptr, ids_ptr, cnt_ptr, flags_ptr, V, CAP,
                    HAS_STOP: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_FLAGS: tl.constexpr, BLOCK: tl.constexpr):
    """Append block pid(1) of request pid(0)'s touched tokens to list row out_rows[pid(0)] (any
    order: each token once); with flags, also write that row's listed flag of every token in the block."""
    b = tl.program_id(0).to(tl.int64)
    out_row = tl.load(out_rows_ptr + b).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = idx < V
    flag = tl.load(counts_ptr + tl.load(rows_ptr + b) * V + idx, mask=live, other=0.0) > 0
    if HAS_STOP:
        flag = flag | (tl.load(stop_ptr + b * V + idx, mask=live, other=0) != 0)
    if HAS_BIAS:
        flag = flag | (tl.load(bias_ptr + b * V + idx, mask=live, other=0.0) != 0)
    flag = (flag & live).to(tl.int32)
    k = tl.sum(flag, axis=0)
    if k > 0:
        pos = tl.atomic_add(cnt_ptr + out_row, k) + tl.cumsum(flag, axis=0) - 1
        tl.store(ids_ptr + out_row * CAP + pos, idx, mask=(flag != 0) & (pos < CAP))
    if HAS_FLAGS:
        tl.store(flags_ptr + out_row * V + idx, flag.to(tl.int8), mask=live)


@triton.jit
def _append_kernel(tokens_ptr, lengths_ptr, rows_ptr, ids_ptr, cnt_ptr, flags_ptr, V, CAP, L, LP: tl.constexpr):
    """Request pid(0)'s committed tokens (its first lengths[b] of L) that its list row does not hold
    yet, appended once each (a token committed twice in the round is its first occurrence)."""
    b = tl.program_id(0).to(tl.int64)
    row = tl.load(rows_ptr + b).to(tl.int64)
    i = tl.arange(0, LP)
    live = i < tl.minimum(tl.load(lengths_ptr + b).to(tl.int32), L)
    tok = tl.load(tokens_ptr + b * L + i, mask=live, other=0).to(tl.int64)
    earlier = (tok[:, None] == tok[None, :]) & (i[None, :] < i[:, None]) & live[None, :]
    first = live & (tl.sum(earlier.to(tl.int32), axis=1) == 0)
    new = first & (tl.load(flags_ptr + row * V + tok, mask=first, other=1) == 0)
    count = tl.load(cnt_ptr + row)
    pos = count + tl.cumsum(new.to(tl.int32), axis=0) - 1
    tl.store(ids_ptr + row * CAP + pos, tok.to(tl.int32), mask=new & (pos < CAP))
    tl.store(flags_ptr + row * V + tok, tl.full([LP], 1, tl.int8), mask=new)
    tl.store(cnt_ptr + row, count + tl.sum(new.to(tl.int32), axis=0))


def _bytes(mask: torch.Tensor) -> torch.Tensor:
    """A mask as the int8 the kernels read: a bool mask's own bytes (no [bs, V] copy per call)."""
    return mask.contiguous().view(torch.int8) if mask.dtype == torch.bool else mask.to(torch.int8).contiguous()


def touched_tokens(pen: Penalties, logit_bias: torch.Tensor | None, cap: int = TOUCHED_CAP
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request, the tokens whose logit its adjustment can change: int32 ids [bs, cap] (the first
    min(count, cap) in any order, each token once) and int32 count [bs] (the whole count, possibly
    above cap). One pass over the counts. (Listing each token's count, stop flag and bias beside it,
    for the next pass to read in order, was slower on the H200: docs/kernels.md.)"""
    rows = pen.count_rows()
    bs, vocab = rows.shape[0], pen.counts.shape[1]
    dev = pen.counts.device
    ids = torch.empty((bs, cap), dtype=torch.int32, device=dev)
    cnt = torch.zeros(bs, dtype=torch.int32, device=dev)
    _list_touched(pen.counts, rows, torch.arange(bs, device=dev), pen.stop_tokens, logit_bias, ids, cnt, None)
    return ids, cnt


def _list_touched(counts: torch.Tensor, rows: torch.Tensor, out_rows: torch.Tensor, stop: torch.Tensor | None,
                  bias: torch.Tensor | None, ids: torch.Tensor, cnt: torch.Tensor, flags: torch.Tensor | None) -> None:
    """Request b's touched tokens (counts row rows[b], stop / bias row b) appended to list row
    out_rows[b] of ids / cnt (and, with flags, that row's flags written)."""
    bs, vocab = rows.shape[0], counts.shape[1]
    if not bs:
        return
    _touched_kernel[(bs, triton.cdiv(vocab, DENSE_BLOCK))](
        counts.float().contiguous(), rows, out_rows, _bytes(stop) if stop is not None else cnt,
        bias.float().contiguous() if bias is not None else cnt, ids, cnt, flags if flags is not None else cnt,
        vocab, ids.shape[1], HAS_STOP=stop is not None, HAS_BIAS=bias is not None, HAS_FLAGS=flags is not None,
        BLOCK=DENSE_BLOCK)


class TouchedLists:
    """Each pool row's touched tokens, kept from round to round instead of listed from the whole
    [bs, V] counts every round (27 us at batch 64 on the H200): listed from scratch when a request
    (re)starts on a row, then extended at each commit by the tokens counted for the first time.
    A row's flags [V] (one byte per token: a quarter of its counts' memory) say which tokens its list
    holds, so no token is listed twice; stop tokens and
    logit bias are a request's own from its start, so they are listed then. `Penalties.lists` takes
    `(ids, cnt)`, read by the counts' rows."""

    def __init__(self, pool: int, vocab: int, device: torch.device | str, cap: int = TOUCHED_CAP) -> None:
        self.ids = torch.zeros((pool, cap), dtype=torch.int32, device=device)
        self.cnt = torch.zeros(pool, dtype=torch.int32, device=device)
        self.flags = torch.zeros((pool, vocab), dtype=torch.int8, device=device)

    def restart(self, counts: torch.Tensor, rows: torch.Tensor, stop: torch.Tensor | None,
                bias: torch.Tensor | None) -> None:
        """List rows `rows` [k] from scratch: counts' rows `rows`, the requests' stop / bias rows [k, V]."""
        rows = rows.to(torch.int64).contiguous()
        self.cnt[rows] = 0
        _list_touched(counts, rows, rows, stop, bias, self.ids, self.cnt, self.flags)

    def append(self, rows: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        """Add the committed tokens [bs, L] (the first lengths[b] of each) to rows `rows` [bs] (distinct)."""
        bs, length = tokens.shape
        if bs and length:
            _append_kernel[(bs,)](tokens.contiguous(), lengths.contiguous(), rows.to(torch.int64).contiguous(),
                                  self.ids, self.cnt, self.flags, self.flags.shape[1], self.ids.shape[1], length,
                                  LP=triton.next_power_of_2(length))

    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ids, self.cnt


@triton.jit
def _adjusted(x, c, freq, pres, rep, stop, short, bias, HAS_FREQ: tl.constexpr, HAS_PRES: tl.constexpr,
              HAS_REP: tl.constexpr, HAS_STOP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """`_adjust` in Triton: the same fp32 operations in the same order (the launch disables fused
    multiply-add; the division is IEEE's)."""
    seen = c > 0
    if HAS_FREQ:
        x = x - freq * c
    if HAS_PRES:
        x = x - tl.where(seen, pres, 0.0)
    if HAS_STOP:
        x = tl.where(stop & short, float("-inf"), x)
    if HAS_REP:
        x = tl.where(seen, tl.where(x < 0, x * rep, tl.math.div_rn(x, rep)), x)
    if HAS_BIAS:
        x = x + bias
    return x


@triton.jit
def _request_values(req_counts, req_stop, req_bias, tok, live, HAS_STOP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """What the adjustment reads of the request at tokens `tok`: (count, stop token, bias)."""
    c = tl.load(req_counts + tok, mask=live, other=0.0)
    stop = tl.zeros(tok.shape, tl.int1)
    bias = tl.zeros(tok.shape, tl.float32)
    if HAS_STOP:
        stop = tl.load(req_stop + tok, mask=live, other=0) != 0
    if HAS_BIAS:
        bias = tl.load(req_bias + tok, mask=live, other=0.0)
    return c, stop, bias


@triton.jit
def _adjusted_at(x_row, tok, live, c_req, stop, bias, path, on_path, freq, pres, rep, short, HAS_FREQ: tl.constexpr,
                 HAS_PRES: tl.constexpr, HAS_REP: tl.constexpr, HAS_STOP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Adjusted logits of the row's tokens `tok` (where `live`), their count being the request's
    (`c_req`) plus their occurrences on the row's path."""
    x = tl.load(x_row + tok, mask=live, other=0.0)
    c = c_req + tl.sum(((tok[:, None] == path[None, :]) & on_path[None, :]).to(tl.float32), axis=1)
    return _adjusted(x, c, freq, pres, rep, stop, short, bias, HAS_FREQ, HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)


@triton.jit
def _sparse_kernel(x_ptr, stride_b, stride_n, ids_ptr, cnt_ptr, list_rows_ptr, path_ptr, counts_ptr, rows_ptr,
                   freq_ptr, pres_ptr, rep_ptr, stop_ptr, short_ptr, bias_ptr, n, V, D, CAP,
                   HAS_FREQ: tl.constexpr, HAS_PRES: tl.constexpr, HAS_REP: tl.constexpr, HAS_STOP: tl.constexpr,
                   HAS_BIAS: tl.constexpr, DP: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Node row pid(0) = b * n + j adjusted in place (fp32): only its request's touched tokens and its
    path tokens change, so only those are read and written; a request with more than CAP touched
    tokens is adjusted over the whole row instead. Every path token's raw logit is read before any
    write (a path token may also be a listed one: both compute the same value from the raw logit)."""
    row = tl.program_id(0)
    b = (row // n).to(tl.int64)
    x_row = x_ptr + b * stride_b + (row % n).to(tl.int64) * stride_n
    req_counts = counts_ptr + tl.load(rows_ptr + b) * V
    req_stop, req_bias = stop_ptr + b * V, bias_ptr + b * V
    freq = 0.0
    pres = 0.0
    rep = 0.0
    short = False
    if HAS_FREQ:
        freq = tl.load(freq_ptr + b)
    if HAS_PRES:
        pres = tl.load(pres_ptr + b)
    if HAS_REP:
        rep = tl.load(rep_ptr + b)
    if HAS_STOP:
        short = tl.load(short_ptr + row) != 0
    d = tl.arange(0, DP)
    path = tl.load(path_ptr + row.to(tl.int64) * D + d, mask=d < D, other=-1)
    on_path = path >= 0
    list_row = tl.load(list_rows_ptr + b).to(tl.int64)
    cnt = tl.load(cnt_ptr + list_row)
    if cnt <= CAP:
        path_tok = tl.maximum(path, 0)
        path_c, path_stop, path_bias = _request_values(req_counts, req_stop, req_bias, path_tok, on_path, HAS_STOP,
                                                       HAS_BIAS)
        path_new = _adjusted_at(x_row, path_tok, on_path, path_c, path_stop, path_bias, path, on_path, freq, pres, rep,
                                short, HAS_FREQ, HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)
        tl.debug_barrier()
        for start in range(0, cnt, CHUNK):  # listed tokens are distinct: no chunk reads another's writes
            e = start + tl.arange(0, CHUNK)
            live = e < cnt
            tok = tl.load(ids_ptr + list_row * CAP + e, mask=live, other=0)
            c, stop, bias = _request_values(req_counts, req_stop, req_bias, tok, live, HAS_STOP, HAS_BIAS)
            new = _adjusted_at(x_row, tok, live, c, stop, bias, path, on_path, freq, pres, rep, short, HAS_FREQ,
                               HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)
            tl.store(x_row + tok, new, mask=live)
        tl.debug_barrier()
        tl.store(x_row + path_tok, path_new, mask=on_path)
    else:
        for start in range(0, V, BLOCK):
            tok = start + tl.arange(0, BLOCK)
            live = tok < V
            c, stop, bias = _request_values(req_counts, req_stop, req_bias, tok, live, HAS_STOP, HAS_BIAS)
            new = _adjusted_at(x_row, tok, live, c, stop, bias, path, on_path, freq, pres, rep, short, HAS_FREQ,
                               HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)
            tl.store(x_row + tok, new, mask=live)


def _short_rows(pen: Penalties, path: torch.Tensor) -> torch.Tensor | None:
    """bool [bs, n]: nodes whose output (the request's plus the node's path) is still shorter than
    min_new_tokens (stop tokens are -inf there); None without stop tokens."""
    if pen.stop_tokens is None:
        return None
    return (pen.out_len[:, None] + (path >= 0).sum(-1)) < pen.min_new_tokens[:, None]


def sparse_adjust_triton(x: torch.Tensor, path: torch.Tensor, pen: Penalties, short: torch.Tensor | None,
                         logit_bias: torch.Tensor | None, cap: int = TOUCHED_CAP) -> torch.Tensor:
    """Adjust fp32 node logits x [bs, n, V] (last dim contiguous) in place, the path tokens [bs, n, D]
    counted per node; returns x."""
    bs, n, vocab = x.shape
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        raise ValueError("sparse_adjust_triton adjusts fp32 logits whose last dimension is contiguous")
    if pen.lists is not None:  # kept from round to round (`TouchedLists`), by the counts' rows
        (ids, cnt), list_rows = pen.lists, pen.count_rows()
    else:
        (ids, cnt), list_rows = touched_tokens(pen, logit_bias, cap), torch.arange(bs, device=x.device)
    f32 = lambda t: t.float().contiguous()  # noqa: E731
    depth = path.shape[-1]
    # an empty path (depth 0) is never read: a placeholder rather than a pointer to no memory
    args = [x, x.stride(0), x.stride(1), ids, cnt, list_rows, path.contiguous() if depth else cnt, f32(pen.counts),
            pen.count_rows()]
    args += [f32(t) if t is not None else cnt for t in (pen.frequency, pen.presence, pen.repetition)]
    has_stop = pen.stop_tokens is not None
    args += [_bytes(pen.stop_tokens) if has_stop else cnt, _bytes(short) if has_stop else cnt,
             f32(logit_bias) if logit_bias is not None else cnt]
    if bs * n:
        _sparse_kernel[(bs * n,)](*args, n, vocab, depth, ids.shape[1], HAS_FREQ=pen.frequency is not None,
                                  HAS_PRES=pen.presence is not None, HAS_REP=pen.repetition is not None,
                                  HAS_STOP=has_stop, HAS_BIAS=logit_bias is not None,
                                  DP=triton.next_power_of_2(max(depth, 1)), CHUNK=SPARSE_CHUNK, BLOCK=DENSE_BLOCK,
                                  enable_fp_fusion=False)
    return x


def dense_adjust_torch(logits: torch.Tensor, pen: Penalties, short: torch.Tensor | None,
                       logit_bias: torch.Tensor | None) -> torch.Tensor:
    """fp32 [bs, n, V]: every node's logits adjusted for its request's counts (no path); `short` [bs, n]."""
    stop = None if pen.stop_tokens is None else pen.stop_tokens[:, None, :]
    bias = None if logit_bias is None else logit_bias.float()[:, None, :]
    return _adjust(logits.float(), pen.request_counts()[:, None, :], pen, stop,
                   None if short is None else short[..., None], bias, (slice(None), None, None))


def path_adjust_torch(logits: torch.Tensor, path: torch.Tensor, pen: Penalties, short: torch.Tensor | None,
                      logit_bias: torch.Tensor | None) -> torch.Tensor:
    """The reference: the dense per-request adjustment, then each node's <= D path tokens recomputed
    from the raw logits with their path counts and scattered back (a fresh fp32 tensor)."""
    bs, n, depth = path.shape
    x = dense_adjust_torch(logits, pen, short, logit_bias)
    if depth == 0:
        return x
    valid = path >= 0
    # empty slots repeat slot 0 (the node's own token; the root's is token 0 at its dense value)
    tok = torch.where(valid, path, path[..., :1]).clamp(min=0)
    same = (path[..., :, None] == path[..., None, :]) & valid[..., None, :]
    c = pen.request_counts().gather(1, tok.view(bs, -1)).view(bs, n, depth) + same.sum(-1)
    pstop = None if pen.stop_tokens is None else pen.stop_tokens.gather(1, tok.view(bs, -1)).view(bs, n, depth)
    pbias = None if logit_bias is None else logit_bias.float().gather(1, tok.view(bs, -1)).view(bs, n, depth)
    new = _adjust(logits.float().gather(2, tok), c, pen, pstop, None if short is None else short[..., None], pbias,
                  (slice(None), None, None))
    new = torch.where(valid, new, new[..., :1])
    if x.data_ptr() == logits.data_ptr():  # no dense adjustment applied: never write the caller's logits
        return x.scatter(2, tok, new)
    return x.scatter_(2, tok, new)


def apply_path_penalties(logits: torch.Tensor, tokens: torch.Tensor, parent: torch.Tensor, max_depth: int,
                         penalties: Penalties | None, logit_bias: torch.Tensor | None, *,
                         in_place: bool = False, sparse: bool | None = None) -> torch.Tensor:
    """Adjusted fp32 node logits [bs, n, V]; `tokens`/`parent` [bs, n] are the tree's (node 0 the
    root), `max_depth` bounds a node's depth (the draft depth). `in_place`: fp32 logits are adjusted
    where they are (as SGLang's own penalizers do), else a copy is. `sparse` picks the step: the
    Triton one that touches only the changed tokens (default on CUDA) or the torch reference."""
    if penalties is None:
        x = logits.float()
        return x if logit_bias is None else x + logit_bias.float()[:, None, :]
    path = path_tokens(tokens, parent, max_depth)  # [bs, n, D]
    short = _short_rows(penalties, path)
    if not (logits.is_cuda if sparse is None else sparse):
        out = path_adjust_torch(logits, path, penalties, short, logit_bias)
        return logits.copy_(out) if in_place and logits.dtype == torch.float32 else out
    if in_place and logits.dtype == torch.float32 and logits.stride(-1) == 1:
        x = logits
    else:
        x = logits.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
    return sparse_adjust_triton(x, path, penalties, short, logit_bias)
