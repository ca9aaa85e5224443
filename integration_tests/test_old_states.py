"""Checkpoints written by the version before states took Grain's shapes still restore.

The fixtures in fixtures/old_states/ were written once by `make_old_states.py`
against that version (states with "grain_fingerprint" inside, the earlier key
names of random_map, map_with_index, limit and mix). Each is restored into
the current code, which must continue with exactly the elements the old
version produced after the save.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pathlib
import shutil
import sys
import warnings

import pytest

import grain

HERE = pathlib.Path(__file__).resolve().parent / "fixtures" / "old_states"


def _pipelines():
    spec = importlib.util.spec_from_file_location("old_state_pipelines", HERE / "pipelines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PIPELINES = _pipelines()
SAVED = json.loads((HERE / "states.json").read_text())


def _continuation(iterator):
    try:
        return [PIPELINES.plain(next(iterator)) for _ in range(PIPELINES.CONTINUATION)]
    finally:
        iterator.close()


def test_every_pipeline_has_a_fixture():
    assert set(SAVED) == set(PIPELINES.PIPELINES)
    # The fixtures are of the old format: every state carries its fingerprint.
    assert all("grain_fingerprint" in entry["state"] for entry in SAVED.values())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(PIPELINES.PIPELINES))
def test_old_state_restores_and_continues_identically(name):
    builder, _ = PIPELINES.PIPELINES[name]
    iterator = iter(builder())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fingerprinted old state restores without warning
        iterator.set_state(SAVED[name]["state"])
    # The restored state is the new shape: no fingerprint, and it restores again.
    state = iterator.get_state()
    assert "grain_fingerprint" not in json.dumps(state)
    assert _continuation(iterator) == SAVED[name]["next"]
    again = iter(builder())
    again.set_state(state)
    assert _continuation(again) == SAVED[name]["next"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(set(PIPELINES.PIPELINES) - {"mix"}))
def test_old_state_of_another_pipeline_is_refused(name):
    """The old states' fingerprints are still checked: another seed or length is refused.

    (Not the mix: its fingerprint token stands for its components, which it matches by
    their hashes; test_old_mix_state_with_fingerprint_but_no_components_is_refused.)
    """
    state = dict(SAVED[name]["state"])
    state["grain_fingerprint"] = "range(0:3:1) > to_iter"
    builder, _ = PIPELINES.PIPELINES[name]
    iterator = iter(builder())
    try:
        with pytest.raises(ValueError, match="different pipeline"):
            iterator.set_state(state)
    finally:
        iterator.close()


@pytest.mark.timeout(60)
def test_old_mix_state_with_fingerprint_but_no_components_is_refused():
    state = json.loads(json.dumps(SAVED["mix"]["state"]))
    del state["components"]
    iterator = iter(PIPELINES.mix())
    with pytest.raises(ValueError, match="no 'components' entry"):
        iterator.set_state(state)
    # Without the fingerprint (a state of a version before it existed), by place.
    del state["grain_fingerprint"]
    iterator.set_state(state)
    assert _continuation(iterator) == SAVED["mix"]["next"]


@pytest.mark.timeout(60)
def test_old_state_file_restores(tmp_path):
    builder, _ = PIPELINES.PIPELINES[PIPELINES.FILE_PIPELINE]
    directory = tmp_path / "ckpt"
    shutil.copytree(HERE / "state_file", directory)
    iterator = iter(builder())
    asyncio.run(iterator.load(directory))
    assert _continuation(iterator) == SAVED[PIPELINES.FILE_PIPELINE]["next"]


@pytest.mark.timeout(60)
def test_old_state_file_of_another_pipeline_is_refused(tmp_path):
    directory = tmp_path / "ckpt"
    shutil.copytree(HERE / "state_file", directory)
    other = iter(grain.MapDataset.range(60).shuffle(seed=8).to_iter_dataset())
    with pytest.raises(ValueError, match="different pipeline"):
        asyncio.run(other.load(directory))


@pytest.mark.timeout(120)
def test_old_orbax_checkpoint_restores(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    builder, _ = PIPELINES.PIPELINES[PIPELINES.FILE_PIPELINE]
    directory = tmp_path / "orbax"
    shutil.copytree(HERE / "orbax", directory)
    handler = grain.checkpoint.CheckpointHandler()
    iterator = handler.restore(directory, args=grain.checkpoint.CheckpointRestore(iter(builder())))
    assert _continuation(iterator) == SAVED[PIPELINES.FILE_PIPELINE]["next"]
    other = iter(grain.MapDataset.range(60).shuffle(seed=8).to_iter_dataset())
    with pytest.raises(ValueError, match="different pipeline"):
        handler.restore(directory, args=grain.checkpoint.CheckpointRestore(other))
