"""The exceptions of `convert`: an input it cannot read, and a run that failed."""

from __future__ import annotations


class InputError(ValueError):
    """SRC cannot be converted as given: an unknown format, an empty directory, a damaged footer.

    Raised while the plan is made, before any shard is written.
    """


class ConversionError(RuntimeError):
    """The conversion ran and failed: a bad record, a task that kept failing, a failed check.

    The message names the input file and its row (or line) where a record is
    to blame. Shards finished before the failure stay, each with its marker,
    so a rerun with ``resume=True`` redoes only the others; no manifest is
    written.
    """
