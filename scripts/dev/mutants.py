"""The mutant list of `scripts/dev/mutate.py`: one realistic slip each in the code that must be right.

Each mutant names the file, the exact original snippet (it must occur once), its replacement and
the fast tests that must fail with it. `equivalent` gives the reason when a mutant cannot change
behaviour: it is run and listed, but its survival is no failure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    equivalent: str = ""


RULE_TESTS = ("tests/test_rules.py",)
VERIFY_TESTS = ("tests/test_tree_verify.py",)
ROUND_TESTS = ("tests/test_tree_round.py",)
# The round against a target that reads the KV cache through the mask and positions (greedy b7).
ATTENDING = ("tests/test_ddtree_round_attn.py::test_round_through_an_attending_target_equals_sequential_decoding[b7-k7-greedy]",)
DURABILITY = ("tests/test_transaction_durability.py",)
# The vocab-parallel merge on stacked shard payloads, in one process (the gloo cases spawn two).
TP_MERGE = ("tests/test_tp_topk.py::test_keys_order_as_the_reference_sort",
            "tests/test_tp_topk.py::test_merge_of_shard_payloads_equals_full_topk")
# Torch-path cases only (the Triton ones run interpreted on a CPU: slow); 4-15-64 packs 3 words.
MASK_TORCH = ("tests/test_kernels_tree_mask.py::test_torch_mask_equals_visibility",
              "tests/test_kernels_tree_mask.py::test_packed_mask[4-15-64-cpu]",
              "tests/test_kernels_tree_mask.py::test_tree_only_mask_writes_no_prefix[3-4-7-cpu]",
              "tests/test_kernels_tree_mask.py::test_positions")

RULES = (
    Mutant("equality no longer widens `is`", "ddtree_patch/rules/equality.py",
           "_POSITIVE = (cst.Equal, cst.Is)", "_POSITIVE = (cst.Equal,)", RULE_TESTS),
    Mutant("equality widens `!=` into `in`", "ddtree_patch/rules/equality.py",
           "new_op = cst.NotIn(", "new_op = cst.In(", RULE_TESTS),
    Mutant("equality claims chained comparisons", "ddtree_patch/rules/equality.py",
           "len(comparison.comparisons) != 1", "len(comparison.comparisons) > 2", RULE_TESTS),
    Mutant("value rule claims nothing", "ddtree_patch/rules/value.py",
           "expr = operand(token.node, ctx) if token.kind == tk.TokenKind.LOGIC else None", "expr = None",
           RULE_TESTS),
    Mutant("value rule also claims positional arguments", "ddtree_patch/rules/value.py",
           "if isinstance(parent, cst.Arg) and parent.keyword is not None:", "if isinstance(parent, cst.Arg):",
           RULE_TESTS),
    Mutant("membership never sees its twin (widens twice)", "ddtree_patch/rules/membership.py",
           "    return any(has_twin(collection, e)", "    return False and any(has_twin(collection, e)",
           RULE_TESTS),
    Mutant("twin inserted before DFLASH", "ddtree_patch/rules/_twin.py",
           "elements[index + 1:index + 1] = [new", "elements[index:index] = [new", RULE_TESTS),
    Mutant("request hook no longer owns its rewritten line", "ddtree_patch/rules/request_hook.py",
           "value=m.OneOf(_VALIDATE, _HOOKED))", "value=_VALIDATE)", RULE_TESTS),
    Mutant("policy entry with a typo'd form", "ddtree_patch/data/policy.py",
           'gate("membership", "mixed-chunk"', 'gate("membershp", "mixed-chunk"', RULE_TESTS),
    Mutant("policy globs match sites no rule claimed", "ddtree_patch/policy.py",
           "if (form == UNMATCHED) != (self.form == UNMATCHED):", "if form == UNMATCHED and self.form == '':",
           ("tests/test_engine.py::test_a_glob_never_decides_a_token_no_rule_claimed",)),
)

TRANSACTION = (
    Mutant("no file fsync before os.replace", "ddtree_patch/fsio.py",
           "            _fsync(fd, tmp)\n", "            pass\n", DURABILITY),
    Mutant("no folder fsync after os.replace", "ddtree_patch/fsio.py",
           "        raise\n    fsync_dir(path.parent)\n", "        raise\n", DURABILITY),
    Mutant("no folder fsync after unlink", "ddtree_patch/fsio.py",
           "    path.unlink()\n    fsync_dir(path.parent)\n", "    path.unlink()\n", DURABILITY),
    Mutant("a restored time stamp is not fsynced", "ddtree_patch/fsio.py",
           "follow_symlinks=False)\n    _sync_file(path)\n", "follow_symlinks=False)\n", DURABILITY),
    Mutant("the mode is not set on the new file", "ddtree_patch/fsio.py",
           "                os.fchmod(fd, mode)\n", "                pass\n", DURABILITY),
    Mutant("recovery overwrites a drifted file", "ddtree_patch/transaction/recovery.py",
           "restore_pristine(install, journal.changes, step, force=force, keep=keep)",
           "restore_pristine(install, journal.changes, step, force=True, keep=keep)", DURABILITY),
    Mutant("revert overwrites a drifted file", "ddtree_patch/transaction/restore.py",
           "        if current != o.after:\n", "        if False:\n",
           ("tests/test_transaction.py::test_drifted_revert_refuses_with_a_diff_then_force_restores",)),
    Mutant("a damaged backup is restored", "ddtree_patch/transaction/restore.py",
           "if data is None or hashlib.sha256(data).hexdigest() != o.before:", "if data is None:",
           ("tests/test_transaction_hardening.py",)),
    Mutant("a file changed during apply is backed up anyway", "ddtree_patch/transaction/write.py",
           "    if hashlib.sha256(data).hexdigest() != sha256:\n", "    if False:\n",
           ("tests/test_transaction_hardening.py",)),
)

VERIFY = (
    Mutant("verify positions +1", "patches/tree_verify.py",
           "positions = tree_positions(tree.depth, prefix_lens)",
           "positions = tree_positions(tree.depth, prefix_lens) + 1", VERIFY_TESTS),
    Mutant("verify mask of a causal chain", "patches/tree_verify.py",
           "mask = build_tree_mask(tree.parent,",
           "mask = build_tree_mask(torch.arange(-1, n - 1, device=tree.parent.device).expand(bs, n),",
           VERIFY_TESTS),
    Mutant("the root keeps the draft's placeholder token", "patches/tree_verify.py",
           "        tokens[:, 0] = bonus_tokens\n", "", VERIFY_TESTS),
    Mutant("padding nodes hang from no parent", "patches/tree_verify.py",
           "parent=widen(tree.parent, 0)", "parent=widen(tree.parent, -1)", VERIFY_TESTS),
    Mutant("pad_tree copies a tree that needs no padding", "patches/tree_verify.py",
           "    if width == n:\n        return tree\n", "", VERIFY_TESTS,
           equivalent="widen() then copies every tensor unchanged: one allocation more, same values"),
    Mutant("a dLLM Triton backend is thought to skip the prefix", "patches/tree_verify.py",
           '\n        and getattr(attn_backend, "dllm_attention", None) is None', "", VERIFY_TESTS),
    Mutant("the draft copy keeps the target width's cached bound", "patches/tree_round.py",
           '    getattr(draft_args, "__dict__", {}).pop("max_speculative_num_draft_tokens", None)\n', "",
           ROUND_TESTS),
    Mutant("commit slots looked up past the tree", "patches/tree_round.py",
           "commit_slots(accepted_idx, accept_len, cache_loc_2d[:, :tree_size])",
           "commit_slots(accepted_idx, accept_len, cache_loc_2d)", ROUND_TESTS,
           equivalent="keep_loc gathers accepted nodes only (all < tree_size); the free mask, the one "
                      "output the padding columns change, is not used here"),
    Mutant("one feature row too many per request", "patches/tree_round.py",
           "[None, :] < lengths.to(path.device)[:, None]", "[None, :] <= lengths.to(path.device)[:, None]",
           ROUND_TESTS),
    Mutant("padding entries move slot -1", "patches/kv_move.py",
           "torch.where(src >= 0, src, dst).reshape(-1)", "src.reshape(-1)", ROUND_TESTS),
    Mutant("a paged free keeps only the committed slots", "patches/tree_round.py",
           "page_end = (new_lens + page_size - 1) // page_size * page_size", "page_end = new_lens", ROUND_TESTS),
    Mutant("the kept page is not capped at the verify width", "patches/tree_round.py",
           ".clamp(min=0, max=width)", ".clamp(min=0)", ROUND_TESTS),
)

KERNELS = (
    Mutant("ancestor walk follows a causal chain", "kernels/tree_mask.py",
           "cur = torch.where(cur >= 0, parent.gather(1, cur.clamp(min=0)), -1)", "cur = cur - 1", MASK_TORCH),
    Mutant("ancestor walk without its cur >= 0 guard", "kernels/tree_mask.py",
           "anc |= (cols[None, None, :] == cur[:, :, None]) & (cur[:, :, None] >= 0)",
           "anc |= cols[None, None, :] == cur[:, :, None]", MASK_TORCH,
           equivalent="columns are >= 0, so cols == cur is already False wherever cur is -1"),
    Mutant("one prefix column too many", "kernels/tree_mask.py",
           "torch.where(col < lens[req], prefix_ones,", "torch.where(col <= lens[req], prefix_ones,", MASK_TORCH),
    Mutant("packed words wrap at 2**31", "kernels/tree_mask.py",
           "packed - 2**32, packed)", "packed - 2**31, packed)", MASK_TORCH),
    Mutant("tree positions +1", "kernels/tree_mask.py",
           "return seq_lens.to(torch.int64)[:, None] + depth", "return seq_lens.to(torch.int64)[:, None] + depth + 1",
           MASK_TORCH),
    Mutant("walk counts a step even when it stops", "kernels/accept_walk.py",
           "        length += active.long()\n", "        length += 1\n",
           ("tests/test_kernels_accept_walk.py::test_torch_walk_equals_python",)),
    Mutant("commit keeps one slot too few", "kernels/commit.py",
           "valid = torch.arange(d1, device=accepted_idx.device)[None, :] <= accept_len[:, None]",
           "valid = torch.arange(d1, device=accepted_idx.device)[None, :] < accept_len[:, None]",
           ("tests/test_kernels_accept_walk.py::test_commit_slots[8-4-8-7-cpu]",)),
    Mutant("move copies slots onto themselves too", "kernels/commit.py",
           "live = (src >= 0) & (src != dst)", "live = src >= 0", ("tests/test_kernels_kv_move.py",),
           equivalent="all reads happen before the writes, so a slot copied onto itself keeps its bytes"),
    Mutant("draft top-K without the log-sum-exp", "kernels/vocab_topk.py",
           "return parts.values - parts.lse[..., None], parts.tokens", "return parts.values, parts.tokens",
           ("tests/test_kernels_vocab_topk.py::test_reference_order_and_values",)),
    Mutant("capped select loses its last packed key", "kernels/vocab_topk.py",
           "mask=offs < count, other=-1), KP)", "mask=offs < count - 1, other=-1), KP)",
           ("tests/test_kernels_vocab_topk.py::test_stream_capped_select_equals_reference[256-cpu]",)),
    Mutant("capped select lets only keys above the floor compete", "kernels/vocab_topk.py",
           "((keys >> 31) >= floor)", "((keys >> 31) > floor)",
           ("tests/test_kernels_vocab_topk.py::test_stream_capped_select_equals_reference[256-cpu]",)),
    Mutant("TP merge: equal logits in reversed token order", "kernels/tp_topk.py",
           "(_LOW31 - tokens.to(torch.int64))", "(tokens.to(torch.int64))", TP_MERGE),
    Mutant("TP merge: shard-local token ids", "kernels/tp_topk.py",
           "local.tokens + vocab_start", "local.tokens", TP_MERGE),
    Mutant("TP merge: max of the shard LSEs", "kernels/tp_topk.py",
           "torch.logsumexp(shard_lse, dim=0)", "shard_lse.max(dim=0).values", TP_MERGE),
    Mutant("TP merge: padding keys above real ones", "kernels/tp_topk.py",
           "keys = torch.full((bs, depth, k), -1,", "keys = torch.full((bs, depth, k), 2**62,", TP_MERGE),
    Mutant("tree build links the second-ranked child first", "kernels/tree_build.py",
           "first[rows, p] = torch.where(r == 0, node, first[rows, p])",
           "first[rows, p] = torch.where(r == 1, node, first[rows, p])",
           ("tests/test_kernels_tree_build.py::test_torch_reference_equals_heap[7-4]",)),
)

WORKER = (
    Mutant("tree grammar: a node's mask skipped (its row masked on a copy the draw never reads)",
           "patches/tree_grammar.py", "    return rows.view(logits.shape)\n", "    return logits\n",
           ("tests/test_tree_grammar.py::test_every_node_row_is_masked_by_its_own_grammar_row",)),
    Mutant("node sampler: the grammar mask never reaches the draw", "patches/node_sampling.py",
           "return logits if grammar_mask is None else apply_node_mask(logits, grammar_mask)", "return logits",
           ("tests/test_tree_grammar.py::test_every_node_row_is_masked_by_its_own_grammar_row",
            "tests/test_tree_grammar.py::test_sampled_draws_stay_inside_each_node_s_row")),
    Mutant("node sampler ignores the pytorch backend's tie order", "patches/node_sampling.py",
           '    return sampling_backend == "pytorch"\n', "    return False\n",
           ("tests/test_node_sampling.py::test_backend_orders_the_ties",)),
    Mutant("draft-KV positions +1", "patches/worker_v2.py",
           "positions = prefix_lens.to(torch.int64)[:, None] + self._width_offsets[:path_len]",
           "positions = prefix_lens.to(torch.int64)[:, None] + self._width_offsets[:path_len] + 1", ATTENDING),
    Mutant("commit copies two path nodes' KV crosswise", "patches/tree_round.py",
           "    mover.move(path_slots, keep_loc)",
           "    mover.move(path_slots, keep_loc[:, [0, 2, 1, *range(3, keep_loc.shape[1])]])", ATTENDING),
    Mutant("verify sees the tree as a causal chain (round)", "patches/tree_verify.py",
           "mask = build_tree_mask(tree.parent,",
           "mask = build_tree_mask(torch.arange(-1, n - 1, device=tree.parent.device).expand(bs, n),", ATTENDING),
    Mutant("reorder commit at a page size above 1", "patches/kv_commit.py",
           "    if page_size != 1:\n", "    if False:\n", ("tests/test_kv_commit.py",)),
    Mutant("reorder commit under an unfenced overlap scheduler", "patches/kv_commit.py",
           "    if overlap and unfenced:\n", "    if False:\n", ("tests/test_kv_commit.py",)),
    Mutant("reorder fence leaves the verify's read-done event to the barrier", "patches/table_fence.py",
           "            setattr(runner, self.event_attr, event)\n", "            pass\n", ("tests/test_table_fence.py",)),
    Mutant("reorder fence: the release hook waits for nothing", "patches/table_fence.py",
           "            torch.get_device_module(self.device).current_stream().wait_event(self.event)\n",
           "            pass\n", ("tests/test_table_fence.py",)),
    Mutant("reorder fence counted on 0.5.14, whose barrier skips DFlash", "patches/table_fence.py",
           "    if barrier_skips_dflash:\n", "    if False:\n", ("tests/test_table_fence.py",)),
    Mutant("reorder commit although blocked", "patches/kv_commit.py",
           '    if asked == "reorder" and blocker:\n', '    if False:\n', ("tests/test_kv_commit.py",)),
    Mutant("reorder reference leaves req_to_token as it was", "kernels/slot_reorder.py",
           "    table[rows, cols] = new\n", "",
           ("tests/test_ddtree_round.py::test_reordering_commit_gives_the_moving_rounds",)),
    Mutant("reorder reference: path nodes after the others", "kernels/slot_reorder.py",
           "torch.where(on_path, depths, 2 * width)", "torch.where(on_path, 2 * width - 1 - depths, 2 * width)",
           ("tests/test_ddtree_round.py::test_reordering_commit_gives_the_moving_rounds",)),
    Mutant("draft head as a 3-D (per-request batched) GEMM", "patches/tree_round.py",
           "return torch.mm(rows, weight.T).view(bs, length, weight.shape[0])",
           "return torch.matmul(hidden.to(weight.dtype), weight.T)",
           ("tests/test_ddtree_round.py::test_draft_head_is_one_2d_gemm_over_the_original_vocab",)),
    Mutant("mask in place: the verify input carries a bool view (the replay then converts, a real copy)",
           "patches/tree_verify.py", "            mask = mask_buffer[:size]\n",
           "            mask = mask_buffer[:size].view(torch.bool)\n", ("tests/test_tree_verify.py",)),
    Mutant("mask in place: a buffer of another layout taken", "patches/tree_verify.py",
           'full = holder is not None and getattr(holder.mode, "name", None) == "FULL_MASK"',
           "full = holder is not None", ("tests/test_tree_verify.py",)),
    Mutant("GEMM epilogue: columns past the vocabulary scanned as 0, not -inf", "kernels/head_gemm_scan.py",
           'x = tl.where(cols[None, :] < N, logits.to(tl.float32), float("-inf"))',
           "x = logits.to(tl.float32)",
           ("tests/test_kernels_head_gemm_scan.py",)),
    Mutant("GEMM epilogue: the tile's sum-exp from the unrounded accumulator", "kernels/head_gemm_scan.py",
           "        s = tl.sum(tl.exp(x - safe[:, None]), axis=1)\n",
           "        s = tl.sum(tl.exp(tl.where(cols[None, :] < N, acc, float('-inf')) - safe[:, None]), axis=1)\n",
           ("tests/test_kernels_head_gemm_scan.py",)),
    Mutant("tree build: the new candidate encoded at its parent's depth", "kernels/tree_build.py",
           "_encode(s + lp_kid, r * 0 + n, nd, r * 0)", "_encode(s + lp_kid, r * 0 + n, pd, r * 0)",
           ("tests/test_kernels_tree_build.py",)),
    Mutant("round log-probs: each token scored on the next node's logits", "patches/round_logprobs.py",
           "path_logits = node_logits[requests, accepted_idx.clamp(min=0)]",
           "path_logits = node_logits[requests, (accepted_idx + 1).clamp(min=0, max=node_logits.shape[1] - 1)]",
           ("tests/test_round_logprobs.py",)),
    Mutant("contract: a stand-in's base rebound inside the release function passes", "patches/contract.py",
           "    if bound and builds and not rebinds:\n", "    if bound and builds:\n",
           ("tests/test_worker_contract.py",)),
    Mutant("GPU turns: every engine takes its k-th run at once", "scripts/gpu/turns.py",
           "self._counter() >= run * self.count + self.index)", "self._counter() >= run * self.count)",
           ("tests/test_gpu_turns.py",)),
    Mutant("descriptor GEMM: the persistent programs skip every other tile", "kernels/head_gemm_scan.py",
           "    for tile in tl.range(tl.program_id(0), n_tiles_m * n_tiles_n, n_programs):\n",
           "    for tile in tl.range(tl.program_id(0), n_tiles_m * n_tiles_n, 2 * n_programs):\n",
           ("tests/test_kernels_head_gemm_scan.py",)),
    Mutant("head chunks: a chunk's columns start one tile late", "kernels/head_topk.py",
           "        start = first * layout.per_split * layout.tile\n",
           "        start = (first + 1) * layout.per_split * layout.tile\n",
           ("tests/test_kernels_head_topk.py::test_chunks_cover_the_vocabulary_in_whole_splits",)),
)

CAPTURE = (
    Mutant("the draft runner captures with the tree mask too", "patches/graph_capture.py",
           "            and not runner.is_draft_worker\n", "", ("tests/test_graph_capture.py",)),
    Mutant("an input's own mask is replaced", "patches/graph_capture.py",
           '            and getattr(spec_info, "custom_mask", None) is None\n', "", ("tests/test_graph_capture.py",)),
    Mutant("the graphed tree stage replays on the first round's features", "patches/tree_stage.py",
           "        entry.features.copy_(features)\n", "",
           ("tests/test_ddtree_round.py::test_graph_replayed_tree_stage_gives_the_eager_rounds",)),
    Mutant("the verify tile applies to unmasked calls too", "patches/verify_tile.py",
           '        if kwargs.get("custom_mask", args[at] if len(args) > at else None) is None:\n'
           "            return original(*args, **kwargs)\n", "", ("tests/test_verify_tile.py",)),
    Mutant("the verify tile's block-size function is not restored", "patches/verify_tile.py",
           "            module._get_block_sizes_for_extend_attention = sizes\n", "            pass\n",
           ("tests/test_verify_tile.py",)),
    Mutant("the measured verify tile is not the Hopper default", "patches/verify_tile.py",
           'DEFAULT_TILES = {(9, 0): "M16N64w4"}', "DEFAULT_TILES = {}", ("tests/test_verify_tile.py",)),
)

# Triton paths, interpreted on a CPU against their torch references (slower: one selection each).
TRITON = (
    Mutant("chunked scans: every launch starts at split 0", "kernels/vocab_topk.py",
           "    split = tl.program_id(1) + first_split\n", "    split = tl.program_id(1)\n",
           ("tests/test_kernels_head_topk.py::test_interleaved_parts_equal_the_scan_of_the_same_logits",)),
    Mutant("reorder: the path's padding counted below every node", "kernels/slot_reorder.py",
           "((acc[None, :] >= 0) & (acc[None, :] < nodes[:, None]))", "(acc[None, :] < nodes[:, None])",
           ("tests/test_kernels_slot_reorder.py::test_triton_equals_torch",)),
    Mutant("reorder: off-path slots in descending node order", "kernels/slot_reorder.py",
           "place = tl.where(on_path, path_depth, last + 1 + nodes - path_before)",
           "place = tl.where(on_path, path_depth, width - 1 - (nodes - path_before))",
           ("tests/test_kernels_slot_reorder.py::test_triton_equals_torch",)),
    Mutant("Triton mask rows of every request start at request 0", "kernels/tree_mask.py",
           "row_start = n_nodes * before + b * n_nodes * n_nodes + rows.to(tl.int64) * width",
           "row_start = n_nodes * before + rows.to(tl.int64) * width",
           ("tests/test_kernels_tree_mask.py::test_triton_mask_equals_torch",)),
    Mutant("Triton ancestor walk follows a causal chain", "kernels/tree_mask.py",
           "cur = tl.load(parent_ptr + b * n_nodes + cur, mask=cur >= 0, other=-1).to(tl.int32)",
           "cur = tl.where(cur >= 0, cur - 1, -1)",
           ("tests/test_kernels_tree_mask.py::test_triton_mask_equals_torch",)),
    Mutant("Triton walk descends to the first child whatever the target says", "kernels/accept_walk.py",
           "match = live & (offs > 0) & (family == fam) & (tok == want) & (fam >= 0)",
           "match = live & (offs > 0) & (family == fam) & (fam >= 0)",
           ("tests/test_kernels_accept_walk.py::test_triton_walk_equals_torch",)),
    Mutant("Triton walk's bonus is the last accepted node's token", "kernels/accept_walk.py",
           "tl.store(bonus_ptr + b, tl.sum(tl.where(offs == cur, post, 0), axis=0))",
           "tl.store(bonus_ptr + b, tl.sum(tl.where(offs == cur, tok, 0), axis=0))",
           ("tests/test_kernels_accept_walk.py::test_triton_walk_equals_torch",)),
    Mutant("Split posterior's check skips blocks with tokens above the lower cuts", "kernels/posterior_split.py",
           "    reach = bmax > lowest\n",
           "    reach = bmax > tl.max(cand, axis=0)\n",
           ("tests/test_kernels_posterior_split.py::test_split_equals_torch",)),
    Mutant("Split posterior's start kernel draws a min-p row from the plain block masses", "kernels/posterior_split.py",
           "            if _support_bounded(min_p, floor):  # the mass pass's support masses",
           "            if _support_bounded(0.0, floor):  # the mass pass's support masses",
           ("tests/test_kernels_posterior_split.py::test_split_equals_torch",)),
    Mutant("Posterior kernels skip units that reach above the floor (support mass too small)", "kernels/posterior.py",
           "        if span_max > floor:", "        if span_max > floor + 1.0:",
           ("tests/test_kernels_posterior_split.py::test_units_and_programs_equal_torch",)),
    Mutant("Posterior kernels' top-k floor one rank too high", "kernels/posterior.py",
           ">= top_k, cand, kth)", ">= top_k - 1, cand, kth)",
           ("tests/test_kernels_posterior_split.py::test_split_equals_torch",)),
    Mutant("Posterior reference: top-k floor one rank too high (drops the k-th token)", "kernels/posterior_reference.py",
           "gather(1, (k - 1).clamp(", "gather(1, (k - 2).clamp(",
           ("tests/test_sampling_distribution.py::test_torch_path_matches_sglang[top_k_8_flat]",)),
    Mutant("Split posterior's check pass never counts the tokens above a cut (top-k unchecked)",
           "kernels/posterior_split.py",
           "count = _top_k_cuts(tl.load(topk_ptr + b), V)\n",
           "count = _top_k_cuts(tl.load(topk_ptr + b), 0)\n",
           ("tests/test_kernels_posterior_split.py::test_split_equals_torch",)),
    Mutant("Posterior kernels order ties by value even with index_ties (a cut ignores its index)",
           "kernels/posterior.py",
           "    return (z > cut) | ((z == cut) & (idx < cut_idx))\n", "    return z > cut\n",
           ("tests/test_kernels_posterior_split.py::test_index_ties_equal_torch",)),
    Mutant("Posterior reference orders ties by value even with index_ties", "kernels/posterior_reference.py",
           "(zz > cut) | ((zz == cut) & (ii < cut_idx))", "(zz > cut)",
           ("tests/test_sampling_distribution.py::test_tie_orders",)),
    Mutant("Split posterior's listed round forgets the rows still drawing (nothing enlisted)",
           "kernels/posterior_split.py",
           "                if status == _CHECK:\n                    _enlist(", "                if status < 0:\n                    _enlist(",
           ("tests/test_kernels_posterior_split.py::test_listed_rounds_equal_torch",)),
    Mutant("Split posterior's listed round leaves its last item unchecked", "kernels/posterior_split.py",
           "        total = tl.load(count_ptr) * groups\n", "        total = tl.load(count_ptr) * groups - 1\n",
           ("tests/test_kernels_posterior_split.py::test_listed_rounds_equal_torch",)),
    Mutant("Split posterior's check sums only the first cut of a top-p-only row", "kernels/posterior_split.py",
           "            for c in tl.static_range(PC):\n", "            for c in tl.static_range(1):\n",
           ("tests/test_kernels_posterior_split.py::test_cut_counts_equal_torch",)),
    Mutant("Posterior kernels skip a span of fine units by its first unit's max only", "kernels/posterior.py",
           "span_max = tl.max(tl.load(units_block + u * (SPAN // UNIT) + tl.arange(0, SPAN // UNIT)), axis=0)",
           "span_max = tl.load(units_block + u * (SPAN // UNIT))",
           ("tests/test_kernels_posterior_split.py::test_spans_of_fine_units_equal_torch",)),
    Mutant("KV move strides a slot in bytes while it loads words", "kernels/commit.py",
           "stride = tl.load(strides_ptr + buf).to(tl.int64) // WORD", "stride = tl.load(strides_ptr + buf).to(tl.int64)",
           ("tests/test_kernels_kv_move.py",)),
    Mutant("Candidate pool serves a row with a block beyond its pool", "kernels/posterior_pool.py",
           '        if (most <= POOL) & (t > float("-inf")):\n', '        if t > float("-inf"):\n',
           ("tests/test_kernels_posterior_split.py::test_pooled_rows_equal_torch",)),
    Mutant("Candidate pool's block rank one too high (a floor above kept tokens)", "kernels/posterior_pool.py",
           "tl.where(at_least >= c, u,", "tl.where(at_least >= c - 1, u,",
           ("tests/test_kernels_posterior_split.py::test_pooled_rows_equal_torch",)),
    Mutant("Candidate pool places a block's tokens after their own unit's count (an inclusive unit scan)",
           "kernels/posterior_pool.py", "before = tl.cumsum(per_unit, axis=0) - per_unit",
           "before = tl.cumsum(per_unit, axis=0)",
           ("tests/test_kernels_posterior_split.py::test_pooled_rows_equal_torch",)),
    Mutant("Candidate pool pass skips a row's last block (its tokens missing from the pool)", "kernels/posterior_pool.py",
           "                if bi < NB:\n                    kept = z > floor", "                if bi < NB - 1:\n                    kept = z > floor",
           ("tests/test_kernels_posterior_split.py::test_pooled_row_with_a_peaked_last_block",)),
    Mutant("Candidate pool serves peaked rows too", "kernels/posterior_pool.py",
           "    return block_sum >= _FLAT\n", "    return block_sum >= 0.0\n",
           ("tests/test_kernels_posterior_split.py::test_pooled_rows_equal_torch",)),
    Mutant("Posterior reference: a pooled row's floor above the k-th token", "kernels/posterior_reference.py",
           "floor = torch.where(pooled, pool_floor, floor)", "floor = torch.where(pooled, pool_floor + 0.1, floor)",
           ("tests/test_sampling_distribution.py::test_pooled_rows_match_sglang[top_k_100_flat]",)),
    Mutant("Split posterior's check counts only the first cut of a row with top-k", "kernels/posterior_split.py",
           "            for c in tl.static_range(KC):", "            for c in tl.static_range(1):",
           ("tests/test_kernels_posterior_split.py::test_cut_counts_equal_torch",)),
    Mutant("Split posterior's check skips earlier blocks holding ties of the drawn token (its rank too low)",
           "kernels/posterior_split.py",
           "        reach = reach | ((bmax == lowest) & (bi * BLOCK < tok))\n",
           "        reach = reach\n",
           ("tests/test_kernels_posterior_split.py::test_ties_and_block_boundaries",)),
    Mutant("penalties: a node's path not counted", "kernels/path_penalties.py",
           "c = c_req + tl.sum(((tok[:, None] == path[None, :]) & on_path[None, :]).to(tl.float32), axis=1)",
           "c = c_req", ("tests/test_kernels_path_penalties.py",)),
    Mutant("penalties: the path tokens' values never written", "kernels/path_penalties.py",
           "        tl.debug_barrier()\n        tl.store(x_row + path_tok, path_new, mask=on_path)\n",
           "        tl.debug_barrier()\n", ("tests/test_kernels_path_penalties.py",)),
    Mutant("penalties: path tokens read after the listed ones were written", "kernels/path_penalties.py",
           ('        path_c, path_stop, path_bias = _request_values(req_counts, req_stop, req_bias, path_tok, on_path, HAS_STOP,\n'
            '                                                       HAS_BIAS)\n'
            '        path_new = _adjusted_at(x_row, path_tok, on_path, path_c, path_stop, path_bias, path, on_path, freq, pres, rep,\n'
            '                                short, HAS_FREQ, HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)\n'
            '        tl.debug_barrier()\n'
            "        for start in range(0, cnt, CHUNK):  # listed tokens are distinct: no chunk reads another's writes\n"
            '            e = start + tl.arange(0, CHUNK)\n'
            '            live = e < cnt\n'
            '            tok = tl.load(ids_ptr + list_row * CAP + e, mask=live, other=0)\n'
            '            c, stop, bias = _request_values(req_counts, req_stop, req_bias, tok, live, HAS_STOP, HAS_BIAS)\n'
            '            new = _adjusted_at(x_row, tok, live, c, stop, bias, path, on_path, freq, pres, rep, short, HAS_FREQ,\n'
            '                               HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)\n'
            '            tl.store(x_row + tok, new, mask=live)\n'
            '        tl.debug_barrier()\n'
            '        tl.store(x_row + path_tok, path_new, mask=on_path)\n'),
           ("        for start in range(0, cnt, CHUNK):  # listed tokens are distinct: no chunk reads another's writes\n"
            '            e = start + tl.arange(0, CHUNK)\n'
            '            live = e < cnt\n'
            '            tok = tl.load(ids_ptr + list_row * CAP + e, mask=live, other=0)\n'
            '            c, stop, bias = _request_values(req_counts, req_stop, req_bias, tok, live, HAS_STOP, HAS_BIAS)\n'
            '            new = _adjusted_at(x_row, tok, live, c, stop, bias, path, on_path, freq, pres, rep, short, HAS_FREQ,\n'
            '                               HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)\n'
            '            tl.store(x_row + tok, new, mask=live)\n'
            '        tl.debug_barrier()\n'
            '        path_c, path_stop, path_bias = _request_values(req_counts, req_stop, req_bias, path_tok, on_path, HAS_STOP,\n'
            '                                                       HAS_BIAS)\n'
            '        path_new = _adjusted_at(x_row, path_tok, on_path, path_c, path_stop, path_bias, path, on_path, freq, pres, rep,\n'
            '                                short, HAS_FREQ, HAS_PRES, HAS_REP, HAS_STOP, HAS_BIAS)\n'
            '        tl.store(x_row + path_tok, path_new, mask=on_path)\n'),
           ("tests/test_kernels_path_penalties.py",)),
    Mutant("penalties: the list's last slot dropped", "kernels/path_penalties.py",
           "mask=(flag != 0) & (pos < CAP))", "mask=(flag != 0) & (pos < CAP - 1))", ("tests/test_kernels_path_penalties.py",)),
    Mutant("penalties: counts read by request index, not pool row", "kernels/path_penalties.py",
           "    req_counts = counts_ptr + tl.load(rows_ptr + b) * V\n", "    req_counts = counts_ptr + b * V\n", ("tests/test_kernels_path_penalties.py",)),
    Mutant("kept lists: a token committed twice in a round appended twice", "kernels/path_penalties.py",
           "    first = live & (tl.sum(earlier.to(tl.int32), axis=1) == 0)\n", "    first = live\n",
           ("tests/test_kernels_path_penalties.py::test_kept_lists_equal_lists_made_from_scratch",)),
    Mutant("kept lists: an appended token not flagged as listed", "kernels/path_penalties.py",
           "    tl.store(flags_ptr + row * V + tok, tl.full([LP], 1, tl.int8), mask=new)\n", "",
           ("tests/test_kernels_path_penalties.py::test_kept_lists_equal_lists_made_from_scratch",)),
    Mutant("kept lists: a restart keeps the row's old flags", "kernels/path_penalties.py",
           "        tl.store(flags_ptr + out_row * V + idx, flag.to(tl.int8), mask=live)\n",
           "        tl.store(flags_ptr + out_row * V + idx, flag.to(tl.int8), mask=live & (flag != 0))\n",
           ("tests/test_kernels_path_penalties.py::test_kept_lists_equal_lists_made_from_scratch",)),
    Mutant("node sampler: committed tokens counted but not listed", "patches/node_sampling.py",
           "            self.lists.append(idx, tokens, lengths)\n", "            pass\n",
           ("tests/test_node_sampling.py::test_counts_follow_requests_and_reach_the_draw",)),
)

# `--speculative-ddtree-budget auto` and the audit's proof of an applied plan.
AUTO_AND_PROOF = (
    Mutant("auto budget: a narrower tree keeps a link to the first node past its cut", "patches/auto_budget.py",
           "torch.where(links >= n, torch.full_like(links, -1), links)",
           "torch.where(links > n, torch.full_like(links, -1), links)",
           ("tests/test_auto_budget.py::test_the_prefix_of_the_widest_tree_is_each_smaller_budget_s_tree",)),
    Mutant("auto budget: a budget's gain counts the root's path probability too", "patches/auto_budget.py",
           "probs = logprob[:, 1:].float().exp().cumsum(dim=1)", "probs = logprob[:, :-1].float().exp().cumsum(dim=1)",
           ("tests/test_auto_budget.py::test_the_gain_of_a_budget_is_the_sum_of_its_nodes_path_probabilities",)),
    Mutant("auto budget: the chooser ignores the observed/predicted acceptance", "patches/budget_ladder.py",
           "return 1.0 + self.calibration.ratio(budget) * self.gains[", "return 1.0 + 1.0 * self.gains[",
           ("tests/test_budget_ladder.py::test_an_over_confident_drafter_narrows_the_choice",)),
    Mutant("audit proof: a patched file is taken as the plan applied without comparing its bytes", "ddtree_patch/proof.py",
           "    if source.encode(result.replacements) != current:\n        return None\n", "",
           ("tests/test_audit_proof.py::test_bytes_of_another_plan_fail_the_proof",)),
    Mutant("transaction: a plan built before another apply or revert is written anyway", "ddtree_patch/transaction/applying.py",
           "    if install_state(install) == plan.base:\n        return\n", "    return\n",
           ("tests/test_transaction_hardening.py::test_a_plan_built_before_a_concurrent_revert_is_refused",)),
    Mutant("lock: a lock file replaced since its open is taken as held", "ddtree_patch/lockfile.py",
           "    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)\n", "    return True\n",
           ("tests/test_transaction_concurrency.py::test_a_lock_file_its_holder_removes_is_never_held_twice[replaced]",)),
)

# Hybrid targets (issue 51): the window along each tree path, per-node recurrent state, the MLA gate.
WINDOW = ("tests/test_kernels_tree_window.py",)
WINDOW_SGLANG = ("tests/test_tree_window_sglang.py",)
RECURRENCE = ("tests/test_kernels_tree_recurrence.py",)
HYBRID = (
    Mutant("hybrid: the window measured from the verify row, not along the path", "kernels/tree_window_reference.py",
           "            query = length + depth[b]\n", "            query = length + torch.arange(n, device=parent.device)\n",
           WINDOW),
    Mutant("hybrid: the window dropped from the path-window mask", "kernels/tree_window_reference.py",
           "        if window >= 0:\n", "        if False:\n", WINDOW),
    Mutant("hybrid: the Triton path-window builder measures the window from the row", "kernels/tree_window.py",
           "    d_row = tl.load(depth_ptr + b * n_nodes + rows, mask=live, other=0).to(tl.int64)\n",
           "    d_row = rows.to(tl.int64)\n",
           ("tests/test_kernels_tree_window.py::test_triton_builder_equals_the_reference",)),
    Mutant("hybrid: the path-window call keeps SGLang's window on the verify rows", "patches/tree_window.py",
           '"sliding_window_size": verify_window(int(arguments["sliding_window_size"]), width)}',
           '"sliding_window_size": int(arguments["sliding_window_size"])}', WINDOW_SGLANG),
    Mutant("hybrid: the path-window call leaves the mask's prefix columns unread", "patches/tree_window.py",
           '"skip_prefix_custom_mask": False,', '"skip_prefix_custom_mask": True,', WINDOW_SGLANG),
    Mutant("hybrid: a node's state taken from the previous node, not its parent", "kernels/tree_recurrence_reference.py",
           "        p = parent[:, i]\n", "        p = torch.full_like(parent[:, i], i - 1)\n", RECURRENCE),
    Mutant("hybrid: the committed state at the accepted length (DFlash's chain index)",
           "kernels/tree_recurrence_reference.py",
           "    last = accepted_idx.gather(1, accept_len.long()[:, None])[:, 0]\n", "    last = accept_len.long()\n",
           RECURRENCE),
    Mutant("hybrid: the convolution reads the inputs in node order, not along the path",
           "kernels/tree_recurrence_reference.py", "x[b, path[::-1]]", "x[b, :i + 1]", RECURRENCE),
    Mutant("hybrid: MLA targets admitted on MLA backends that verify without the mask", "patches/server_args.py",
           "    if backend in MLA_REFUSED_BACKENDS and is_mla_target(", "    if False and is_mla_target(",
           ("tests/test_architectures.py",)),
)

MUTANTS: tuple[Mutant, ...] = RULES + TRANSACTION + VERIFY + KERNELS + WORKER + CAPTURE + TRITON + AUTO_AND_PROOF + HYBRID
