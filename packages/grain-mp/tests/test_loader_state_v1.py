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


class Echo(FlatMapTransform):
    """Odd x becomes x and x + 100; even x disappears."""

    max_fan_out = 2

    def flat_map(self, element):
        return [element, element + 100] if element % 2 else []


class Halves(FlatMapTransform):
    """A batch [a, b] becomes [a, b] when 3 does not divide a + b, else [b] ([a] alone: [a])."""

    max_fan_out = 2

    def flat_map(self, element):
        values = [int(x) for x in element]
        return values if sum(values) % 3 else values[-1:]


class Triples:
    """Three records in, their sum out with the third one's metadata; a short tail is dropped."""

    def __call__(self, records):
        group = []
        for record in records:
            group.append(record)
            if len(group) == 3:
                yield Record(record.metadata, sum(r.data for r in group))
                group = []


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
    "flat_map_batch": [Echo(), Batch(3)],
    "batch_flat_map": [NotMultipleOf3(), Batch(2), Halves(), Batch(3)],
    "triples_after_filter_batch": [NotMultipleOf3(), Batch(2), Triples()],
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
        "triples_after_filter_batch",
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
    FIXTURE.write_text(json.dumps(cases) + "\n")


if __name__ == "__main__":
    _write_fixture()
