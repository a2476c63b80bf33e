"""A unix-socket proxy that drops the answer to the first request it relays.

Run as the user whose requests it relays (the daemon sees that user's peer
credentials): ``python resetting_proxy.py LISTEN_PATH DAEMON_SOCKET``. The first
request reaches the daemon (it is admitted) but its answer is thrown away and the
client's connection closed — what a client sees when a connection is reset after
the daemon did the work. Later requests are relayed with their answers. Each line
it prints is one request line it relayed (``DROPPED`` or ``RELAYED``).
"""

from __future__ import annotations

import os
import socket
import sys


def _read_message(sock: socket.socket) -> bytes:
    """One HTTP message (head and a Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def main(listen: str, daemon: str) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(listen)
    os.chmod(listen, 0o600)
    server.listen(8)
    print("READY", flush=True)
    dropped = False
    while True:
        client, _ = server.accept()
        with client:
            request = _read_message(client)
            if not request:
                continue
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(daemon)
            with upstream:
                upstream.sendall(request)
                answer = _read_message(upstream)
            line = request.split(b"\r\n", 1)[0].decode()
            if not dropped:
                dropped = True
                print(f"DROPPED {line}", flush=True)
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00"
                                  b"\x00\x00\x00\x00")  # close with a reset
                continue
            client.sendall(answer)
            print(f"RELAYED {line}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
