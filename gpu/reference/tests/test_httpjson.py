import http.client
import json
import threading

import httpjson


def test_unknown_route_reads_the_body_so_a_kept_alive_connection_stays_in_step():
    srv = httpjson.serve("127.0.0.1", 0, {("POST", "/echo"): lambda body: {"got": body}}, "test")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]})
        # A client configured with a base URL ending in /v1 asks for /v1/v1/...
        conn.request("POST", "/v1/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 404 and b"no route" in r.read()
        # The same connection then asks a real route: with the first body
        # left unread this was answered 400 "Bad request syntax".
        conn.request("POST", "/echo", json.dumps({"a": 1}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200, r.read()
        assert json.loads(r.read()) == {"got": {"a": 1}}
    finally:
        srv.shutdown()
