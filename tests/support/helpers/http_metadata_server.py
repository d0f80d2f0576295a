#!/usr/bin/env python3
"""A key-value HTTP metadata server for tests (standard library only).

GET/PUT/DELETE <path>?key=K, the protocol of HTTP metadata servers that
engines share descriptors through (docs/protocol.md, "HTTP metadata store"):
GET answers 200 with the value or 404; PUT stores the body and answers 200;
DELETE answers 200, or 404 when the key is absent.  Binds 127.0.0.1 on a free
port, prints "port N" on stdout once it listens, serves until killed.
Usage: http_metadata_server.py [PATH]   (default /metadata)
"""
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PATH = sys.argv[1] if len(sys.argv) > 1 else "/metadata"
STORE = {}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _key(self):
        u = urlsplit(self.path)
        if u.path != PATH:
            self._answer(404, b"no such path")
            return None
        keys = parse_qs(u.query, keep_blank_values=True).get("key")
        if not keys:
            self._answer(400, b"missing key")
            return None
        return keys[0]

    def _answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        key = self._key()
        if key is None:
            return
        with LOCK:
            value = STORE.get(key)
        if value is None:
            self._answer(404, b"metadata not found")
        else:
            self._answer(200, value)

    def do_PUT(self):
        key = self._key()
        if key is None:
            return
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        with LOCK:
            STORE[key] = data
        self._answer(200, b"metadata updated")

    def do_DELETE(self):
        key = self._key()
        if key is None:
            return
        with LOCK:
            found = STORE.pop(key, None) is not None
        self._answer(200 if found else 404,
                     b"metadata deleted" if found else b"metadata not found")

    def log_message(self, *args):
        pass


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("port %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
