"""A remote-write receiver for benchmarks: accepts every POST with 204 and counts bytes.

    python3 benches/rw_sink.py PORT
"""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
