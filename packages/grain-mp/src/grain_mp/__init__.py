"""grain_mp: worker processes and the DataLoader.

Layout: the multiprocessing layer, above grain_dataset. It will own
mp_prefetch workers, shared-memory transport and the DataLoader.

Not built yet: this package holds only its face. Its API arrives with the
issue that builds the layer; nothing here pretends to work.
"""

__all__: list[str] = []
