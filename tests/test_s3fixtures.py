"""The S3 server the tests start (tests/s3.py): a port taken between finding it free and weed mini
binding it does not fail the test that needed the server."""

from __future__ import annotations

import socket

import pytest

import s3
from s3 import WeedServer, keys, raw_store, s3_env_or_skip, weed_binary


def test_a_port_taken_before_weed_binds_it_starts_the_server_on_other_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    s3_env_or_skip()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        found = s3.free_ports
        given: list[list[int]] = []

        def first_one_taken(count: int) -> list[int]:
            ports = found(count)
            if not given:
                ports[s3.PORT_FLAGS.index("s3.port")] = taken
            given.append(ports)
            return ports

        monkeypatch.setattr(s3, "free_ports", first_one_taken)
        server = WeedServer(weed_binary() or "weed")
        try:
            assert len(given) == 2 and server.ports["s3.port"] != taken
            assert keys(raw_store(server), "") == []
        finally:
            server.stop()
