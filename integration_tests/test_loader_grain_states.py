"""DataLoader states written by Google's Grain 0.2.18 (fixtures/grain_loader_states).

Where Grain's order is this library's (no shuffle, no random map, no sharding, nothing
run in the loader's own process, and, from two or more Grain workers, no batch and no
filter in the workers), a Grain state restores exactly: the outputs that followed it
in Grain follow it here, with any worker count. Elsewhere it is refused with the
reason. And where the orders agree, this library writes the same Grain keys as Grain.
"""

import importlib.util
import json
import pathlib

import pytest

HERE = pathlib.Path(__file__).parent / "fixtures" / "grain_loader_states"
_spec = importlib.util.spec_from_file_location("grain_pipelines", HERE / "grain_pipelines.py")
grain_pipelines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(grain_pipelines)

CASES = json.loads((HERE / "states.json").read_text())
RESTORED = {"plain_w0", "plain_w1", "batch3_w0", "map_batch4_w1", "plain_w2"}
REFUSED = {
    "batch3_w2": "workers each batched",
    "shuffled_w0": "sampler shuffles",
    "filter_batch2_w0": "operations run in this process",
}
GRAIN_KEYS = ("version", "last_seen_indices", "last_worker_index", "worker_count")


def test_the_fixture_was_written_by_grain():
    assert {case["name"] for case in CASES} == RESTORED | set(REFUSED)
    for case in CASES:
        state = json.loads(case["state"])
        assert set(state) == {*GRAIN_KEYS, "sampler", "data_source"}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_grain_state_restores_exactly_where_the_orders_agree(workers):
    for case in [case for case in CASES if case["name"] in RESTORED]:
        it = iter(grain_pipelines.loader(case["name"], workers))
        it.set_state(case["state"].encode())
        assert [grain_pipelines.plain(x) for x in it] == case["following"], case["name"]


@pytest.mark.timeout(120)
def test_a_grain_state_is_refused_where_the_orders_differ():
    for case in [case for case in CASES if case["name"] in REFUSED]:
        it = iter(grain_pipelines.loader(case["name"]))
        with pytest.raises(ValueError, match=f"written by Google's Grain.*{REFUSED[case['name']]}"):
            it.set_state(case["state"].encode())
        it.close()


@pytest.mark.timeout(180)
def test_where_the_orders_agree_the_grain_keys_are_graines():
    for case in [case for case in CASES if case["name"] in RESTORED]:
        it = iter(grain_pipelines.loader(case["name"]))
        for _ in range(case["point"]):
            next(it)
        ours = json.loads(it.get_state())
        it.close()
        grains = json.loads(case["state"])
        assert {key: ours[key] for key in GRAIN_KEYS} == {key: grains[key] for key in GRAIN_KEYS}
        assert (ours["sampler"], ours["data_source"]) == (grains["sampler"], grains["data_source"])
