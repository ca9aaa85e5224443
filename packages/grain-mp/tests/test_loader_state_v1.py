"""Version-1 DataLoader states (written before the loader ran on the Dataset engine) still restore.

``fixtures/loader_states_v1.json`` holds states that the code at commit da06b0d
wrote for the pipelines below, at points chosen to include mid-unit positions
(``skip`` > 0) and replays (``replay`` > 0), each with what that code returned
after restoring it (the continuation). Today's loader must continue each one
identically, with any worker count, and its own states from there on must
restore too.

Regenerate (only ever with the old code, which wrote version 1)::

    git worktree add /tmp/loader_old da06b0d
    PYTHONPATH=/tmp/loader_old/packages/grain-mp/src \\
        uv run python packages/grain-mp/tests/test_loader_state_v1.py
"""

import json
import pathlib

import numpy as np
import pytest

from grain_dataset import Batch, FilterTransform, FlatMapTransform, MapTransform
from grain_index import IndexSampler, Record
from grain_mp import DataLoader, PackAndBatchOperation

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "loader_states_v1.json"
N = 24


class Double(MapTransform):
    def map(self, element):
        return element * 2


class NotMultipleOf3(FilterTransform):
    def filter(self, element):
        return element % 3 != 0


class Repeat(FlatMapTransform):
    """Element x becomes x % 3 copies of x (0 copies: it disappears)."""

    max_fan_out = 2

    def flat_map(self, element):
        return [element] * (element % 3)


class Unbatch(FlatMapTransform):
    """A batch of 2 becomes its first `batch[0] % 3` elements: 0, 1 or 2 outputs."""

    max_fan_out = 2

    def flat_map(self, element):
        return list(element)[: int(element[0]) % 3]


class Pairs:
    """Two records in, one out, with the second one's metadata; an odd last one is dropped."""

    def __call__(self, records):
        records = iter(records)
        for first in records:
            second = next(records, None)
            if second is not None:
                yield Record(second.metadata, first.data * 1000 + second.data)


class Tokens:
    """Record k: a sequence of 1 + (k * 7) % 5 tokens, all equal to k + 1."""

    def __len__(self):
        return N

    def __getitem__(self, key):
        return {"tokens": np.full(1 + (key * 7) % 5, key + 1, np.int32)}

    def __repr__(self):
        return "Tokens()"


PIPELINES = {
    "plain": [],
    "map_batch": [Double(), Batch(5)],
    "filter_batch": [NotMultipleOf3(), Batch(4)],
    "flat_map_batch": [Repeat(), Batch(3)],
    "batch_flat_map": [NotMultipleOf3(), Batch(2), Unbatch(), Batch(3)],
    "pairs_after_filter_batch": [NotMultipleOf3(), Batch(2), Pairs()],
    "pack_and_batch": [PackAndBatchOperation({"tokens": 8}, batch_size=3)],
}


def _loader(name, workers=0):
    return DataLoader(
        data_source=Tokens() if name == "pack_and_batch" else list(range(N)),
        sampler=IndexSampler(N, shuffle=True, num_epochs=2, seed=7),
        operations=PIPELINES[name],
        worker_count=workers,
    )


def _plain(element):
    if isinstance(element, np.ndarray):
        return element.tolist()
    if isinstance(element, tuple | list):
        return [_plain(e) for e in element]
    if isinstance(element, dict):
        return {k: _plain(v) for k, v in element.items()}
    if isinstance(element, np.integer):
        return int(element)
    return element


def _cases():
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_mid_unit_positions_and_replays():
    cases = _cases()
    assert set(cases) == set(PIPELINES)
    states = [case["state"] for points in cases.values() for case in points]
    assert all(state["version"] == 1 for state in states)
    assert any(state["skip"] > 0 for state in states)
    assert any(state["replay"] > 0 for state in states)
    assert {k for k, points in cases.items() if any(c["state"]["replay"] for c in points)} >= {
        "batch_flat_map",
        "pairs_after_filter_batch",
        "pack_and_batch",
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_version_1_state_continues_as_the_old_code_did(name, workers):
    loader = _loader(name, workers)
    for case in _cases()[name]:
        it = iter(loader)
        it.set_state(case["state"])
        head = [_plain(next(it)) for _ in range(min(2, len(case["continuation"])))]
        # The new state (version 2) taken after a version-1 restore resumes exactly too.
        state = it.get_state()
        assert json.loads(state)["version"] == 2
        it.close()
        resumed = iter(_loader(name, 2 - workers))
        resumed.set_state(state)
        assert head + [_plain(x) for x in resumed] == case["continuation"], case["point"]


def _write_fixture():  # pragma: no cover - run by hand with the old code, see the docstring
    cases = {}
    for name in PIPELINES:
        everything = [_plain(x) for x in _loader(name)]
        points = []
        for point in range(len(everything) + 1):
            it = iter(_loader(name))
            for _ in range(point):
                next(it)
            state = json.loads(it.get_state())
            assert state["version"] == 1, "write the fixture with the old code"
            resumed = iter(_loader(name))
            resumed.set_state(state)
            continuation = [_plain(x) for x in resumed]
            assert continuation == everything[point:]
            points.append({"point": point, "state": state, "continuation": continuation})
        special = [p for p in points if p["state"]["skip"] or p["state"]["replay"]][:4]
        ends = [points[0], points[1], points[len(points) // 2], points[-1]]
        chosen = {p["point"]: p for p in special + ends}
        cases[name] = [chosen[k] for k in sorted(chosen)]
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    _write_fixture()
