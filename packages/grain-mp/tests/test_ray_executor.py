"""mp_prefetch's workers on Ray actors, on a real two-node Ray cluster on this machine.

One cluster serves the module: ``ray start --head --num-cpus=1`` and a second
node, ``ray start --address=... --num-cpus=1``, both on 127.0.0.1 with 200 MB
object stores; actors ask for half a CPU, so that either node can take a
replacement. Each node runs under ``ray start --block`` in its own session, so
stopping that command stops the node; the fixture checks that nothing of either
node's session is left. The transformations here are pickled by value (this
module cannot be imported on the actors).
"""

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import cloudpickle
import numpy as np
import pytest

import grain_dataset as gd
from grain_index import IndexSampler, NoSharding, ShardOptions
from grain_mp import (
    DataLoader,
    ElasticIterator,
    MultiprocessingOptions,
    RayWorkers,
    _ray_pool,
    mp_prefetch,
)

ray = pytest.importorskip("ray")

# Token authentication (on by default for `ray start`) needs a token shared with the
# driver; a test cluster on 127.0.0.1 does without. Ray's uv hook would run `uv run`
# again in every worker of a cluster that already shares this environment.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
STORE_BYTES = 200 * 1000 * 1000
HALF = RayWorkers(num_cpus=0.5, start_timeout_s=60)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """Two `ray start --block` nodes on 127.0.0.1; `stop_node(1)` stops the second."""

    def __init__(self, root):
        self.root = root
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes = [None, None]

    def start_node(self, which):
        # Ray gives a node 30 s to register (hard-coded): on 2 busy cores a second try helps.
        said = ""
        for _ in range(2):
            ready, said = self._try_node(which)
            if ready:
                return
        pytest.fail("`ray start` ended before it was ready:\n" + said[-3000:])

    def _try_node(self, which):
        ray_command = os.path.join(os.path.dirname(sys.executable), "ray")
        if which == 0:
            where = ["--head", f"--port={self.port}", "--include-dashboard=false"]
        else:
            where = [f"--address={self.address}"]
        node = subprocess.Popen(
            [
                ray_command, "start", *where, "--num-cpus=1", "--node-ip-address=127.0.0.1",
                f"--object-store-memory={STORE_BYTES}", "--disable-usage-stats", "--block",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        self.nodes[which] = node
        said = []
        for line in node.stdout:  # ready when it says it blocks
            said.append(line)
            if "block forever" in line:
                return True, ""
        self.stop_node(which)
        return False, "".join(said)

    def wait_for_nodes(self, count, timeout=60):
        deadline = time.monotonic() + timeout
        while sum(node["Alive"] for node in ray.nodes()) != count:
            assert time.monotonic() < deadline, f"the cluster never had {count} nodes alive"
            time.sleep(0.2)

    def stop_node(self, which):
        """Stops node `which` (`ray start --block` stops what it started); checks nothing stays."""
        node, self.nodes[which] = self.nodes[which], None
        if node is None:
            return
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        node.stdout.close()
        # Its raylet, object store and workers share its session: none may outlive it.
        deadline = time.monotonic() + 30
        while True:
            try:
                os.killpg(node.pid, 0)
            except ProcessLookupError:
                return
            if time.monotonic() > deadline:
                os.killpg(node.pid, signal.SIGKILL)
                pytest.fail(f"processes of ray node {which} outlived its `ray start`")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    root = tempfile.mkdtemp(prefix="rayx", dir="/tmp")  # short: Ray's socket paths live under it
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**RAY_ENV, "RAY_TMPDIR": root}.items():
            patch.setenv(name, value)
        nodes = Cluster(root)
        try:
            nodes.start_node(0)
            nodes.start_node(1)
            ray.init(address=nodes.address, log_to_driver=False)
            nodes.wait_for_nodes(2)
            yield nodes
        finally:
            ray.shutdown()
            nodes.stop_node(1)
            nodes.stop_node(0)
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_idle_actors_between_tests():
    """Each test starts with an empty actor pool and leaves one: idle actors hold CPUs."""
    RayWorkers.release_idle_actors()
    yield
    RayWorkers.release_idle_actors()


def _cpus_back(count=2, timeout=60):
    """Waits until the cluster has `count` CPUs free again (killed actors release theirs)."""
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0) < count:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)


@pytest.fixture
def two_nodes(cluster):
    """The cluster with both nodes up (a test may have stopped the second)."""
    if cluster.nodes[1] is None:
        cluster.start_node(1)
    cluster.wait_for_nodes(2)
    # Actors of earlier tests are killed asynchronously: until their CPUs are back, Ray's
    # SPREAD may put both new actors on one node.
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)
    return cluster


def _record_where(directory):
    """A map that notes, once per actor process, its node, JAX and CUDA settings."""

    def note(x):
        mark = pathlib.Path(directory) / str(os.getpid())
        if not mark.exists():
            import ray as ray_in_actor

            jax = sys.modules.get("jax")
            platforms = jax.config.jax_platforms if jax is not None else None
            mark.write_text(
                repr(
                    (
                        ray_in_actor.get_runtime_context().get_node_id(),
                        os.environ.get("JAX_PLATFORMS"),
                        os.environ.get("CUDA_VISIBLE_DEVICES"),
                        platforms,
                    )
                )
            )
        return x

    return note


def _where(directory):
    import ast

    return [ast.literal_eval(p.read_text()) for p in pathlib.Path(directory).iterdir()]


def _positional(size=120, directory=None, slow_s=0.0, extra=None):
    """A positional pipeline: shuffle, random map, filter, then a batch after to_iter_dataset."""

    def work(x):
        if slow_s:
            time.sleep(slow_s)
        return {"x": np.full(3, x, dtype=np.int64), "y": x * 2}

    ds = gd.MapDataset.range(size).shuffle(seed=5).map(work)
    if directory is not None:
        ds = ds.map(_record_where(directory))
    if extra is not None:
        ds = ds.map(extra)
    ds = ds.random_map(lambda e, rng: {**e, "r": int(rng.integers(1000))}, seed=3)
    ds = ds.filter(lambda e: e["y"] % 3 != 0)
    return ds.to_iter_dataset().batch(4)


def _same(a, b):
    assert len(a) == len(b)
    for left, right in zip(a, b, strict=True):
        assert left.keys() == right.keys()
        for key in left:
            np.testing.assert_array_equal(left[key], right[key])


def _ray(count, workers=HALF, buffer=1):
    return MultiprocessingOptions(count, buffer, executor=workers)


@pytest.mark.timeout(240)
def test_the_stream_is_the_in_process_one_for_any_actor_count_on_both_nodes(two_nodes, tmp_path):
    expected = list(_positional())
    for count in (1, 2, 3):
        seen = tmp_path / f"where{count}"
        seen.mkdir()
        _same(list(mp_prefetch(_positional(directory=seen), _ray(count))), expected)
        where = _where(seen)
        assert len(where) == count  # one actor process a worker
        if count >= 2:
            assert len({node for node, *_ in where}) == 2, where  # spread over both nodes
        # CPU actors: JAX on the CPU only (if imported at all), CUDA devices hidden.
        for _, platforms_env, cuda, platforms in where:
            assert platforms_env == "cpu"
            assert cuda == ""
            assert platforms in (None, "cpu")


@pytest.mark.timeout(240)
def test_a_checkpoint_restores_across_actor_counts_processes_and_none(cluster):
    expected = list(_positional())
    it = iter(mp_prefetch(_positional(), _ray(2)))
    head = [next(it) for _ in range(7)]
    state = it.get_state()
    it.close()
    _same(head, expected[:7])
    for options in (_ray(3), MultiprocessingOptions(num_workers=1), None):
        restored = iter(mp_prefetch(_positional(), options) if options else _positional())
        restored.set_state(state)
        _same(list(restored), expected[7:])
    # And a local worker's checkpoint continues on actors.
    local = iter(mp_prefetch(_positional(), MultiprocessingOptions(num_workers=2)))
    for _ in range(11):
        next(local)
    state = local.get_state()
    local.close()
    on_ray = iter(mp_prefetch(_positional(), _ray(1)))
    on_ray.set_state(state)
    _same(list(on_ray), expected[11:])


@pytest.mark.timeout(240)
def test_per_worker_slices_and_states_match_local_processes(cluster):
    def pipeline():
        return gd.MapDataset.range(50).map(lambda x: x * 3).to_iter_dataset().batch(3)

    local = mp_prefetch(pipeline(), MultiprocessingOptions(2), sequential_slice=True)
    expected = [b.tolist() for b in local]
    on_ray = mp_prefetch(pipeline(), _ray(2), sequential_slice=True)
    assert [b.tolist() for b in on_ray] == expected
    it = iter(on_ray)
    for _ in range(5):
        next(it)
    state = it.get_state()
    it.close()
    back = iter(local)
    back.set_state(state)
    assert [b.tolist() for b in back] == expected[5:]


@pytest.mark.timeout(120)
def test_an_error_in_the_pipeline_reaches_the_consumer_after_the_elements_before_it(cluster):
    def fail_at_13(x):
        if x == 13:
            raise ValueError("element 13 is bad")
        return x

    ds = gd.MapDataset.range(40).map(fail_at_13).to_iter_dataset()
    it = iter(mp_prefetch(ds, _ray(2)))
    got = [next(it) for _ in range(13)]
    with pytest.raises(ValueError, match="element 13 is bad") as raised:
        next(it)
    assert got == list(range(13))
    assert any("Ray actor" in note for note in raised.value.__notes__)


@pytest.mark.timeout(120)
def test_actors_no_node_can_hold_fail_at_once(cluster):
    ds = gd.MapDataset.range(10).to_iter_dataset()
    with pytest.raises(RuntimeError, match=r"num_cpus=8.*more CPUs per actor than any node"):
        next(iter(mp_prefetch(ds, _ray(2, RayWorkers(num_cpus=8)))))


@pytest.mark.timeout(120)
def test_a_cluster_without_room_for_every_actor_fails_within_the_start_timeout(cluster):
    ds = gd.MapDataset.range(10).to_iter_dataset()
    began = time.monotonic()
    full = RayWorkers(num_cpus=1, start_timeout_s=5)
    with pytest.raises(RuntimeError, match=r"did not start the actors.*start_timeout_s=5"):
        next(iter(mp_prefetch(ds, _ray(3, full))))
    assert time.monotonic() - began < 60
    # The actors it did start were stopped: the cluster has its CPUs back.
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)


@pytest.mark.timeout(120)
def test_the_actors_read_no_further_ahead_than_their_calls(cluster, tmp_path):
    made = tmp_path / "made"
    made.mkdir()

    def big(x):
        (made / str(x)).touch()
        return np.full(100_000, x, dtype=np.int64)  # 800 kB: one element a call

    # No read threads: the pipeline's own read-ahead would add to what the calls ask.
    ds = gd.MapDataset.range(60).map(big).to_iter_dataset(gd.ReadOptions(num_threads=0))
    workers = RayWorkers(num_cpus=0.5, max_bytes_in_flight=1_000_000)
    it = iter(mp_prefetch(ds, _ray(1, workers)))
    for k in range(10):
        element = next(it)
        np.testing.assert_array_equal(element, np.full(100_000, k))
        # Through the object store without a copy: Ray hands out read-only views of it.
        assert not element.flags.writeable
    time.sleep(2)  # room to run ahead, if it would
    # Two calls outstanding, one element each (the budget's share is below one element).
    assert 10 <= len(list(made.iterdir())) <= 10 + 2
    assert list(it)[-1][0] == 59


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_actor_killed_mid_epoch_is_replaced_with_nothing_lost_or_twice(cluster, tmp_path):
    marker = tmp_path / "killed"
    here = os.getpid()

    def die_once_at_37(x):
        if x == 37 and os.getpid() != here and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return x

    ds = gd.MapDataset.range(120).map(die_once_at_37).to_iter_dataset().batch(5)
    expected = [b.tolist() for b in ds]
    got = [b.tolist() for b in mp_prefetch(ds, _ray(2))]
    assert marker.exists()  # an actor did die
    assert got == expected


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_node_stopped_mid_epoch_loses_nothing(two_nodes, tmp_path):
    seen = tmp_path / "where"
    seen.mkdir()
    expected = list(_positional(size=160))
    # 80 elements of 50 ms per actor: about 4 s of work left when the node stops, so that
    # its actor is lost mid-epoch even on a loaded machine (at 10 ms it could finish first).
    it = iter(mp_prefetch(_positional(size=160, directory=seen, slow_s=0.05), _ray(2)))
    got = [next(it) for _ in range(6)]
    nodes = {node for node, *_ in _where(seen)}
    assert len(nodes) == 2  # an actor runs on the node about to stop
    two_nodes.stop_node(1)
    got.extend(it)
    _same(got, expected)
    assert len(_where(seen)) == 3  # the lost actor's replacement


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"num_cpus": -1}, ValueError, "num_cpus` must be a number >= 0"),
        ({"num_cpus": "2"}, ValueError, "num_cpus` must be a number >= 0"),
        ({"max_bytes_in_flight": 0}, ValueError, "max_bytes_in_flight` must be >= 1"),
        ({"start_timeout_s": float("inf")}, ValueError, "start_timeout_s` must be a finite"),
        ({"max_restarts": -1}, ValueError, "max_restarts` must be >= 0"),
        ({"runtime_env": "env"}, TypeError, "runtime_env` must be a dict"),
        ({"address": 6379}, TypeError, "address` must be a str"),
        ({"spread": 1}, TypeError, "spread` must be a bool"),
        ({"keep_actors_s": -1}, ValueError, "keep_actors_s` must be a finite"),
        ({"keep_actors_s": float("nan")}, ValueError, "keep_actors_s` must be a finite"),
    ],
)
def test_bad_ray_workers_fields_are_named(fields, error, match):
    with pytest.raises(error, match=match):
        RayWorkers(**fields)


def test_the_executor_field_takes_ray_workers_or_none():
    options = MultiprocessingOptions(2, executor=RayWorkers())
    assert options.executor == RayWorkers()
    options.executor = None
    with pytest.raises(TypeError, match=r"executor` must be None .* or a grain.experimental"):
        MultiprocessingOptions(2, executor="ray")


@pytest.mark.timeout(240)
def test_elastic_iterator_on_actors_restores_on_local_processes(cluster):
    ds = gd.MapDataset.range(90).shuffle(seed=2).map(lambda x: x * 10)
    shard = ShardOptions(shard_index=0, shard_count=1)
    expected = [b.tolist() for b in ElasticIterator(ds, 6, shard)]
    on_ray = ElasticIterator(ds, 6, shard, multiprocessing_options=_ray(2))
    head = [next(on_ray).tolist() for _ in range(4)]
    state = on_ray.get_state()
    on_ray.close()
    assert head == expected[:4]
    local = ElasticIterator(ds, 6, shard, multiprocessing_options=MultiprocessingOptions(1))
    local.set_state(state)
    assert [b.tolist() for b in local] == expected[4:]


# -- actors kept between iterators ---------------------------------------------------------


class _DropNote:
    """A map that leaves a file named for its process when the pipeline holding it is freed."""

    def __init__(self, directory):
        self.directory = str(directory)
        self.ballast = np.zeros(1_000_000, dtype=np.uint8)  # memory the reset must free

    def __call__(self, x):
        return x

    def __del__(self):
        with contextlib.suppress(Exception):
            (pathlib.Path(self.directory) / str(os.getpid())).touch()


def _pids(directory):
    return {int(p.name) for p in pathlib.Path(directory).iterdir()}


def _noted(tmp_path, name, extra=None):
    """The positional pipeline, noting its actors' processes in tmp_path/name."""
    seen = tmp_path / name
    seen.mkdir()
    return _positional(directory=seen, extra=extra), seen


@pytest.mark.timeout(240)
def test_a_second_iterator_and_a_restore_reuse_the_actors_after_a_reset(
    two_nodes, tmp_path, request
):
    expected = list(_positional())
    dropped = tmp_path / "dropped"
    dropped.mkdir()
    first, seen_first = _noted(tmp_path, "first", extra=_DropNote(dropped))
    _same(list(mp_prefetch(first, _ray(2))), expected)
    actors = _pids(seen_first)
    assert len(actors) == 2
    assert _ray_pool.idle_count() == 2  # exhausted: both kept, not killed

    second, seen_second = _noted(tmp_path, "second")
    it = iter(mp_prefetch(second, _ray(2)))
    request.addfinalizer(it.close)  # a failed assertion must not leave its actors running
    head = [next(it) for _ in range(5)]
    assert _pids(seen_second) == actors  # the same processes: no actor started
    # Reset before reuse: the first pipeline (and its megabyte) was freed on the actors.
    assert actors <= _pids(dropped)
    state = it.get_state()
    it.set_state(state)  # a restore takes them back too
    rest = list(it)
    _same(head + rest, expected)
    assert _pids(seen_second) == actors
    assert _ray_pool.idle_count() == 2
    assert RayWorkers.release_idle_actors() == 2
    _cpus_back()


@pytest.mark.timeout(240)
def test_idle_actors_die_after_keep_actors_s_or_at_once_with_zero(two_nodes, tmp_path):
    expected = list(_positional())
    brief = RayWorkers(num_cpus=0.5, start_timeout_s=60, keep_actors_s=1)
    _same(list(mp_prefetch(_positional(), _ray(2, brief))), expected)
    assert _ray_pool.idle_count() == 2
    deadline = time.monotonic() + 30
    while _ray_pool.idle_count():
        assert time.monotonic() < deadline, "idle actors outlived keep_actors_s"
        time.sleep(0.1)
    _cpus_back()
    never = RayWorkers(num_cpus=0.5, start_timeout_s=60, keep_actors_s=0)
    _same(list(mp_prefetch(_positional(), _ray(2, never))), expected)
    assert _ray_pool.idle_count() == 0
    _cpus_back()


@pytest.mark.timeout(240)
def test_a_pooled_actor_that_died_is_replaced_without_counting_a_restart(two_nodes, tmp_path):
    expected = list(_positional())
    strict = RayWorkers(num_cpus=0.5, start_timeout_s=60, max_restarts=0)
    first, seen_first = _noted(tmp_path, "first")
    _same(list(mp_prefetch(first, _ray(2, strict))), expected)
    victim, survivor = sorted(_pids(seen_first))
    os.kill(victim, signal.SIGKILL)
    second, seen_second = _noted(tmp_path, "second")
    _same(list(mp_prefetch(second, _ray(2, strict))), expected)
    now = _pids(seen_second)
    assert len(now) == 2
    assert survivor in now
    assert victim not in now


@pytest.mark.timeout(240)
def test_idle_actors_of_other_options_make_room_for_new_ones(two_nodes):
    expected = list(_positional())
    whole = RayWorkers(num_cpus=1, start_timeout_s=60)
    _same(list(mp_prefetch(_positional(), _ray(2, whole))), expected)
    assert _ray_pool.idle_count() == 2  # they hold both CPUs
    _same(list(mp_prefetch(_positional(), _ray(2))), expected)  # half a CPU each: room made
    assert _ray_pool.idle_count() == 2


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_driver_that_exits_with_idle_actors_leaves_none(cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(
        "import ray, grain_dataset as gd\n"
        "from grain_mp import MultiprocessingOptions, RayWorkers, mp_prefetch, _ray_pool\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        "ds = gd.MapDataset.range(40).to_iter_dataset().batch(4)\n"
        "workers = RayWorkers(num_cpus=0.5, keep_actors_s=600)\n"
        "out = list(mp_prefetch(ds, MultiprocessingOptions(2, executor=workers)))\n"
        "assert len(out) == 10 and _ray_pool.idle_count() == 2\n"
        "print('ok', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    _cpus_back()  # its actors are gone with it


# -- the DataLoader on actors ---------------------------------------------------------------


class _Noisy(gd.RandomMapTransform):
    def random_map(self, element, rng):
        return {"x": np.full(2, element), "r": int(rng.integers(1 << 30))}


class _Odd(gd.FilterTransform):
    def filter(self, element):
        return element["x"][0] % 2 == 1


def _loader(worker_count, executor=None):
    return DataLoader(
        data_source=list(range(90)),
        sampler=IndexSampler(90, NoSharding(), shuffle=True, num_epochs=1, seed=4),
        operations=[_Noisy(), _Odd(), gd.Batch(4)],
        worker_count=worker_count,
        executor=executor,
    )


def _batches_and_states(loader, count=None):
    it = iter(loader)
    out = []
    for batch in it if count is None else (next(it) for _ in range(count)):
        out.append((batch, it.get_state()))
    it.close()
    return out


def _same_with_states(a, b):
    _same([batch for batch, _ in a], [batch for batch, _ in b])
    assert [state for _, state in a] == [state for _, state in b]


@pytest.mark.timeout(240)
def test_a_data_loader_on_actors_gives_the_local_batches_and_states_and_restores_across(
    cluster,
):
    local = _batches_and_states(_loader(2))
    on_ray = _batches_and_states(_loader(2, HALF))
    assert len(local) == 12  # 45 odd elements in batches of 4
    _same_with_states(on_ray, local)
    assert _loader(2, HALF).multiprocessing_options.executor == HALF
    # The same states as local workers: at every batch, a restore needs nothing of Ray.
    assert b"ray" not in b"".join(state for _, state in on_ray).lower()
    # A checkpoint taken on actors continues on local workers, and one taken there on actors.
    state = on_ray[4][1]
    back = iter(_loader(1))
    back.set_state(state)
    _same(list(back), [batch for batch, _ in local[5:]])
    state = local[7][1]
    forth = iter(_loader(3, HALF))
    forth.set_state(state)
    _same(list(forth), [batch for batch, _ in local[8:]])


def test_a_data_loader_executor_is_checked():
    with pytest.raises(ValueError, match=r"worker_count=0 runs the pipeline in this process"):
        _loader(0, HALF)
    with pytest.raises(TypeError, match=r"`executor` must be None .*RayWorkers"):
        _loader(2, "ray")
