"""Tiny stand-ins for the TFDS datasets the tutorials read, built offline.

The tutorials in this folder read MNIST-like and ImageNet-like data through
`tfds.data_source(...)`, exactly as you would read the real datasets, but the
data is made up on the spot: each dataset below is a TFDS
`GeneratorBasedBuilder` that draws a few hundred small images from a seeded
random generator and writes them in TFDS's `array_record` file format into a
directory you choose. Nothing is downloaded and TensorFlow is not needed.

    data_dir = tiny_datasets.build("tiny_mnist", "/tmp/tfds")
    source = tfds.data_source("tiny_mnist", split="train", data_dir=data_dir)

To use the real data instead, drop `data_dir=` and the `tiny_` prefix
(`tfds.data_source("mnist", split="train")`): the rest of each tutorial is the
same.

Run this file on its own to build all three datasets into a temporary
directory and print one record of each.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds

# TFDS draws progress bars and logs a hint about OpenCV; the tutorials' output
# is easier to read without them.
tfds.display_progress_bar(False)
logging.getLogger("absl").setLevel(logging.ERROR)


def _digit_like(seed: int, label: int, shape: tuple[int, ...]) -> np.ndarray:
    """A grayscale image: noise with a bright bar whose position tells the label."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 64, shape, dtype=np.uint8)
    column = 2 + label * (shape[1] - 4) // 10
    image[4:-4, column : column + 2] = 255
    return image


class TinyMnist(tfds.core.GeneratorBasedBuilder):
    """`tiny_mnist`: 28x28x1 uint8 images with labels 0-9; 600 train, 100 test."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None  # no checksum files to look for beside this module

    def _info(self):
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(28, 28, 1)),
                "label": tfds.features.ClassLabel(num_classes=10),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(0, 600),
            "test": self._generate_examples(10_000, 100),
        }

    def _generate_examples(self, first, count):
        for key in range(first, first + count):
            label = key % 10
            # Image features take PIL images (a numpy image would need TensorFlow).
            pixels = _digit_like(key, label, (28, 28))
            yield key, {"image": PIL.Image.fromarray(pixels), "label": label}


class TinyPneumoniaMnist(tfds.core.GeneratorBasedBuilder):
    """`tiny_pneumonia_mnist`: 28x28x1 uint8 images with labels 0-1; 400 train."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None

    def _info(self):
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(28, 28, 1)),
                "label": tfds.features.ClassLabel(names=["normal", "pneumonia"]),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 400)}

    def _generate_examples(self, first, count):
        for key in range(first, first + count):
            rng = np.random.default_rng(100_000 + key)
            # About three in four images show "pneumonia", as in the real data.
            label = int(rng.random() < 0.75)
            pixels = rng.normal(128, 40 if label else 20, (28, 28)).clip(0, 255)
            yield key, {"image": PIL.Image.fromarray(pixels.astype(np.uint8)), "label": label}


class TinyImagenetA(tfds.core.GeneratorBasedBuilder):
    """`tiny_imagenet_a`: RGB images of varying size, a label and a file name; 40 test."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None

    def _info(self):
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(None, None, 3)),
                "label": tfds.features.ClassLabel(num_classes=200),
                "file_name": tfds.features.Text(),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"test": self._generate_examples(40)}

    def _generate_examples(self, count):
        for key in range(count):
            rng = np.random.default_rng(200_000 + key)
            height, width = rng.integers(40, 72, size=2)
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            yield (
                key,
                {
                    "image": PIL.Image.fromarray(pixels),
                    "label": int(rng.integers(200)),
                    "file_name": f"n{key:08d}_{int(rng.integers(1 << 20)):06x}.JPEG",
                },
            )


_BUILDERS = {
    "tiny_mnist": TinyMnist,
    "tiny_pneumonia_mnist": TinyPneumoniaMnist,
    "tiny_imagenet_a": TinyImagenetA,
}


def build(name: str, data_dir: str | os.PathLike[str]) -> str:
    """Writes dataset `name` into `data_dir` (once) and returns `data_dir` as a str."""
    data_dir = os.fspath(data_dir)
    builder = _BUILDERS[name](data_dir=data_dir, file_format="array_record")
    with contextlib.redirect_stdout(io.StringIO()):  # TFDS prints where it writes
        builder.download_and_prepare()
    return data_dir


if __name__ == "__main__":
    directory = tempfile.mkdtemp(prefix="tiny_datasets_")
    try:
        for name, split in [
            ("tiny_mnist", "train"),
            ("tiny_pneumonia_mnist", "train"),
            ("tiny_imagenet_a", "test"),
        ]:
            source = tfds.data_source(name, split=split, data_dir=build(name, directory))
            record = source[0]
            shapes = {key: np.shape(value) for key, value in record.items()}
            print(f"{name}[{split}]: {len(source)} records, first record's shapes {shapes}")
    finally:
        shutil.rmtree(directory)
