#!/bin/bash
set -e
cat > /app/server.py <<'PY'
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        u = urlparse(self.path)
        if u.path == "/health":
            body = "ok"
        elif u.path == "/sum":
            q = parse_qs(u.query)
            body = str(int(q["a"][0]) + int(q["b"][0]))
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", 8000), Handler).serve_forever()
PY
setsid nohup python3 /app/server.py > /dev/null 2>&1 < /dev/null &
for i in $(seq 50); do
  python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=1)' 2>/dev/null && exit 0
  sleep 0.1
done
echo "the server did not start" >&2
exit 1
