#!/usr/bin/env python3
"""packd serve under abuse, on the loopback only; run by bench/abuse.sh. Prints:

- peak RSS of the server under 24 and 256 concurrent 1 MB gzip bodies (each inflating to
  about 1 GB of zeros), against the target of 64 MB + 1 MB per connection;
- peak RSS of the server under one request of each argument flood inflating to just under
  --max-request-bytes 100m (v2 ls-refs `peel` and `ref-prefix` lines, a v2 fetch of one
  repeated `have` and one repeated `want`, a v2 fetch of distinct missing wants, a v0 want
  flood): what upload-pack keeps of a request;
- peak RSS under 48 clients (one loopback address each) sending bad credentials, and a good
  user's `git ls-remote` latency meanwhile and with no attack (target: at most 2x);
- whether git from 127.0.0.1 is served, within 2 s, while silent or trickling sockets from
  127.0.0.2 keep trying to fill --max-connections 24 (with --max-connections-per-address 4,
  and without it for comparison).

Targets are figures to read, not pass/fail. Every phase is bounded in time; the whole run
stops by itself (about two minutes).
"""

import gzip
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PACKD = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="packd-abuse-")
GIT_ENV = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", HOME=WORK)


def git(*args, cwd=None, check=True, timeout=30):
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True,
                          timeout=timeout, check=check)


def make_root():
    root = os.path.join(WORK, "root")
    repo = os.path.join(root, "repo.git")
    os.makedirs(root)
    git("init", "-q", "--bare", repo)
    work = os.path.join(WORK, "work")
    git("init", "-q", work)
    for i in range(50):
        with open(os.path.join(work, f"f{i % 7}.txt"), "a") as f:
            f.write(f"line {i}\n" * 20)
        git("add", ".", cwd=work)
        git("-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", f"c{i}", cwd=work)
        if i % 10 == 0:
            git("tag", f"v{i}", cwd=work)
    git("push", "-q", repo, "HEAD:refs/heads/main", "--tags", cwd=work)
    git("-C", repo, "symbolic-ref", "HEAD", "refs/heads/main")
    return root


class Server:
    def __init__(self, root, *extra):
        self.proc = subprocess.Popen(
            [PACKD, "serve", "--root", root, "--listen", "127.0.0.1:0", "--git-daemon",
             "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, PACKD_LOG="error"))
        self.http = self.proc.stdout.readline().strip().removeprefix("listening on http://")
        self.git = self.proc.stdout.readline().strip().removeprefix("listening on git://")
        self.peak = 0
        self.sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def rss_kib(self, field="VmRSS"):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def _sample(self):
        while self.sampling and self.proc.poll() is None:
            try:
                self.peak = max(self.peak, self.rss_kib())
            except OSError:
                return
            time.sleep(0.01)

    def hwm_mb(self):
        return max(self.peak, self.rss_kib("VmHWM")) / 1024

    def stop(self):
        self.sampling = False
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def host_port(addr):
    h, p = addr.rsplit(":", 1)
    return h, int(p)


def connect(addr, src=None, timeout=20):
    s = socket.socket()
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect(host_port(addr))
    return s


def post(addr, body, headers=""):
    """Sends a POST to git-upload-pack and reads the answer; its status."""
    try:
        s = connect(addr)
        s.sendall((f"POST /repo.git/git-upload-pack HTTP/1.1\r\nHost: x\r\n"
                   f"Content-Type: application/x-git-upload-pack-request\r\n{headers}"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode())
        try:
            s.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole body was read: the answer may still be there
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return data.split(b" ", 2)[1].decode() if data else "closed"
    except OSError as e:
        return type(e).__name__


def gzip_bodies():
    return gzip.compress(b"\0" * (1024 << 20), 9)  # ~1 MB


def phase_gzip(root, bomb):
    print(f"== {len(bomb) / 1e6:.2f} MB gzip bodies (inflating to 1 GiB of zeros each), "
          "--max-request-bytes 100m (default)")
    for n in (24, 256):
        srv = Server(root, "--max-connections", "300")
        base = srv.rss_kib() / 1024
        results = []
        barrier = threading.Barrier(n)

        def one():
            barrier.wait()
            results.append(post(srv.http, bomb, "Content-Encoding: gzip\r\n"))

        threads = [threading.Thread(target=one) for _ in range(n)]
        start = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        took = time.time() - start
        peak = srv.hwm_mb()
        srv.stop()
        statuses = {s: results.count(s) for s in set(results)}
        print(f"  {n:3d} at once: peak RSS {peak:6.1f} MB (idle {base:.1f} MB; target "
              f"<= {64 + n} MB), {took:.1f} s, answers {statuses}")


def phase_v2_arguments(root):
    print("== 1 request of v2 ls-refs arguments ('peel' lines) inflating to the limit: what "
          "upload-pack keeps of a request, on top of the transport")
    for limit in ("10m", "100m"):
        srv = Server(root, "--max-request-bytes", limit)
        base = srv.rss_kib() / 1024
        body = b"0014command=ls-refs\n0001" + b"0009peel\n" * ((200 << 20) // 9)
        gz = gzip.compress(body, 9)
        status = post(srv.http, gz, "Content-Encoding: gzip\r\nGit-Protocol: version=2\r\n")
        peak = srv.hwm_mb()
        srv.stop()
        print(f"  --max-request-bytes {limit}: {len(gz) / 1e6:.2f} MB of gzip, answer {status}, "
              f"peak RSS {peak:.1f} MB (idle {base:.1f} MB)")


def pkt(text):
    return b"%04x" % (len(text) + 4) + text


def flood(head, line, fill=99_000_000, tail=b"0000"):
    """`head`, then `line` as a pkt-line repeated up to about `fill` bytes, then `tail`."""
    one = pkt(line)
    return head + one * ((fill - len(head)) // len(one)) + tail


def phase_request_floods(root):
    print("== 1 request of each flood inflating to just under --max-request-bytes 100m "
          "(default): what one request costs, transport and upload-pack together")
    repo = os.path.join(root, "repo.git")
    tip = git("-C", repo, "rev-parse", "main").stdout.strip().decode()
    old = git("-C", repo, "rev-parse", "main~40").stdout.strip().decode()
    v2 = lambda command: pkt(b"command=%s\n" % command) + pkt(b"agent=git/2.39.5\n") + b"0001"
    cases = [
        ("v2 ls-refs: 'peel' lines", v2(b"ls-refs"), b"peel\n", b"0000"),
        ("v2 ls-refs: 65,536+ 1.4 KB 'ref-prefix' lines", v2(b"ls-refs"),
         b"ref-prefix refs/heads/" + b"x" * 1400 + b"\n", b"0000"),
        ("v2 fetch: 1 want, the same 'have' 990,000 times, done",
         v2(b"fetch") + pkt(b"want %s\n" % tip.encode()),
         b"have %s\n" % old.encode(), None),
        ("v2 fetch: the same 'want' ~1.8 million times", v2(b"fetch"),
         b"want %s\n" % tip.encode(), pkt(b"done\n") + b"0000"),
        ("v2 fetch: distinct wants of missing objects", v2(b"fetch"), None, None),
        ("v0 fetch: the same 'want' ~1.8 million times",
         pkt(b"want %s side-band-64k\n" % tip.encode()), b"want %s\n" % tip.encode(),
         b"0000" + pkt(b"done\n")),
    ]
    for label, head, line, tail in cases:
        if line is None and tail is None:
            # Distinct ids: none of them in the repository.
            one = lambda i: pkt(b"want %040x\n" % (i + 1))
            body = head + b"".join(one(i) for i in range(1_800_000)) + pkt(b"done\n") + b"0000"
        elif tail is None:
            have = pkt(line)
            body = head + have * 990_000 + pkt(b"done\n") + b"0000"
        else:
            body = flood(head, line, tail=tail)
        gz = gzip.compress(body, 6)
        headers = "Content-Encoding: gzip\r\n"
        if head[4:12] == b"command=":
            headers += "Git-Protocol: version=2\r\n"
        srv = Server(root)
        base = srv.rss_kib() / 1024
        start = time.time()
        status = post(srv.http, gz, headers)
        took = time.time() - start
        peak = srv.hwm_mb()
        srv.stop()
        print(f"  {label}: {len(body) / 1e6:.0f} MB ({len(gz) / 1e6:.2f} MB gzip), answer "
              f"{status} in {took:.1f} s, peak RSS {peak:.1f} MB (idle {base:.1f} MB)")


def ls_remote_time(url):
    start = time.time()
    r = git("ls-remote", url, check=False, timeout=30)
    took = time.time() - start
    return took, r.returncode == 0


def phase_auth(root):
    print("== 48 clients with bad passwords (127.0.0.2-49, one each), good user from 127.0.0.1")
    token = "good-token"
    h = subprocess.run([PACKD, "serve", "--hash-token"], input=token + "\n",
                       capture_output=True, text=True, check=True).stdout.strip()
    users = os.path.join(WORK, "users")
    with open(users, "w") as f:
        f.write(f"alice:{h}:read:*\n")
    srv = Server(root, "--auth-file", users)
    url = f"http://alice:{token}@{srv.http}/repo.git"
    ls_remote_time(url)  # warm: the repository opened, the credential cached
    quiet = [ls_remote_time(url)[0] for _ in range(10)]
    stop = threading.Event()
    sent = [0, 0]  # requests, 429s

    def attacker(i):
        src = f"127.0.0.{2 + i}"
        bad = "Authorization: Basic YWxpY2U6d3Jvbmc=\r\n"  # alice:wrong
        while not stop.is_set():
            try:
                s = connect(srv.http, src, timeout=10)
                s.sendall((f"GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\n"
                           f"Host: x\r\n{bad}Connection: close\r\n\r\n").encode())
                data = s.recv(100)
                s.close()
                sent[0] += 1
                if b" 429 " in data:
                    sent[1] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True) for i in range(48)]
    for t in threads:
        t.start()
    time.sleep(1)
    attacked = []
    end = time.time() + 8
    while time.time() < end:
        took, ok = ls_remote_time(url)
        attacked.append(took if ok else float("inf"))
    stop.set()
    for t in threads:
        t.join(timeout=15)
    peak = srv.hwm_mb()
    srv.stop()
    q, a = statistics.median(quiet), statistics.median(attacked)
    print(f"  good user's ls-remote: {q * 1000:.0f} ms median with no attack, "
          f"{a * 1000:.0f} ms median (max {max(attacked) * 1000:.0f} ms, {len(attacked)} runs) "
          f"under attack: {a / q:.2f}x (target <= 2x)")
    print(f"  attack: {sent[0]} requests, {sent[1]} answered 429; peak RSS {peak:.1f} MB")


def phase_slots(root, per_address):
    label = f"--max-connections-per-address {per_address}" if per_address else "no per-address limit"
    print(f"== --max-connections 24, {label}: 127.0.0.2 keeps 40 sockets silent or trickling")
    extra = ["--max-connections", "24"]
    if per_address:
        extra += ["--max-connections-per-address", str(per_address)]
    srv = Server(root, *extra)
    stop = threading.Event()

    def holder(i, addr):
        while not stop.is_set():
            try:
                s = connect(addr, "127.0.0.2", timeout=2)
                trickle = b"POST /repo.git/git-upload-pack HTTP/1.1\r\nHost: x\r\n"
                for b in (trickle if i % 2 else b""):
                    if stop.is_set():
                        break
                    s.send(bytes([b]))
                    time.sleep(1)
                # Silent: wait to be closed (or refused), then come back.
                while not stop.is_set():
                    try:
                        if not s.recv(4096):
                            break
                    except socket.timeout:
                        continue
                s.close()
            except OSError:
                time.sleep(0.05)

    threads = [threading.Thread(target=holder, args=(i, srv.git if i % 4 == 3 else srv.http),
                                daemon=True) for i in range(40)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    results = []
    for i in range(10):
        url = (f"http://{srv.http}/repo.git" if i % 2 == 0 else f"git://{srv.git}/repo.git")
        took, ok = ls_remote_time(url)
        results.append((took, ok))
    stop.set()
    srv.stop()
    served = sum(1 for t, ok in results if ok and t <= 2)
    print(f"  good client (127.0.0.1, HTTP and git://): {served} of {len(results)} served "
          f"within 2 s; latencies " + ", ".join(
              f"{t * 1000:.0f} ms{'' if ok else ' FAILED'}" for t, ok in results))


def main():
    deadline = threading.Timer(290, lambda: os._exit(2))
    deadline.daemon = True
    deadline.start()
    try:
        root = make_root()
        phase_gzip(root, gzip_bodies())
        phase_v2_arguments(root)
        phase_request_floods(root)
        phase_auth(root)
        phase_slots(root, 4)
        phase_slots(root, 0)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


main()
