"""Send API requests to a daemon's unix socket as whoever runs this (the hostile-input
suite runs it as alice through runuser). Standard library only.

Usage: ``python api_worker.py SOCKET TIMEOUT``. Reads one JSON request per line on stdin
(``{"method", "path", "body": base64 or null, "head_only": bool}``; ``head_only``: a
stream, whose body is not awaited after a 200) and writes one JSON answer per line
(``{"status", "type", "body": base64}``, or ``{"failed": reason}`` when no HTTP answer
came: a closed connection, a timeout)."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import sys


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("bridge", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


def main() -> None:
    path, timeout = sys.argv[1], float(sys.argv[2])
    for line in sys.stdin:
        req = json.loads(line)
        body = base64.b64decode(req["body"]) if req["body"] is not None else None
        conn = UnixConnection(path, timeout)
        try:
            conn.putrequest(req["method"], req["path"], skip_accept_encoding=True)
            if body is not None:
                conn.putheader("Content-Type", "application/json")
                conn.putheader("Content-Length", str(len(body)))
            try:
                conn.endheaders(body)
            except (BrokenPipeError, ConnectionResetError):
                # Answered (413, 429) and closed before the whole body was read: the
                # answer is there to read, as a browser or curl would.
                if conn.sock is None:
                    raise
            resp = conn.getresponse()
            streamed = req.get("head_only") and resp.status == 200
            answer = {"status": resp.status, "type": resp.getheader("Content-Type", ""),
                      "body": base64.b64encode(b"" if streamed else resp.read()).decode()}
        except (OSError, http.client.HTTPException) as exc:
            answer = {"failed": repr(exc)}
        finally:
            conn.close()
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
