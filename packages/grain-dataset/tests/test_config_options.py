"""`grain.config` as Grain 0.2.18 has it: its options and defaults, and how it refuses.

Pinned from Grain 0.2.18 run as a black box: the twelve options with their
defaults (absl defines three more ``--grain_*`` flags, which are not options
of grain.config and raise like any unknown name); an unknown name
raises ValueError ("Unrecognized config option: <name>") from `update`,
`get_or_default` and attribute access; assigning an option as an attribute
raises ValueError ("Please use update()") and changes nothing.
"""

import threading

import pytest

from grain_dataset import config

GRAIN_0_2_18_DEFAULTS = {
    "py_dataset_visualization_output_dir": None,
    "py_debug_mode": False,
    "py_relay_sigterm_to_main": False,
    "py_traceback_filtering": "auto",
    "tf_interleaved_shuffle": False,
    "tf_interleaved_shuffle_block_size": 10,
    "tf_interleaved_shuffle_parallel_blocks": 10,
    "tf_lookup_batch_size": 100,
    "tf_lookup_fast_warmup": False,
    "tf_lookup_num_parallel_calls": -1,
    "tf_optimized_sequential_read": False,
    "tf_prefetch_buffer_size": -1,
}

# Ours, beside Grain's: what runs mp_prefetch's workers (grain_mp._executor).
OWN_DEFAULTS = {"py_worker_executor": "auto"}


@pytest.fixture(autouse=True)
def fresh_config(monkeypatch):
    for name in [*GRAIN_0_2_18_DEFAULTS, *OWN_DEFAULTS]:
        monkeypatch.delenv(f"GRAIN_{name.upper()}", raising=False)
    config.reset()
    yield config
    config.reset()


def test_every_option_of_grain_and_its_default():
    assert set(config.describe()) == set(GRAIN_0_2_18_DEFAULTS) | set(OWN_DEFAULTS)
    for name, default in GRAIN_0_2_18_DEFAULTS.items():
        assert config.get_or_default(name) == default, name
        assert type(config.get_or_default(name)) is type(default), name
        assert getattr(config, name) == default, name


ACCESSES = {
    "update": lambda: config.update("no_such_flag", 1),
    "get_or_default": lambda: config.get_or_default("no_such_flag"),
    "attribute": lambda: config.no_such_flag,
}


@pytest.mark.parametrize("call", ACCESSES)
def test_an_unknown_option_raises_value_error_in_grains_words(call):
    with pytest.raises(ValueError, match=r"^Unrecognized config option: no_such_flag\b") as info:
        ACCESSES[call]()
    assert "py_debug_mode" in str(info.value)  # and it lists what is known


@pytest.mark.parametrize(
    "name",
    [
        "enable_multiprocess_worker_profiling",
        "num_threads_computing_num_records",
        "num_threads_fetching_records",
        "py_dataset_debug_mode",
        "py_benchmark",
    ],
)
def test_flags_that_are_not_options_are_unknown(name):
    with pytest.raises(ValueError, match=f"^Unrecognized config option: {name}"):
        config.get_or_default(name)


def test_unknown_options_still_answer_hasattr_and_getattr_defaults():
    # The ValueError is also an AttributeError, so these introspection idioms work.
    assert not hasattr(config, "no_such_flag")
    assert getattr(config, "no_such_flag", "fallback") == "fallback"


@pytest.mark.parametrize("name", ["py_debug_mode", "no_such_flag"])
def test_assigning_an_option_as_an_attribute_is_refused(name):
    with pytest.raises(ValueError, match=r"^Please use update\(\)\. .*grain\.config\.update\("):
        setattr(config, name, True)
    assert config.get_or_default("py_debug_mode") is False  # nothing changed
    with pytest.raises(ValueError, match="Please use update"):
        delattr(config, "py_debug_mode")


def test_update_then_read_both_ways():
    config.update("py_debug_mode", True)
    assert config.get_or_default("py_debug_mode") is True
    assert config.py_debug_mode is True
    config.update("py_dataset_visualization_output_dir", "/tmp/graphs")
    assert config.py_dataset_visualization_output_dir == "/tmp/graphs"


def test_private_lookups_never_reach_the_option_table():
    # copy and pickle probe dunders such as __getstate__: a plain AttributeError for them.
    with pytest.raises(AttributeError) as info:
        config._no_such_private  # noqa: B018
    assert not isinstance(info.value, ValueError)


def test_py_worker_executor_takes_three_values_from_update_and_the_environment(monkeypatch):
    assert config.get_or_default("py_worker_executor") == "auto"
    config.update("py_worker_executor", " Threads ")
    assert config.get_or_default("py_worker_executor") == "threads"
    config.reset()
    monkeypatch.setenv("GRAIN_PY_WORKER_EXECUTOR", "processes")
    assert config.get_or_default("py_worker_executor") == "processes"
    with pytest.raises(ValueError, match="must be one of auto, processes, threads, got 'fibers'"):
        config.update("py_worker_executor", "fibers")


@pytest.mark.timeout(60)
def test_the_cached_debug_mode_survives_updates_from_another_thread():
    # debug_mode() caches py_debug_mode and config.update clears the cache: filling it
    # raced with the clearing (on 3.13t with the GIL off, an IndexError in about one
    # run of two, and the cache holding two values).
    from grain_dataset._common._config import _debug_mode, debug_mode

    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                debug_mode()
            except BaseException as error:
                errors.append(error)
                return

    readers = [threading.Thread(target=read, daemon=True) for _ in range(3)]
    for thread in readers:
        thread.start()
    try:
        for k in range(20000):
            config.update("py_debug_mode", k % 2 == 0)
    finally:
        done.set()
        for thread in readers:
            thread.join(30)
    assert not errors, errors[0]
    assert len(_debug_mode) <= 1
    assert debug_mode() is False  # the last update's value, not one from before it
