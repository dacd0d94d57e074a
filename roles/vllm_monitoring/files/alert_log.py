"""A webhook receiver for Alertmanager that appends each notification it gets to a file, one JSON document a line.

The lab's receiver (roles/vllm_monitoring, vllm_monitoring_alert_log_enabled): tests read real notifications from the
file. It runs on the monitoring host with the host's python3, standard library only, on loopback.
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import time
from pathlib import Path
from typing import Any

MAX_BODY = 1 << 20


def log_line(body: bytes, received_at: float) -> str:
    """Return the line recorded for one notification: its JSON with the time it arrived (ValueError: not JSON)."""
    document: Any = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("a notification is a JSON object")
    return json.dumps({"received_at": round(received_at, 3), **document}, sort_keys=True) + "\n"


def handler_for(log: Path) -> type[http.server.BaseHTTPRequestHandler]:
    """Return the request handler that appends each POSTed notification to log."""
    class Handler(http.server.BaseHTTPRequestHandler):
        """Takes Alertmanager's webhook POSTs."""

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            """Append the notification and answer 200, or 400 when it is not one."""
            length = int(self.headers.get("Content-Length") or 0)
            try:
                if length > MAX_BODY:
                    raise ValueError("too large")
                line = log_line(self.rfile.read(length), time.time())
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            with log.open("a", encoding="utf-8") as out:
                out.write(line)
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
            """Keep the journal quiet: the file is the record."""
    return Handler


def main(argv: list[str]) -> int:
    """Serve on --address:--port and append to --log until stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9095)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args(argv)
    server = http.server.ThreadingHTTPServer((args.address, args.port), handler_for(args.log))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
