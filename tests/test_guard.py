"""The autouse guard in conftest.py: tests cannot reach real endpoints."""

from __future__ import annotations


def test_real_endpoints_are_blocked():
    """The autouse guard must fail a test that opens a connection to the outside."""
    import socket

    import pytest

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(pytest.fail.Exception):
            sock.connect(("93.184.216.34", 443))
    finally:
        sock.close()
