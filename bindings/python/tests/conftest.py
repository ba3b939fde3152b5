"""Shared fixtures. The package under test is this source tree (bindings/python), loading the
library named by TENSORREF_LIB or found in the repository. The whole session must leave the
library's live handle count (tr_live_handles) where it found it, and no test may leave a scope
open on the main thread. An exception raised in a finaliser (`__del__`), which Python only
prints, fails the test during which it was raised."""
import gc
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402

import tensorref as tr  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "error::pytest.PytestUnraisableExceptionWarning")


def settled_live_handles() -> int:
    """The live handles once the handles of collected tensors waiting in the release batch are
    released: a test's leak check must not count, nor be confused by, what tests before it left
    waiting there."""
    tr.flush_releases()
    return tr.live_handles()


@pytest.fixture(scope="session", autouse=True)
def no_leaked_handles():
    gc.collect()
    before = settled_live_handles()
    yield
    gc.collect()
    after = settled_live_handles()
    assert after == before, f"the test session leaked {after - before} tensor handle(s)"


@pytest.fixture
def no_manager_left_and_no_leak():
    """For the residency tests: no manager left configured (one left is turned off, so the next
    test starts clean), and no handle leaked, per test."""
    before = settled_live_handles()
    yield
    if tr.residency.enabled():
        tr.residency.disable()
        pytest.fail("the test left a residency manager configured")
    # Fewer is not a leak: tensors an earlier test left in reference cycles may be collected
    # during this one (a gc.collect here per test would cost minutes); the session's check
    # collects and counts them.
    after = settled_live_handles()
    assert after <= before, f"the test leaked {after - before} tensor handle(s)"


@pytest.fixture(autouse=True)
def no_scope_left_open():
    yield
    left = 0
    while (s := tr.current_scope()) is not None:
        s.dispose()
        left += 1
    assert not left, f"the test left {left} scope(s) open"
