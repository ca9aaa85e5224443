"""grain_dataset: MapDataset, IterDataset and DatasetIterator.

Layout: the dataset layer, above grain_index and grain_sources and below
grain_mp. It will own every transformation and the exact iterator state.

Not built yet: this package holds only its face. Its API arrives with the
issue that builds the layer; nothing here pretends to work.
"""

__all__: list[str] = []
