"""Checkpoints written by Google's Grain 0.2.18 (fixtures/grain_states/).

Where no stage orders elements differently from Grain (no shuffle, seed or
mixture), Grain's state means the same element here: its `get_state()` equals
ours at the same point, and its checkpoint file restores and continues with
the elements Grain produced after it. A pipeline with a seeded stage refuses
it, since the same seed gives another order here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pathlib
import shutil
import sys

import pytest

import grain

HERE = pathlib.Path(__file__).resolve().parent / "fixtures" / "grain_states"


def _pipelines():
    spec = importlib.util.spec_from_file_location("grain_state_pipelines", HERE / "pipelines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PIPELINES = _pipelines()
EXPECTED = json.loads((HERE / "expected.json").read_text())


def _continuation(iterator):
    try:
        return [PIPELINES.plain(next(iterator)) for _ in range(PIPELINES.CONTINUATION)]
    finally:
        iterator.close()


@pytest.mark.parametrize("name", sorted(PIPELINES.PIPELINES))
def test_our_state_equals_grains_at_the_same_point(name):
    builder, steps = PIPELINES.PIPELINES[name]
    iterator = iter(builder())
    for _ in range(steps):
        next(iterator)
    assert iterator.get_state() == EXPECTED[name]["state"]
    iterator.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", PIPELINES.SAME_ORDER)
def test_a_grain_checkpoint_file_restores_exactly_where_the_order_is_grains(name, tmp_path):
    builder, _ = PIPELINES.PIPELINES[name]
    shutil.copytree(HERE / name, tmp_path / name)
    iterator = iter(builder())
    asyncio.run(iterator.load(tmp_path / name))
    assert _continuation(iterator) == EXPECTED[name]["next"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", PIPELINES.SAME_ORDER)
def test_a_grain_state_set_by_hand_restores_exactly(name):
    builder, _ = PIPELINES.PIPELINES[name]
    iterator = iter(builder())
    iterator.set_state(EXPECTED[name]["state"])
    assert _continuation(iterator) == EXPECTED[name]["next"]


@pytest.mark.timeout(60)
def test_a_grain_checkpoint_of_a_shuffled_pipeline_is_refused(tmp_path):
    shutil.copytree(HERE / "shuffled", tmp_path / "shuffled")
    iterator = iter(PIPELINES.shuffled())
    with pytest.raises(ValueError, match="different element order in Grain"):
        asyncio.run(iterator.load(tmp_path / "shuffled"))
    iterator.close()


@pytest.mark.timeout(120)
def test_a_grain_checkpoint_restores_through_the_orbax_handler(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    shutil.copytree(HERE / "counting", tmp_path / "counting")
    handler = grain.checkpoint.CheckpointHandler()
    iterator = handler.restore(
        tmp_path / "counting", args=grain.checkpoint.CheckpointRestore(iter(PIPELINES.counting()))
    )
    assert _continuation(iterator) == EXPECTED["counting"]["next"]
