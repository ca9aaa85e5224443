"""Errors open with Grain's wording, which clients match with `assertRaisesRegex`.

Each case is an error Grain 0.2.18 raises with the same exception type (or one
ours subclasses); the pattern is Grain's message with this call's values.
"""

from __future__ import annotations

import re

import pytest

from grain_sources import ArrayRecordDataSource, RangeDataSource, SharedMemoryDataSource

CASES = [
    (lambda tmp: RangeDataSource(0, 3, 1)[5], IndexError, "Index 5 out of range for 3"),
    (
        lambda tmp: ArrayRecordDataSource([]),
        ValueError,
        "Paths sequence can not be of 0 length",
    ),
    (
        lambda tmp: ArrayRecordDataSource(5),
        ValueError,
        "Unsupported path format was used. Path format must be a Sequence, String, pathlib.Path "
        "or FileInstruction.",
    ),
    (
        lambda tmp: ArrayRecordDataSource([None]),
        ValueError,
        "All elements in a path sequence must be of type: String, pathlib.Path, or "
        "FileInstruction.",
    ),
    (
        lambda tmp: ArrayRecordDataSource(f"{tmp}/nope.array_record"),
        RuntimeError,
        "open() failed: No such file or directory; opening {tmp}/nope.array_record",
    ),
    (lambda tmp: SharedMemoryDataSource(), ValueError, "Elements or name must be provided."),
    (
        lambda tmp: SharedMemoryDataSource(name="no_such_segment_grain_messages"),
        FileNotFoundError,
        "[Errno 2] No such file or directory: '/no_such_segment_grain_messages'",
    ),
]


@pytest.mark.parametrize(("call", "error", "grain"), CASES)
def test_message_opens_with_grains_wording(call, error, grain, tmp_path):
    grain = grain.format(tmp=tmp_path)
    with pytest.raises(error, match="^" + re.escape(grain)) as info:
        call(tmp_path)
    assert len(str(info.value)) > len(grain)


def test_array_record_index_past_the_end_has_grains_wording(tmp_path):
    from grain_sources import write_array_record

    [path] = write_array_record([b"a", b"b"], tmp_path / "two.array_record")
    source = ArrayRecordDataSource(path)
    # Grain raises a ValueError here; ours is also an IndexError (a Sequence's error).
    with pytest.raises(ValueError, match=re.escape("Record key should be in [0, num_records)")):
        source[2]
    with pytest.raises(IndexError, match="index 2 is out of range"):
        source[2]
