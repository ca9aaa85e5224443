"""grain.transforms and the transform base classes of grain.python."""

from __future__ import annotations

import numpy as np

import grain
import grain.python as pg
from _registry import case, expr, sampler

expr(
    "tr.batch.fields",
    "[grain.transforms.Batch(4).batch_size, grain.transforms.Batch(4).drop_remainder, grain.transforms.Batch(4).batch_fn]",
)
expr(
    "tr.batch.kw",
    "[grain.transforms.Batch(batch_size=3, drop_remainder=True).batch_size, grain.transforms.Batch(batch_size=3, drop_remainder=True).drop_remainder]",
)
expr("tr.batch.eq", "grain.transforms.Batch(2) == grain.transforms.Batch(2)")
expr("tr.batch.is_pg_batch", "grain.transforms.Batch is pg.Batch")
expr("tr.batch.is_dataclass", "__import__('dataclasses').is_dataclass(grain.transforms.Batch(2))")
expr("tr.batch.frozen", "outcome(lambda: setattr(grain.transforms.Batch(2), 'batch_size', 3))")
expr(
    "tr.batch.apply_map",
    "[b.tolist() for b in grain.MapDataset.range(5).apply(grain.transforms.Batch(2))]",
)
expr(
    "tr.batch.apply_batch_fn",
    "list(grain.MapDataset.range(5).apply(grain.transforms.Batch(2, batch_fn=sum)))",
)
expr(
    "tr.batch.apply_drop",
    "[b.tolist() for b in grain.MapDataset.range(5).to_iter_dataset().apply(grain.transforms.Batch(2, drop_remainder=True))]",
)
expr("tr.aliases.map", "grain.transforms.Map is pg.MapTransform")
expr("tr.aliases.random_map", "grain.transforms.RandomMap is pg.RandomMapTransform")
expr("tr.aliases.filter", "grain.transforms.Filter is pg.FilterTransform")
expr("tr.aliases.map_with_index", "grain.transforms.MapWithIndex is pg.MapWithIndexTransform")
expr(
    "tr.aliases.map_with_index_experimental",
    "grain.transforms.MapWithIndex is grain.experimental.MapWithIndexTransform",
)
expr("tr.aliases.selection_map", "grain.transforms.DatasetSelectionMap is pg.DatasetSelectionMap")


def _abstract(name: str, path: str) -> None:
    expr(f"tr.abstract.{name}", f"outcome(lambda: type({path}()).__name__)")


_abstract("map", "grain.transforms.Map")
_abstract("random_map", "grain.transforms.RandomMap")
_abstract("filter", "grain.transforms.Filter")
_abstract("map_with_index", "grain.transforms.MapWithIndex")
_abstract("selection_map", "grain.transforms.DatasetSelectionMap")
_abstract("flat_map", "grain.experimental.FlatMapTransform")
_abstract("tf_random_map", "grain.transforms.TfRandomMap")


@case("tr.subclass_missing_method")
def _():
    class M(grain.transforms.Map):
        pass

    return type(M()).__name__


@case("tr.map_is_abc")
def _():
    import abc

    return {
        "map": isinstance(grain.transforms.Map, abc.ABCMeta),
        "filter": isinstance(grain.transforms.Filter, abc.ABCMeta),
    }


@case("tr.transformation_union_isinstance")
def _():
    class M(grain.transforms.Map):
        def map(self, x):
            return x

    return isinstance(M(), grain.transforms.Transformation)


@case("tr.transformation_union_batch")
def _():
    return isinstance(grain.transforms.Batch(2), grain.transforms.Transformation)


@case("tr.transformations_alias")
def _():
    import typing

    args = typing.get_args(grain.transforms.Transformations)
    return {"n_args": len(args) > 0}


@case("tr.map_receives_element")
def _():
    seen = []

    class M(grain.transforms.Map):
        def map(self, x):
            seen.append(type(x).__name__)
            return x

    list(grain.MapDataset.source([np.int32(1), "a"]).map(M()))
    return seen


@case("tr.random_map_and_seed_in_dataloader", timeout=20)
def _():
    class R(grain.transforms.RandomMap):
        def random_map(self, x, rng):
            return int(rng.integers(0, 10**6))

    def run():
        loader = pg.DataLoader(
            data_source=list(range(5)),
            sampler=sampler(5, num_epochs=1, shuffle=False, seed=3),
            operations=[R()],
            worker_count=0,
        )
        return list(loader)

    return run() == run()


@case("tr.tf_random_map_in_dataset")
def _():
    class T(grain.transforms.TfRandomMap):
        def np_random_map(self, x, rng):
            return x

    return list(grain.MapDataset.range(2).map(T()))


@case("tr.map_with_index_in_dataloader", timeout=20)
def _():
    class I(grain.transforms.MapWithIndex):  # noqa: E742
        def map_with_index(self, i, x):
            return (i, x)

    loader = pg.DataLoader(
        data_source=["a", "b", "c"],
        sampler=sampler(3, num_epochs=1),
        operations=[I()],
        worker_count=0,
    )
    return list(loader)


@case("tr.flat_map_in_dataloader", timeout=20)
def _():
    class F(grain.experimental.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, x):
            return [x, -x]

    loader = pg.DataLoader(
        data_source=[1, 2],
        sampler=sampler(2, num_epochs=1),
        operations=[F()],
        worker_count=0,
    )
    return list(loader)


_ = pg
