"""DDTree's recurrent-state commit through DFlash's (patches/tree_recurrence.py): the steps DFlash names
along the accepted run become the accepted path's nodes, the rows whose states a tree verify cached."""

from __future__ import annotations

import torch

from patches.tree_recurrence import node_of_step, steps_as_nodes, tree_links


class Backend:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def update_mamba_state_after_mtp_verify(self, last_correct_step_indices, mamba_track_indices,
                                            mamba_steps_to_track, model, **kwargs):
        self.calls.append((last_correct_step_indices, mamba_track_indices, mamba_steps_to_track, model, kwargs))


ACCEPTED = torch.tensor([[0, 2, 5, -1], [0, 1, -1, -1]])  # request 0: root -> 2 -> 5; request 1: root -> 1


def test_steps_become_the_accepted_paths_nodes() -> None:
    assert node_of_step(ACCEPTED, torch.tensor([2, 1])).tolist() == [5, 1]
    assert node_of_step(ACCEPTED, torch.tensor([1, -1])).tolist() == [2, -1]  # -1: nothing to track


def test_the_commit_takes_nodes_while_open_and_steps_after() -> None:
    backend = Backend()
    track = torch.tensor([7, 8])
    with steps_as_nodes(backend, ACCEPTED):
        backend.update_mamba_state_after_mtp_verify(last_correct_step_indices=torch.tensor([2, 1]),
                                                    mamba_track_indices=track,
                                                    mamba_steps_to_track=torch.tensor([1, -1]), model="m",
                                                    req_pool_indices=None)
    last, tracked_slots, tracked, model, kwargs = backend.calls[0]
    assert last.tolist() == [5, 1] and tracked.tolist() == [2, -1] and tracked_slots is track and model == "m"
    assert kwargs == {"req_pool_indices": None}
    backend.update_mamba_state_after_mtp_verify(torch.tensor([2, 1]), None, None, None)
    assert backend.calls[1][0].tolist() == [2, 1] and backend.calls[1][2] is None
    assert "update_mamba_state_after_mtp_verify" not in vars(backend)


def test_the_links_are_ddtrees_own_as_int32() -> None:
    first, sibling = torch.tensor([[1, 3, -1, -1]]), torch.tensor([[-1, 2, -1, -1]])
    next_token, next_sibling = tree_links(first, sibling)
    assert next_token.dtype == next_sibling.dtype == torch.int32
    assert next_token.tolist() == first.tolist() and next_sibling.tolist() == sibling.tolist()
