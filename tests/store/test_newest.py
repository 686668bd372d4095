"""The writer's memory of each key's newest version against a dict of the keys."""

import random

import numpy as np
import pytest

from epochstate.daemon.store import newest
from epochstate.daemon.store.newest import NewestVersions, key_digest

LOW = (1 << 64) - 1


def _shared_high(encoded_key: bytes) -> int:
    """Digests whose high halves take 4 values (runs in the sorted arrays)."""
    return ((hash(encoded_key) % 4) << 64) | (hash(encoded_key) & LOW)


def _top_bits(encoded_key: bytes) -> int:
    """Digests whose high halves share their top bits (one bucket holds them all)."""
    return ((hash(encoded_key) & 0xFFFF) << 64) | (hash(encoded_key) & LOW)


@pytest.mark.parametrize(
    "digest", [key_digest, _shared_high, _top_bits], ids=["siphash", "shared-high", "one-bucket"]
)
@pytest.mark.parametrize("merge_at", [1, 64, 1 << 16])
def test_lookups_match_a_dict_of_the_keys_through_merges_and_removals(
    monkeypatch: pytest.MonkeyPatch, merge_at: int, digest: newest.KeyDigest
) -> None:
    monkeypatch.setattr(newest, "_MERGE_AT", merge_at)
    rng = random.Random(5)
    keys = [b"key-%06d" % i for i in range(3000)]
    memory = NewestVersions(10_000, complete=True, digest=digest)
    model: dict[bytes, int] = {}
    for epoch in range(40):
        changed = rng.sample(keys, 400)
        removed = [k for k in changed if k in model and rng.random() < 0.25]
        live = [k for k in changed if k not in removed]
        memory.written(map(digest, live), map(digest, removed), epoch)
        for key in removed:
            del model[key]
        model.update(dict.fromkeys(live, epoch))
        probe = rng.sample(keys, 500)
        assert memory.lookup([digest(k) for k in probe]) == [model.get(k) for k in probe], epoch
    assert memory.complete
    high, low = newest.halves([digest(k) for k in model], len(model))
    memory.load(high, low, np.array(list(model.values()), np.int64))
    assert memory.lookup([digest(k) for k in keys]) == [model.get(k) for k in keys]


def test_memory_full_forgets_everything_and_is_no_longer_complete() -> None:
    memory = NewestVersions(100, complete=True)
    memory.written([key_digest(b"k%d" % i) for i in range(80)], [], 1)
    assert memory.lookup([key_digest(b"k1")]) == [1] and memory.complete
    memory.written([key_digest(b"k%d" % i) for i in range(80, 130)], [], 2)
    assert not memory.complete
    assert memory.lookup([key_digest(b"k1"), key_digest(b"k120")]) == [None, None]


def test_a_digest_is_128_bits_of_two_keyed_hashes() -> None:
    digest = key_digest(b"user-1")
    assert digest >> 64 == hash(b"user-1") & LOW
    assert digest & LOW == hash(b"\x01user-1") & LOW
    assert len({key_digest(b"k%d" % i) for i in range(100_000)}) == 100_000


@pytest.mark.parametrize("digest", [key_digest, _shared_high], ids=["siphash", "shared-high"])
def test_a_store_s_first_keys_are_loaded_at_once(digest: newest.KeyDigest) -> None:
    keys = [b"key-%06d" % i for i in range(5000)]
    memory = NewestVersions(10_000, complete=True, digest=digest)
    memory.load_keys(keys, 4)
    assert memory.lookup([digest(k) for k in keys]) == [4] * len(keys)
    assert memory.lookup([digest(b"other")]) == [None]
    memory.load_keys(keys * 3, 5)  # more than the capacity
    assert not memory.complete and memory.lookup([digest(keys[0])]) == [None]
