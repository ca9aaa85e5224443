"""Compatibility aliases for the few private Grain paths that well-known clients import.

Not an API: each module here re-exports public names of this library under the
private path of Grain 0.2.18 that a widely used client imports, and nothing
else. Today that is one path, for Keras 3 (its grain adapter imports
``grain._src.python.shared_memory_array.SharedMemoryArrayMetadata``).
`docs/compatibility.md` lists the private paths clients use and why each one is
or is not aliased here.
"""
