#!/usr/bin/env python3
"""git's own smart HTTP for benchmarks: a threaded HTTP server running `git http-backend` as CGI.

Usage: http_backend.py ROOT PORT_FILE
Serves every repository under ROOT (GIT_HTTP_EXPORT_ALL) on 127.0.0.1 at a free port, written
to PORT_FILE once listening. Decodes chunked request bodies (git sends large POSTs chunked) and
passes Content-Encoding and Git-Protocol on, as a web server in front of http-backend would.
Benchmark use only: no auth, no limits.
"""
import http.server
import os
import shutil
import subprocess
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def cgi(self, method):
        path, _, query = self.path.partition("?")
        data = self.body() if method == "POST" else b""
        env = dict(os.environ)
        env.update(
            GIT_PROJECT_ROOT=self.server.root,
            GIT_HTTP_EXPORT_ALL="1",
            REQUEST_METHOD=method,
            PATH_INFO=path,
            QUERY_STRING=query,
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            CONTENT_LENGTH=str(len(data)),
            REMOTE_ADDR="127.0.0.1",
        )
        for header, var in (("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                            ("Git-Protocol", "GIT_PROTOCOL")):
            if self.headers.get(header):
                env[var] = self.headers[header]
        proc = subprocess.Popen(["git", "http-backend"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env)
        proc.stdin.write(data)
        proc.stdin.close()
        status, headers = "200 OK", []
        while True:
            line = proc.stdout.readline().rstrip(b"\r\n")
            if not line:
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "status":
                status = value.strip()
            else:
                headers.append((name, value.strip()))
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            chunk = proc.stdout.read1(1 << 16)
            if not chunk:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        proc.wait()

    def do_GET(self):
        self.cgi("GET")

    def do_POST(self):
        self.cgi("POST")


def main():
    root, port_file = sys.argv[1], sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.root = os.path.abspath(root)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    shutil.move(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
