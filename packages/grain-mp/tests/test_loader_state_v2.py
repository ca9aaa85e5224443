"""States of the format before Grain's keys (DataLoader format 2, ElasticIterator format 1) restore.

``fixtures/loader_states_v2.json`` holds states that the code at commit 2fffb04 wrote,
each with the outputs that followed it there (``fixtures/make_loader_states_v2.py``
wrote them; the pipelines are ``fixtures/state_fixture_pipelines.py``). Today's code
must continue each one identically, with any worker count, and the state it writes
after such a restore must restore too.
"""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))

from state_fixture_pipelines import elastic, loader, plain

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "loader_states_v2.json"
CASES = json.loads(FIXTURE.read_text())


def _take(it, count):
    out = []
    for _ in range(count):
        try:
            out.append(plain(next(it)))
        except StopIteration:
            break
    return out


def test_the_fixture_holds_the_old_formats_mid_epoch_and_across_epochs():
    states = [json.loads(case["state"]) for case in CASES["loader"]]
    assert all(state["version"] == 2 and "next_step" in state for state in states)
    assert {state["worker_count"] for state in states} == {0, 2}
    steps = {state["next_step"] for state in states}
    assert min(steps) == 0
    assert max(steps) > 20  # the samplers run two epochs of 20 records
    assert any(state["pipeline"].get("emitted") is not None for state in states)
    elastic_states = [case["state"] for case in CASES["elastic"]]
    assert all(state["elastic_format"] == 1 for state in elastic_states)
    assert {state["one_to_one"] for state in elastic_states} == {True, False}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_old_dataloader_state_continues_as_the_old_code_did(workers):
    for case in CASES["loader"]:
        it = iter(loader(case["name"], workers))
        it.set_state(case["state"])
        head = _take(it, 2)
        state = it.get_state()  # today's format, taken after the old state's restore
        it.close()
        assert "last_seen_indices" in json.loads(state)
        resumed = iter(loader(case["name"], 2 - workers))
        resumed.set_state(state)
        tail = _take(resumed, len(case["following"]) - len(head))
        resumed.close()
        assert head + tail == case["following"], (case["name"], case["point"])


@pytest.mark.timeout(120)
def test_an_old_elastic_state_continues_on_its_shard_as_the_old_code_did():
    for case in CASES["elastic"]:
        it = elastic(case["name"], case["shard_index"], case["shard_count"])
        it.set_state(case["state"])
        assert _take(it, len(case["following"])) == case["following"], case
        it.close()


@pytest.mark.timeout(120)
def test_old_elastic_states_of_all_shards_resume_on_other_shard_counts_as_before():
    for case in CASES["elastic_resized"]:
        it = elastic(case["name"], case["shard_index"], case["shard_count"])
        it.set_state(case["states"])
        assert _take(it, 3) == case["following"], case
        it.close()
