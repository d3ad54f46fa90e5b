#!/usr/bin/env python3
"""Object-storage benchmark (issue 34): `packd serve --store` on a bucket of a real S3 server
(versitygw on 127.0.0.1) through a proxy adding a delay per round trip, against `packd serve
--root` on local disk and git on local disk, in one run.

Called by bench/store.sh; see bench/README.md. Usage:
  store_bench.py PACKD REPO VERSITYGW DELAY_PROXY WORK

Operations, each a protocol v2 fetch POSTed to the server (as fetch_bench.py does): a mirror
clone (wants: every ref), a branches-and-tags clone (include-tag), fetches of HEAD N days
behind (have: the newest commit N days older than HEAD), then a push of 8 commits with `git
push` over HTTP. For each: GETs and PUTs the store answered (from versitygw's access log),
bytes fetched from the store and bytes the request used of them, with their ratio (from
packd's own access log, one file per server: its `store_fetched=` and `store_used=` figures,
counted per request; versitygw 1.8 logs 0 bytes sent for every GET), server CPU (the
process's CPU clock), wall time, pack bytes. Bucket servers run
cold (a fresh process: an empty block cache) and then warm (the same request again). git's
column is `git pack-objects --revs --use-bitmap-index` (its CPU) for the fetches and `git push`
to a file:// copy (wall) for the push; packd's pushes are timed by the server (the access
log's `ms`), after an untimed push that warms the client. For the cold 20 ms fetch 1 day behind, the same with
`--store-coalescing sort` and `off` (a GET per range), as seed 004 compares.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fetch_bench import Packd, free_port, git, git_pack_objects, wait_port  # noqa: E402

KEY, SECRET = "bench", "bench-secret"


class Gateway:
    """versitygw over ROOT, its access log counted between marks."""

    def __init__(self, binary, root):
        self.root = root
        os.makedirs(f"{root}/data/packd", exist_ok=True)
        self.log = f"{root}/access.log"
        self.port = free_port()
        env = dict(os.environ, ROOT_ACCESS_KEY_ID=KEY, ROOT_SECRET_ACCESS_KEY=SECRET)
        self.proc = subprocess.Popen(
            # --keep-alive: S3 keeps connections open; without it versitygw answers every
            # request with "Connection: close", and each costs a new connection's round trip.
            [binary, "--port", f"127.0.0.1:{self.port}", "--access-log", self.log, "-q",
             "--keep-alive", "posix", f"{root}/data"], env=env, stdout=subprocess.DEVNULL,
            stderr=open(f"{root}/gw.err", "w"))
        wait_port(self.port, self.proc, "versitygw")
        self.mark()

    def mark(self):
        self.at = os.path.getsize(self.log) if os.path.exists(self.log) else 0

    def since_mark(self):
        """(GETs, PUTs, other requests, bytes sent) logged since the last mark."""
        gets = puts = other = sent = 0
        with open(self.log, "rb") as f:
            f.seek(self.at)
            for line in f:
                fields = line.split()
                op = next((x for x in fields if x.startswith(b"s3_")), b"")
                if op == b"s3_GetObject":
                    gets += 1
                    try:
                        status_at = fields.index(op) + 3
                        sent += int(fields[status_at + 2])
                    except (ValueError, IndexError):
                        pass
                elif op == b"s3_PutObject":
                    puts += 1
                elif op:
                    other += 1
        return gets, puts, other, sent

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def s3_env(endpoint):
    return dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1",
                AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)


class Server(Packd):
    """A running `packd serve` (ARGS choose --root or --store); fetches as fetch_bench's.
    Its access log (stderr, `PACKD_LOG`) goes to LOG, read between marks."""

    def __init__(self, packd, args, env, log):
        self.port = free_port()
        self.log = log
        env = dict(env, PACKD_LOG="warn,packd_serve::access=info")
        self.proc = subprocess.Popen([packd, "serve", "--listen", f"127.0.0.1:{self.port}",
                                      "--allow-push", "--no-maintenance", *args],
                                     stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                                     env=env)
        wait_port(self.port, self.proc, "packd serve")
        self.mark()

    def mark(self):
        self.at = os.path.getsize(self.log)

    def since_mark(self, until, wait=5.0):
        """(bytes fetched, bytes used, bytes put, server ms) of the access log lines since
        the last mark: the store figures of the requests served meanwhile (0 for a request
        that touched no store) and the time the server took to answer them. The line of a request is written as its response ends, so this waits (at
        most WAIT seconds) for one with UNTIL in it."""
        deadline = time.monotonic() + wait
        while True:
            with open(self.log, "rb") as f:
                f.seek(self.at)
                lines = [x for x in f.read().decode(errors="replace").splitlines()
                         if "packd_serve::access" in x]
            if any(until in x for x in lines) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        total = {"store_fetched": 0, "store_used": 0, "store_put_bytes": 0}
        ms = 0.0
        for line in lines:
            for field in line.split():
                name, _, value = field.partition("=")
                if name in total and value.isdigit():
                    total[name] += int(value)
                elif name == "ms":
                    ms += float(value)
        return (total["store_fetched"], total["store_used"], total["store_put_bytes"], ms)

    def fetch(self, name, wants, haves, include_tag=False):
        """A v2 fetch with done; returns the pack bytes received."""
        return super().fetch(name, wants, haves, os.devnull, include_tag)


class Proxy:
    """The delay proxy: MS per round trip (and per new connection), each direction of each
    connection limited to RATE bytes a second (0: no limit)."""

    def __init__(self, binary, upstream, ms, rate=0):
        args = [binary, str(upstream), str(ms)] + ([str(rate)] if rate else [])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self.endpoint = self.proc.stdout.readline().strip()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def measure(gw, server, op):
    """Runs op(server) once: (wall s, server cpu s, pack bytes, GETs, PUTs, bytes fetched
    from the store, bytes the request used), the last two from the server's access log."""
    gw.mark()
    server.mark()
    cpu = server.cpu()
    start = time.monotonic()
    size = op(server)
    wall = time.monotonic() - start
    used_cpu = server.cpu() - cpu
    gets, puts, _, _ = gw.since_mark()
    fetched, used, _, _ = server.since_mark("service=fetch ")
    return wall, used_cpu, size, gets, puts, fetched, used


def ratio(fetched, used):
    """Bytes fetched per byte used, as text ('-' when nothing was used)."""
    return f"{fetched / used:.2f}" if used else "-"


def row(label, m, local=None):
    wall, cpu, size, gets, puts, fetched, used = m
    extra = ""
    if local:
        extra = f" {cpu / local[1] if local[1] else 0:>6.2f} {wall - local[0]:>+8.3f}"
    if label.startswith("mirror clone") and wall > 0:
        extra += f"  {size / wall / 1e6:.0f} MB/s"
    print(f"  {label:<22} {wall:>8.3f} {cpu:>8.3f} {size:>12} {gets:>6} {puts:>5} "
          f"{fetched:>12} {used:>12} {ratio(fetched, used):>6}{extra}", flush=True)


def main():
    packd, repo, gw_bin, proxy_bin, work = sys.argv[1:6]
    repo = os.path.abspath(repo)
    delays = [int(d) for d in os.environ.get("DELAYS", "0,2,20").split(",")]
    # Per connection and direction, as one S3 connection's throughput (50-100 MB/s).
    rate = int(os.environ.get("RATE", "100000000"))
    # Big enough for the whole repository (git/git: 489 MB of pack, 24 MB of index), so that
    # "warm" means every block cached.
    block_cache = os.environ.get("BLOCK_CACHE", "1g")
    days = [int(d) for d in os.environ.get("DAYS", "1 8 32 128").split()]
    os.makedirs(work, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=work)
    print(f"packd object-storage benchmark, {time.strftime('%F %T UTC', time.gmtime())}, "
          f"{git(repo, 'version')}, {os.path.basename(repo)}")
    print(git(repo, "count-objects", "-v").replace("\n", ", "))
    gw = Gateway(gw_bin, f"{tmp}/s3")
    name = "git.git"
    try:
        start = time.monotonic()
        subprocess.run([packd, "import", repo, f"s3://packd/repos/{name}"], check=True,
                       env=s3_env(f"http://127.0.0.1:{gw.port}"), stdout=subprocess.DEVNULL)
        print(f"import: {time.monotonic() - start:.1f} s wall "
              f"({gw.since_mark()[1]} PUTs)")
        local_root = f"{tmp}/local"
        os.makedirs(local_root)
        subprocess.run(["cp", "-al", repo, f"{local_root}/{name}"], check=True)

        head = git(repo, "rev-parse", "HEAD")
        head_time = int(git(repo, "log", "-1", "--format=%ct", "HEAD"))
        every = sorted(set(git(repo, "for-each-ref", "--format=%(objectname)").split()))
        branches_tags = sorted(set(git(repo, "for-each-ref", "--format=%(objectname)",
                                       "refs/heads", "refs/tags").split()))
        ops = [("mirror clone", lambda s: s.fetch(name, every, [])),
               ("branches+tags clone", lambda s: s.fetch(name, branches_tags, [], True))]
        git_revs = {"mirror clone": "".join(f"{w}\n" for w in every).encode(),
                    "branches+tags clone": "".join(f"{w}\n" for w in branches_tags).encode()}
        for n in days:
            have = git(repo, "rev-list", "-1", f"--before={head_time - n * 86400}", "HEAD")
            ops.append((f"fetch {n} days", lambda s, h=have: s.fetch(name, [head], [h])))
            git_revs[f"fetch {n} days"] = f"{head}\n^{have}\n".encode()

        print("\n== git on local disk: `git pack-objects --revs --use-bitmap-index` CPU")
        git_cpu = {}
        for label, _ in ops:
            cpu, _, wall = git_pack_objects(repo, git_revs[label], f"{tmp}/git.pack",
                                            include_tag=label.startswith("branches"))
            git_cpu[label] = cpu
            print(f"  {label:<22} cpu {cpu:>8.3f}  wall {wall:>8.3f}  "
                  f"bytes {os.path.getsize(f'{tmp}/git.pack'):>12}", flush=True)

        header = (f"  {'':<22} {'wall s':>8} {'cpu s':>8} {'pack bytes':>12} {'GETs':>6} "
                  f"{'PUTs':>5} {'fetched':>12} {'used':>12} {'f/used':>6}")
        print("\n== packd serve --root (local disk), warm (second run)")
        print(header)
        local = {}
        server = Server(packd, ["--root", local_root], os.environ, f"{tmp}/serve-local.log")
        for label, op in ops:
            op(server)
            local[label] = measure(gw, server, op)
            row(label, local[label])
        server.stop()
        for label in git_cpu:
            print(f"  {label:<22} packd/git cpu {local[label][1] / git_cpu[label]:.3f}")

        results = {}
        for ms in delays:
            proxy = Proxy(proxy_bin, gw.port, ms, rate)
            print(f"\n== packd serve --store through the proxy at {ms} ms a round trip, "
                  f"{rate / 1e6:.0f} MB/s per connection each way "
                  f"(cold: a fresh server; warm: the same request again)")
            print(header + f" {'cpu/lcl':>6} {'wall-lcl':>8}")
            for label, op in ops:
                cache = f"{tmp}/cache-{ms}-{label.replace(' ', '-')}"
                server = Server(packd, ["--store", "s3://packd/repos", "--cache-dir", cache,
                                         "--block-cache-bytes", block_cache],
                                s3_env(proxy.endpoint), f"{cache}.log")
                cold = measure(gw, server, op)
                warm = measure(gw, server, op)
                server.stop()
                results[(ms, label)] = (cold, warm)
                row(f"{label} cold", cold, local[label])
                row(f"{label} warm", warm, local[label])
            if ms == max(delays) and days:
                label, op = next((lo for lo in ops if lo[0] == f"fetch {days[0]} days"))
                print(f"  {label} cold, by coalescing mode:")
                for mode in ["off", "sort", "merge"]:
                    server = Server(packd, ["--store", "s3://packd/repos", "--cache-dir",
                                            f"{tmp}/cache-mode-{mode}", "--store-coalescing",
                                            mode], s3_env(proxy.endpoint),
                                    f"{tmp}/cache-mode-{mode}.log")
                    m = measure(gw, server, op)
                    server.stop()
                    results[(ms, f"mode {mode}")] = m
                    row(f"  {mode}", m, local[label])
                off, merge = results[(ms, "mode off")][0], results[(ms, "mode merge")][0]
                print(f"  off / merge wall: {off / merge:.2f}x")
            proxy.stop()

        print("\n== push of 8 commits (git push over HTTP; git: to a file:// copy)")
        client = f"{tmp}/client.git"
        subprocess.run(["cp", "-al", repo, client], check=True)
        env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
                   GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
        tip = head
        for k in range(8):
            tip = subprocess.run(["git", "-C", client, "commit-tree", "-p", tip, "-m",
                                  f"bench {k}", f"{tip}^{{tree}}"], check=True, env=env,
                                 capture_output=True, text=True).stdout.strip()
        git_copy = f"{tmp}/git-copy.git"
        subprocess.run(["cp", "-al", repo, git_copy], check=True)
        warm_copy = f"{tmp}/warm-copy.git"
        subprocess.run(["cp", "-al", repo, warm_copy], check=True)

        def push(url, ref):
            start = time.monotonic()
            subprocess.run(["git", "-C", client, "push", "-q", url, f"{tip}:refs/heads/{ref}"],
                           check=True, stderr=subprocess.DEVNULL)
            return time.monotonic() - start

        # The client's first push does work of its own once (3.9 s of git/git's 4 s, the
        # next ones 0.7 s): it goes to a copy nobody measures.
        push('file://' + warm_copy, 'bench-warm')
        print(f"  git file://             {push('file://' + git_copy, 'bench-git'):>8.3f} s")
        print("  (server ms: the access log's time for the push's requests; round trips: "
              "the bucket's server ms over local's, per delay)")
        server = Server(packd, ["--root", local_root], os.environ, f"{tmp}/serve-push.log")
        gw.mark()
        server.mark()
        cpu = server.cpu()
        wall = push(f"http://127.0.0.1:{server.port}/{name}", "bench-local")
        local_ms = server.since_mark("method=POST")[3]
        local_push = (wall, server.cpu() - cpu)
        server.stop()
        print(f"  packd local             {wall:>8.3f} s, server cpu {local_push[1]:.3f} s, "
              f"server {local_ms:.1f} ms")
        for ms in delays:
            proxy = Proxy(proxy_bin, gw.port, ms, rate)
            server = Server(packd, ["--store", "s3://packd/repos", "--cache-dir",
                                    f"{tmp}/cache-push-{ms}"], s3_env(proxy.endpoint),
                            f"{tmp}/cache-push-{ms}.log")
            gw.mark()
            server.mark()
            cpu = server.cpu()
            wall = push(f"http://127.0.0.1:{server.port}/{name}", f"bench-{ms}ms")
            used = server.cpu() - cpu
            gets, puts, other, _ = gw.since_mark()
            fetched, read, put, server_ms = server.since_mark("method=POST")
            server.stop()
            proxy.stop()
            rtt = (server_ms - local_ms) / ms if ms else float("nan")
            print(f"  packd bucket {ms:>2} ms      {wall:>8.3f} s, server cpu {used:.3f} s, "
                  f"server {server_ms:.1f} ms, {gets} GETs {puts} PUTs {other} other, "
                  f"{fetched} bytes fetched {read} used {put} put; "
                  f"{server_ms - local_ms:+.1f} ms against local ({rtt:.1f} round trips)")
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
