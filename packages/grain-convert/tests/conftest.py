"""Fixtures of the grain-convert package's tests."""

import os
import signal
import subprocess
import time

import pytest


def _interrupt_after_markers(driver: subprocess.Popen, out, count: int, timeout: float) -> str:
    """Sends SIGINT to a `grain convert` driver once `count` shards under `out` are marked
    done; returns its stderr. The driver is killed if it outlives the wait."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and driver.poll() is None:
            if out.exists() and len([n for n in os.listdir(out) if n.endswith(".done")]) >= count:
                break
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return err


@pytest.fixture
def interrupt_after_markers():
    return _interrupt_after_markers
