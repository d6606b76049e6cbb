#!/usr/bin/env python3
"""An OTLP/HTTP trace sink for the tracing-overhead benchmark (bench/otel-overhead.sh): answers
every `POST /v1/traces` with an empty ExportTraceServiceResponse (200, application/x-protobuf)
and counts the requests and bytes it was sent. Not a trace store: it is there so the exporter
does its whole job (batch, encode, send over HTTP) against a real peer.

  python3 bench/otlp-sink.py PORT     (prints `requests bytes` on SIGTERM/SIGINT)
"""
import http.server
import signal
import sys
import threading

seen = {"requests": 0, "bytes": 0}
lock = threading.Lock()


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        with lock:
            seen["requests"] += 1
            seen["bytes"] += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)

    def done(*_):
        print(f"{seen['requests']} {seen['bytes']}", flush=True)
        threading.Thread(target=srv.shutdown).start()

    signal.signal(signal.SIGTERM, done)
    signal.signal(signal.SIGINT, done)
    srv.serve_forever()


if __name__ == "__main__":
    main()
