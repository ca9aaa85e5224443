"""array_record's C++ module, imported when a command needs it.

array-record comes with `grain-convert` and `grainline` (grain-sources'
`arrayrecord` extra); it has no wheel for free-threaded CPython, where `import
grain_convert`, `import grain` and the `grain` command must still work. The
conversion's tasks (which write and check ArrayRecord files) and `grain inspect`
of an ArrayRecord file import it through here, and say what to install when it
is missing.
"""

from __future__ import annotations

from typing import Any

INSTALL_HINT = (
    "pip install 'grain-sources[arrayrecord]' (array-record has no wheel for free-threaded CPython)"
)


def array_record_module(what: str) -> Any:
    """`array_record.python.array_record_module`, or an ImportError saying `what` needs it."""
    try:
        from array_record.python import array_record_module
    except ImportError as error:
        raise ImportError(
            f"{what} needs array_record's C++ module: {INSTALL_HINT}.", name="array_record"
        ) from error
    return array_record_module
