"""`tree_verify`'s verify input and padding, by content, against hand-written trees.

The round harness's fake target reads neither the mask nor the positions, so a wrong ancestor
mask or a position off by one would pass there; here every value is spelled out. The module is
imported in-process from the stub SGLang (with our kernels at their drop-in place).
"""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from scripts.gpu import matrix as gpu_matrix  # noqa: E402

# Two requests, five nodes each: request 0 a chain 0-1-3 with 2, 4 below the root's second
# child; request 1 a plain chain.
PARENT = [[-1, 0, 0, 1, 2], [-1, 0, 1, 2, 3]]
DEPTH = [[0, 1, 1, 2, 2], [0, 1, 2, 3, 4]]
# Row i, column j: node j is i's ancestor or i itself.
VISIBLE = [
    [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
    [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]],
]


@pytest.fixture(scope="module")
def tv(dropin):
    return dropin("tree_verify")


@pytest.fixture
def tree(dropin):
    """A fresh tree per test: `from_tree` writes the bonus token into its root in place."""
    return dropin("kernels").DraftTree(
        tokens=torch.tensor([[-1, 11, 12, 13, 14], [-1, 21, 22, 23, 24]]),
        depth=torch.tensor(DEPTH),
        parent=torch.tensor(PARENT),
        first_child=torch.tensor([[1, 3, 4, -1, -1], [1, 2, 3, 4, -1]]),
        next_sibling=torch.tensor([[-1, 2, -1, -1, -1], [-1, -1, -1, -1, -1]]),
        logprob=torch.tensor([[0.0, -0.1, -0.2, -0.3, -0.4], [0.0, -0.5, -0.6, -0.7, -0.8]]),
    )


def _expected_mask(prefix_lens: list[int], prefix_ones: bool, slack: int = 0) -> list[bool]:
    flat: list[bool] = []
    for b, length in enumerate(prefix_lens):
        for row in VISIBLE[b]:
            flat += [prefix_ones] * length + [bool(v) for v in row]
    return flat + [False] * slack


@pytest.mark.parametrize("prefix_ones", [True, False])
def test_from_tree_carries_the_tree_its_depth_positions_and_the_ancestor_mask(tv, tree, prefix_ones):
    prefix = [3, 1]
    verify = tv.DDTreeVerifyInput.from_tree(tree, torch.tensor([7, 8]), torch.tensor(prefix), 4,
                                            prefix_ones=prefix_ones)
    assert verify.draft_token.tolist() == [7, 11, 12, 13, 14, 8, 21, 22, 23, 24]
    assert verify.positions.tolist() == [3, 4, 4, 5, 5, 1, 2, 3, 4, 5]
    assert verify.draft_token_num == 5
    assert verify.capture_hidden_mode.name == "FULL"
    mask = verify.custom_mask
    assert mask.dtype == torch.bool
    assert mask[: 5 * 4 + 2 * 25].tolist() == _expected_mask(prefix, prefix_ones)


def test_the_mask_is_sized_by_the_host_bound_and_laid_out_by_the_device_lengths(tv, tree):
    verify = tv.DDTreeVerifyInput.from_tree(tree, torch.tensor([7, 8]), torch.tensor([2, 2]), 6)
    assert verify.custom_mask.numel() == 5 * 6 + 2 * 25
    assert verify.custom_mask[: 5 * 4 + 2 * 25].tolist() == _expected_mask([2, 2], True)


def test_pad_tree_adds_childless_root_children_that_no_node_sees(tv, tree):
    same = tv.pad_tree(tree, 5)
    assert all(torch.equal(a, b) for a, b in zip(same, tree))
    with pytest.raises(ValueError, match="cannot pad"):
        tv.pad_tree(tree, 4)
    padded = tv.pad_tree(tree, 7)
    assert padded.tokens[:, 5:].tolist() == [[0, 0]] * 2
    assert padded.depth[:, 5:].tolist() == [[0, 0]] * 2
    assert padded.parent[:, 5:].tolist() == [[0, 0]] * 2
    assert padded.first_child[:, 5:].tolist() == [[-1, -1]] * 2
    assert padded.next_sibling[:, 5:].tolist() == [[-1, -1]] * 2
    assert torch.isneginf(padded.logprob[:, 5:]).all()
    for field in tree._fields:
        assert torch.equal(getattr(padded, field)[:, :5], getattr(tree, field)), field
    verify = tv.DDTreeVerifyInput.from_tree(padded, torch.tensor([7, 8]), torch.tensor([0, 0]), 0)
    mask = verify.custom_mask.view(2, 7, 7)
    assert mask[:, 5:, :].tolist() == [[[True, False, False, False, False, True, False],
                                        [True, False, False, False, False, False, True]]] * 2
    assert not mask[:, :5, 5:].any()  # no tree node sees the padding
    assert verify.positions.view(2, 7)[:, 5:].tolist() == [[0, 0]] * 2


class TritonAttnBackend:
    def __init__(self, deterministic: bool = False, dllm: object = None) -> None:
        self.enable_deterministic = deterministic
        self.dllm_attention = dllm


class FlashInferAttnBackend(TritonAttnBackend):
    pass


def test_only_the_plain_triton_backend_skips_the_prefix_columns(tv):
    assert tv.mask_reads_prefix(TritonAttnBackend()) is False
    assert tv.mask_reads_prefix(TritonAttnBackend(deterministic=True)) is True
    assert tv.mask_reads_prefix(TritonAttnBackend(dllm=object())) is True
    assert tv.mask_reads_prefix(FlashInferAttnBackend()) is True
    assert tv.mask_reads_prefix(object()) is True


@pytest.mark.parametrize("prefix_ones", [True, False])
def test_a_mask_buffer_that_fits_holds_the_mask_and_the_verify_input_carries_that_view(tv, tree, prefix_ones,
                                                                                      caplog):
    """Built in place: the verify input's mask is the buffer's first `size` bytes in the buffer's own
    dtype (so the graph replay's copy onto the buffer is a copy onto itself), with the mask's values;
    the process says so once."""
    tv._announce_mask_in_place.cache_clear()
    buffer = torch.full((5 * 6 + 2 * 25 + 7,), 9, dtype=torch.uint8)
    verify = tv.DDTreeVerifyInput.from_tree(tree, torch.tensor([7, 8]), torch.tensor([3, 1]), 6,
                                            prefix_ones=prefix_ones, mask_buffer=buffer)
    mask = verify.custom_mask
    assert mask.dtype == torch.uint8 and mask.data_ptr() == buffer.data_ptr() and mask.numel() == 5 * 6 + 2 * 25
    assert mask.bool().tolist() == _expected_mask([3, 1], prefix_ones, slack=10)
    assert buffer[mask.numel():].tolist() == [9] * 7  # nothing written past the mask
    assert caplog.text.count(tv.MASK_LOG) == 1 and tv.MASK_LOG.startswith(gpu_matrix.MASK_IN_PLACE_LOG)


def test_a_mask_buffer_too_small_leaves_the_mask_its_own_allocation(tv, tree, caplog):
    tv._announce_mask_in_place.cache_clear()
    buffer = torch.zeros(5 * 4 + 2 * 25 - 1, dtype=torch.uint8)
    verify = tv.DDTreeVerifyInput.from_tree(tree, torch.tensor([7, 8]), torch.tensor([3, 1]), 4, mask_buffer=buffer)
    assert verify.custom_mask.dtype == torch.bool and verify.custom_mask.data_ptr() != buffer.data_ptr()
    assert not buffer.any() and tv.MASK_LOG not in caplog.text


class VerifyMask:  # the 0.5.17+ holder's fields the lookup reads
    def __init__(self, buffer, mode="FULL_MASK"):
        self.buffer, self.mode = buffer, type("Mode", (), {"name": mode})()


def _graphed(buffer):
    """<= 0.5.16: the getter EAGLE's v2 worker calls (a class named as SGLang's: the lookup goes by the name)."""
    cls = type("TritonAttnBackend", (TritonAttnBackend,),
               {"get_verify_buffers_to_fill_after_draft": lambda self: [self.cuda_graph_custom_mask, None]})
    backend = cls()
    backend.cuda_graph_custom_mask = buffer
    return backend


def _holding(holder):
    """0.5.17+: the verify_mask property."""
    backend = type("TritonAttnBackend", (TritonAttnBackend,), {"verify_mask": property(lambda self: self._holder)})()
    backend._holder = holder
    return backend


def test_the_graph_mask_buffer_only_when_asked_and_only_triton_s(tv, monkeypatch):
    buffer = torch.zeros(64, dtype=torch.uint8)
    monkeypatch.delenv(tv.MASK_ENV, raising=False)
    assert tv.graph_mask_buffer(_graphed(buffer)) is None and tv.graph_mask_buffer(_holding(VerifyMask(buffer))) is None
    monkeypatch.setenv(tv.MASK_ENV, "1")
    assert tv.graph_mask_buffer(_graphed(buffer)) is buffer and tv.graph_mask_buffer(_holding(VerifyMask(buffer))) is buffer
    assert tv.graph_mask_buffer(_graphed(None)) is None  # no CUDA graphs
    assert tv.graph_mask_buffer(_holding(None)) is None
    assert tv.graph_mask_buffer(_holding(VerifyMask(buffer, "QLEN_ONLY"))) is None  # another layout
    assert tv.graph_mask_buffer(_graphed(torch.zeros(8, 8, dtype=torch.uint8))) is None
    assert tv.graph_mask_buffer(TritonAttnBackend()) is None  # neither lookup
    assert tv.graph_mask_buffer(FlashInferAttnBackend()) is None
