"""grain.experimental: APIs that may still change."""

from grain_index import index_shuffle as index_shuffle

__all__ = ["index_shuffle"]
