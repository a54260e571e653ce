"""A loopback instance metadata service (IMDSv2 as AWS documents it: a token from ``PUT
/latest/api/token``, then reads that carry it) with a switch for the spot notice, for the node
agent's live tests."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Imds:
    """IMDSv2 as AWS documents it, with a switch for the spot notice."""

    def __init__(self) -> None:
        self.action: dict[str, str] | None = None
        self.gets = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                ok = self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds")
                self._send(200 if ok else 400, "tok-1" if ok else "")

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != "tok-1":
                    self._send(401, "")
                    return
                owner.gets += 1
                if self.path == "/latest/meta-data/spot/instance-action" and owner.action:
                    self._send(200, json.dumps(owner.action))
                else:
                    self._send(404, "")

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def notice(self, in_s: float = 120.0) -> None:
        """A spot interruption notice: terminate ``in_s`` from now."""
        at = datetime.now(UTC) + timedelta(seconds=in_s)
        self.action = {"action": "terminate", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
