"""A JSON-over-HTTP server on loopback, from the standard library."""
import json
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HTTPError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def serve(host, port, routes, name):
    """routes: {("GET"|"POST", path): fn(body_dict) -> dict}."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # requests are not worth a log line each
            pass

        def _handle(self, method):
            # Read the whole body whatever the answer: on a kept-alive
            # connection unread bytes would be taken for the next request.
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self.close_connection = True
                return self._send(400, {"error": "Content-Length is not a number"})
            raw = self.rfile.read(n) if n > 0 else b""
            fn = routes.get((method, self.path.split("?")[0]))
            if fn is None:
                return self._send(404, {"error": f"no route {method} {self.path}"})
            try:
                body = json.loads(raw) if raw else {}
                if not isinstance(body, dict):
                    raise HTTPError(400, "request body must be a JSON object")
                self._send(200, fn(body))
            except HTTPError as e:
                self._send(e.status, {"error": str(e)})
            except json.JSONDecodeError as e:
                self._send(400, {"error": f"request body is not JSON: {e}"})
            except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
                self._send(400, {"error": f"{type(e).__name__}: {e}"})
            except Exception as e:  # a server bug: say so, keep serving
                traceback.print_exc()
                self._send(500, {"error": f"{type(e).__name__}: {e}"})

        def _send(self, status, obj):
            b = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            self._handle("GET")

        def do_POST(self):
            self._handle("POST")

    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    print(f"{name}: listening on http://{host}:{srv.server_address[1]}", file=sys.stderr, flush=True)
    return srv
