"""TFRecordIterDataset over a URL touches nothing until it is read, as in Grain.

MaxText builds its GCS dataset as a subclass of TFRecordIterDataset with a
``gs://`` path and reads the blob its own way, so construction must not make a
request (here there is no network: a request would take a minute and fail). A
local path is still checked at once.
"""

import time

import pytest

from grain_dataset import TFRecordIterDataset


@pytest.mark.parametrize("url", ["gs://bucket/data.tfrecord", "s3://bucket/key/part-0.tfrecord"])
def test_a_url_is_kept_without_a_request(url):
    start = time.monotonic()
    ds = TFRecordIterDataset(url)
    assert time.monotonic() - start < 1.0
    assert ds.path == url
    assert repr(ds) == f"TFRecordIterDataset({url!r})"


def test_a_missing_local_file_still_raises_at_once(tmp_path):
    with pytest.raises(FileNotFoundError):
        TFRecordIterDataset(tmp_path / "missing.tfrecord")
