from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from trm.data.loader import PuzzleLoader
from trm.errors import TRMError


def batches(loader, n=None):
    return list(itertools.islice(loader.iter_train(), n))


def same(a, b):
    assert len(a) == len(b)
    for (sa, ba, ea), (sb, bb, eb) in zip(a, b, strict=True):
        assert sa == sb and ea == eb
        for k in ba:
            assert torch.equal(ba[k], bb[k]), k


def test_compact_and_materialized_yield_identical_batches(smoke_dirs):
    for split_iter in ("iter_train", "iter_test"):
        out = []
        for form in ("compact", "materialized"):
            loader = PuzzleLoader(
                [smoke_dirs[form]], split_iter[5:], global_batch_size=32, seed=3, epochs_per_iter=2
            )
            out.append(list(getattr(loader, split_iter)()))
        same(*out)
        assert len(out[0]) > 3


def test_batch_contents_follow_the_sampling_rules(smoke_dirs):
    d = smoke_dirs["compact"]
    loader = PuzzleLoader([d], "train", global_batch_size=32, seed=0)
    ids = json.loads((d / "identifiers.json").read_text())
    seen_tasks = []
    all_batches = batches(loader)
    for name, batch, effective in all_batches:
        assert name == "all" and effective == 32
        assert batch["inputs"].shape == (32, 900) and batch["inputs"].dtype == torch.int32
        assert batch["labels"].dtype == torch.int32 and batch["puzzle_identifiers"].shape == (32,)
        labels = batch["labels"]
        assert ((labels == -100) | (labels >= 1)).all() and (labels == -100).any()  # PAD -> ignore
        pids = batch["puzzle_identifiers"].tolist()
        runs = [k for k, _ in itertools.groupby(pids)]
        assert len(runs) == len(set(runs))  # one puzzle's examples are contiguous
        tasks = [ids[p].split("|||")[0] for p in runs]
        assert len(tasks) == len(set(tasks))  # one augmentation per group visit
        seen_tasks += tasks
        for p in set(pids):  # examples of a puzzle are distinct
            rows = batch["inputs"][torch.tensor(pids) == p]
            assert len({tuple(r.tolist()) for r in rows}) == len(rows)
    # one epoch visits every group at most once (the tail that cannot fill a batch is dropped)
    assert len(seen_tasks) == len(set(seen_tasks)) and len(seen_tasks) >= 24 - 8


@pytest.mark.parametrize("prefetch", [0, 2], ids=["built-on-demand", "prefetched"])
def test_resume_yields_exactly_the_remaining_batches(smoke_dirs, prefetch):
    # prefetched: the thread builds batches past the last one handed out; the state is still that one's
    d = smoke_dirs["compact"]

    def make(world_size=1, rank=0):
        return PuzzleLoader(
            [d], "train", global_batch_size=16, seed=5, epochs_per_iter=2, rank=rank, world_size=world_size,
            prefetch=prefetch,
        )  # fmt: skip

    straight = make()
    reference = batches(straight) + batches(straight)  # two iterations
    first = len(reference) // 2
    for cut in (1, first - 1, first, first + 2):
        partial = make()
        consumed = batches(partial, cut) if cut <= first else batches(partial) + batches(partial, cut - first)
        state = json.loads(json.dumps(partial.state_dict()))  # survives a JSON round trip (checkpoints)
        resumed = make()
        resumed.load_state_dict(state)
        rest = batches(resumed)  # finishes the interrupted pass (empty if it stopped after its last batch)
        if cut <= first:
            rest += batches(resumed)  # the next pass
        same(consumed + rest, reference)


def test_ranks_partition_the_global_batch_and_resume_across_world_sizes(smoke_dirs):
    d = smoke_dirs["compact"]
    whole = batches(PuzzleLoader([d], "train", global_batch_size=24, seed=2))
    parts = [
        batches(PuzzleLoader([d], "train", global_batch_size=24, seed=2, rank=r, world_size=4))
        for r in range(4)
    ]
    for i, (_, batch, _) in enumerate(whole):
        for k in batch:
            assert torch.equal(torch.cat([p[i][1][k] for p in parts]), batch[k])
    one = PuzzleLoader([d], "train", global_batch_size=24, seed=2)
    batches(one, 2)
    two = PuzzleLoader([d], "train", global_batch_size=24, seed=2, rank=1, world_size=2)
    two.load_state_dict(one.state_dict())
    for (_, b, _), (_, ref, _) in zip(two.iter_train(), whole[2:], strict=True):
        assert torch.equal(b["inputs"], ref["inputs"][12:])


def test_prefetched_batches_are_the_same_batches_and_the_state_follows_the_consumer(smoke_dirs):
    d = smoke_dirs["compact"]

    def walk(prefetch):
        """Two passes: every batch, and the loader's state after each was handed out."""
        loader = PuzzleLoader([d], "train", global_batch_size=8, seed=4, epochs_per_iter=3, prefetch=prefetch)
        seen, states = [], []
        for _pass in range(2):
            for item in loader.iter_train():
                seen.append(item)
                states.append(loader.state_dict())
            states.append(loader.state_dict())  # after the pass: the next one's start
        return seen, states

    reference, reference_states = walk(0)
    ahead, ahead_states = walk(3)
    assert len(reference) > 8
    same(ahead, reference)
    assert ahead_states == reference_states  # never past what was handed out, though the thread builds ahead


def test_no_global_rng_and_seed_matters(smoke_dirs):
    d = smoke_dirs["compact"]
    np.random.seed(1)
    torch.manual_seed(1)
    a = batches(PuzzleLoader([d], "train", global_batch_size=16, seed=9))
    np.random.seed(2)
    torch.manual_seed(2)
    same(a, batches(PuzzleLoader([d], "train", global_batch_size=16, seed=9)))
    other = batches(PuzzleLoader([d], "train", global_batch_size=16, seed=10))
    assert not torch.equal(a[0][1]["inputs"], other[0][1]["inputs"])
    loader = PuzzleLoader([d], "train", global_batch_size=16, seed=9)
    second = batches(loader)
    assert not torch.equal(batches(loader)[0][1]["inputs"], second[0][1]["inputs"])  # next iteration differs


def test_test_iteration_covers_every_example_once_with_blank_padding(smoke_dirs):
    d = smoke_dirs["materialized"]
    total = int(np.load(d / "test" / "all__puzzle_indices.npy")[-1])
    inputs = np.load(d / "test" / "all__inputs.npy")
    for world_size in (1, 3):
        chunks = [
            list(PuzzleLoader([d], "test", global_batch_size=33, rank=r, world_size=world_size).iter_test())
            for r in range(world_size)
        ]
        assert all(len(c) == -(-total // 33) for c in chunks)
        assert [e for _, _, e in chunks[0]] == [min(33, total - i) for i in range(0, total, 33)]
        rows = []
        for i in range(len(chunks[0])):
            for r in range(world_size):
                batch = chunks[r][i][1]
                real = batch["puzzle_identifiers"] != 0
                assert real.sum() <= 33 // world_size
                assert (batch["inputs"][~real] == 0).all() and (batch["labels"][~real] == -100).all()
                rows.extend(batch["inputs"][real].numpy())
        assert np.array_equal(np.stack(rows), inputs)


def test_several_data_paths_are_merged(smoke_dirs):
    a, b = smoke_dirs["compact"], smoke_dirs["materialized"]
    single = PuzzleLoader([a], "train", global_batch_size=16)
    merged = PuzzleLoader([a, b], "train", global_batch_size=16)
    n = single.metadata.num_puzzle_identifiers
    assert (
        merged.metadata.num_puzzle_identifiers == 2 * n
        and merged.metadata.total_groups == 2 * single.metadata.total_groups
    )
    assert merged.metadata.sets == ["all", "all1"] and len(merged.identifiers) == 2 * n
    out = batches(merged)
    names = [s for s, _, _ in out]
    assert names == sorted(names) and set(names) == {"all", "all1"}  # one set after the other
    for name, batch, _ in out:
        pids = batch["puzzle_identifiers"]
        assert ((pids >= n) if name == "all1" else (pids < n)).all()
        assert merged.identifiers[int(pids[0])] == single.identifiers[int(pids[0]) % n]
    assert merged.fingerprint != single.fingerprint and len(merged.test_puzzles) == 12


def test_bad_arguments_and_mismatched_state(smoke_dirs):
    d = smoke_dirs["compact"]
    with pytest.raises(TRMError, match="multiple of the world size"):
        PuzzleLoader([d], "train", global_batch_size=10, world_size=4)
    with pytest.raises(TRMError, match="split"):
        PuzzleLoader([d], "valid", global_batch_size=8)
    with pytest.raises(TRMError, match=r"prefetch=-1 must be ≥ 0"):
        PuzzleLoader([d], "train", global_batch_size=8, prefetch=-1)
    state = PuzzleLoader([d], "train", global_batch_size=8, seed=1).state_dict()
    with pytest.raises(TRMError, match="seed"):
        PuzzleLoader([d], "train", global_batch_size=8, seed=2).load_state_dict(state)


def test_row_reader_matches_numpy_indexing(smoke_dirs):
    from trm.data.formats import RowReader

    path = smoke_dirs["materialized"] / "train" / "all__inputs.npy"
    full = np.load(path)
    reader = RowReader(path)
    ids = np.random.default_rng(0).integers(0, len(full), 300)
    ids[:3] = [5, 5, 6]  # repeats and a run
    assert np.array_equal(reader.rows(ids), full[ids])
    assert reader.rows(np.zeros(0, dtype=np.int64)).shape == (0, 900)
    with pytest.raises(IndexError):
        reader.rows(np.array([len(full)]))
