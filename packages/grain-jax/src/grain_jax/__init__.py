"""grain_jax: JAX integration: device prefetch, Orbax, multi-host.

Layout: the top library layer, above grain_dataset and grain_mp; jax and
orbax are imported lazily. It will own device_put, the Orbax handler and
ShardByJaxProcess.

Not built yet: this package holds only its face. Its API arrives with the
issue that builds the layer; nothing here pretends to work.
"""

__all__: list[str] = []
