"""Make a mode-000 file or folder really unreadable to this test, even when the tests run as root.

Root reads anything through two capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH). `as_ordinary_user()`
drops them from the calling thread's effective set for the duration of a `with` block and puts them back
afterwards (they stay in the permitted set), so the filesystem itself refuses the read. Where that is not
possible (not Linux, no capset) a test that needs it is skipped.
"""

import contextlib
import ctypes
import os

import pytest

_CAPABILITY_VERSION_3 = 0x20080522
_READ_ANYTHING = (1 << 1) | (1 << 2)   # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


@contextlib.contextmanager
def as_ordinary_user():
    """Within the block, permission bits apply to this thread as to any user (skips the test if it cannot)."""
    if os.geteuid() != 0:
        yield
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        header, data = _Header(_CAPABILITY_VERSION_3, 0), (_Data * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capget")
    except (OSError, AttributeError) as err:
        pytest.skip(f"running as root and cannot drop the read-anything capabilities ({err})")
    saved = data[0].effective
    data[0].effective = saved & ~_READ_ANYTHING
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip(f"running as root and cannot drop the read-anything capabilities (errno {ctypes.get_errno()})")
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0, "could not restore this thread's capabilities"
