#!/usr/bin/env python3
"""Fetch and clone benchmark, packd against git, in the shape of git's t/perf/p5311.

Called by bench/fetch.sh (which builds packd and the bitmapped repository copy); see
bench/README.md. For each N in DAYS a client N days behind the tip (have = the newest commit at
least N days older than HEAD's commit date) fetches HEAD:

- git: `git pack-objects --stdout --revs --thin --use-bitmap-index --delta-base-offset` with
  `HEAD ^have` on stdin, a fresh process per run (as upload-pack spawns it), CPU from wait4;
- packd: the same want and have as a protocol v2 fetch (thin-pack, ofs-delta, no-progress, done)
  POSTed to one long-running `packd serve`, whose CPU is read from its process CPU-time clock
  (see `proc_cpu`) before and after RUNS requests (the server keeps its indexes loaded, which is the point of a server);
- both packs are then completed by the client, `git index-pack --stdin --fix-thin`, timed.
- then the same want and have as one protocol v2 request (with include-tag) on the stdin of
  `git upload-pack --stateless-rpc` and of `packd upload-pack --stateless-rpc`: a process per
  request, as over ssh, which loads its indexes each time (CPU of the process, median of RUNS;
  columns `git up`, `packd up`); and with REV_COPY (the same repository with a `.rev` that git
  wrote, as git 2.41 and later do on every repack) the same again on that copy (columns
  `git .rev`, `packd .rev`).
- then the refs listed by a process per request, as `git ls-remote` over ssh (`ref_listing`).

Then a full clone (wants = every branch and tag, include-tag): git's pack-objects CPU (median
of 3 runs, with that run's peak RSS and wall time) against packd serve's CPU and peak RSS
(VmHWM) for the same request
(median of CLONE_RUNS, default 3, each run from nothing kept; the peak the highest), in
five states: a fresh server's first clone (nothing kept from earlier servers) and the running
server's next one, then a server started again, which reads back what the first kept of its
fill-in walk (`packd-cache/walk/`) (all three with the clone cache off), then, with nothing kept
again and the clone cache on, the clone that fills it and the next one, sent from it; with a
fourth argument (a copy that keeps every ref), the same for a mirror clone of it (wants = every
ref, the issue's own full-clone setting), and with a fifth (that copy with the bitmaps
`packd write-bitmap --every-tip` wrote) for a mirror clone of that; then the same repository
after a push (one new loose commit since the last repack): a clone and a fetch 1 day behind
(`after_push`), and a mirror clone of the fourth and fifth arguments after a push (by a running
server that served the same clone before the push); and with
HTTP_CLONE=1 (default) `git clone --bare` end to end over HTTP from packd serve and from git's
own smart HTTP (git http-backend behind bench/lib/http_backend.py).
"""
import http.client
import filecmp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def git(repo, *args, **kw):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True, **kw).stdout.strip()


def run_rusage(cmd, stdin_data=b"", stdout=subprocess.DEVNULL, cwd=None, env=None):
    """Runs cmd; returns (cpu seconds, peak rss MB, wall seconds, exit code)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE,
                            cwd=cwd, env=env)
    proc.stdin.write(stdin_data)
    proc.stdin.close()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace"))
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, wall, proc.returncode


def git_pack_objects(repo, revs, out_path, include_tag=False):
    """git's side of a fetch: `git pack-objects --stdout --revs --thin --use-bitmap-index
    --delta-base-offset` (with `--include-tag`) of `revs` (bytes, one per line, `^` for haves)
    into out_path; exits when it fails. Returns (cpu seconds, peak rss MB, wall seconds)."""
    flags = ["--include-tag"] if include_tag else []
    with open(out_path, "wb") as out:
        c, rss, wall, code = run_rusage(
            ["git", "-C", repo, "pack-objects", "--stdout", "--revs", "--thin",
             "--use-bitmap-index", "--delta-base-offset", *flags], revs, stdout=out)
    if code != 0:
        sys.exit("git pack-objects failed")
    return c, rss, wall


def fetch_body(wants, haves, include_tag):
    """A protocol v2 fetch request (thin-pack, ofs-delta, no-progress, done)."""
    body = pkt("command=fetch\n") + pkt("agent=packd-bench\n") + b"0001"
    body += pkt("thin-pack\n") + pkt("ofs-delta\n") + pkt("no-progress\n")
    if include_tag:
        body += pkt("include-tag\n")
    body += b"".join(pkt(f"want {w}\n") for w in wants)
    body += b"".join(pkt(f"have {h}\n") for h in haves)
    return body + pkt("done\n") + b"0000"


def stateless_fetch(cmd, repo, want, have, out_path):
    """One protocol v2 fetch (`fetch_body`, with include-tag) of `want` with `have`, given on
    stdin to `cmd --stateless-rpc repo` (git upload-pack, or packd's), a process per request
    as over ssh, its answer written to out_path. Returns the CPU seconds of the process."""
    with open(out_path, "wb") as out:
        cpu, _, _, code = run_rusage([*cmd, "--stateless-rpc", repo],
                                     fetch_body([want], [have], True), stdout=out,
                                     env=dict(os.environ, GIT_PROTOCOL="version=2"))
    answer = open(out_path, "rb").read()
    # A whole answer: its pack section, ended by a flush (an ERR line would also exit 0).
    if code != 0 or b"packfile\n" not in answer or not answer.endswith(b"0000"):
        sys.exit(f"{cmd} sent no whole pack: {answer[:200]!r}")
    return cpu


def ref_listing(packd, repo, runs, tmp):
    """The refs listed by a process per request, as `git ls-remote` over ssh does: protocol v2
    `ls-refs` (peel, symrefs) and the v0 advertisement, from git upload-pack and from packd's.
    Prints the CPU of each (median of at least 15 processes) and whether the refs listed are
    the same (the v0 capability lists differ by design: the first line of each answer, HEAD
    with the capabilities, is left out of the comparison)."""
    v2 = pkt("command=ls-refs\n") + pkt("agent=git/2.39\n") + b"0001" + pkt("peel\n") \
        + pkt("symrefs\n") + b"0000"
    env2 = dict(os.environ, GIT_PROTOCOL="version=2")
    env0 = {k: v for k, v in os.environ.items() if k != "GIT_PROTOCOL"}
    cases = [("v2 ls-refs", ["--stateless-rpc"], v2, env2), ("v0 advertisement", [], b"0000", env0)]
    print(f"   {'':18} {'git ms':>8} {'packd ms':>8} {'ratio':>6}  same refs")
    for label, flags, request, env in cases:
        answers, cpus = {}, {}
        for who, cmd in (("git", ["git", "upload-pack"]), ("packd", [packd, "upload-pack"])):
            runs_cpu = []
            for _ in range(max(runs, 15)):
                with open(f"{tmp}/refs.out", "wb") as out:
                    cpu, _, _, code = run_rusage([*cmd, *flags, repo], request, stdout=out, env=env)
                if code != 0:
                    sys.exit(f"{who} upload-pack failed to list refs")
                runs_cpu.append(cpu)
            cpus[who] = statistics.median(runs_cpu)
            answers[who] = open(f"{tmp}/refs.out", "rb").read()
        os.unlink(f"{tmp}/refs.out")
        if label.startswith("v0"):
            same = answers["git"].split(b"\n", 1)[1] == answers["packd"].split(b"\n", 1)[1]
        else:
            same = answers["git"] == answers["packd"]
        print(f"   {label:18} {cpus['git'] * 1000:>8.2f} {cpus['packd'] * 1000:>8.2f} "
              f"{cpus['packd'] / cpus['git']:>6.2f}  {same}", flush=True)


def linked_copy(repo, path):
    """A copy of `repo` at `path` whose files are hard links: git replaces files by renaming new
    ones over them, so the links stay the original's; reflogs are appended to in place, so the
    copy has none and writes none."""
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["cp", "-al", repo, path], check=True)
    shutil.rmtree(f"{path}/logs", ignore_errors=True)
    git(path, "config", "core.logAllRefUpdates", "false")


def commit_on(repo, parent, message):
    """A new commit in `repo` with `parent`'s tree and `message` (a push's loose commit): its
    id."""
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com")
    return subprocess.run(["git", "-C", repo, "commit-tree", "-p", parent, "-m", message,
                           f"{parent}^{{tree}}"], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def push_commit(repo, message, parent=None):
    """A new commit on HEAD's branch of `repo`, loose, as receive-pack stores a small push: its
    parent is `parent` (default the branch's tip), with that parent's tree. The branch moves
    only from the tip it had when read (update-ref checks it). Its id."""
    branch = git(repo, "symbolic-ref", "HEAD")
    tip = git(repo, "rev-parse", branch)
    new = commit_on(repo, parent or tip, message)
    git(repo, "update-ref", branch, new, tip)
    return new


# Set once a report says the server's CPU was read in clock ticks (see `proc_cpu`).
TICKS_WARNED = False


def proc_cpu(pid):
    """CPU seconds process `pid` has used so far, its exited threads included (a request's
    counting runs on a thread of its own). Read from the process's CPU-time clock, counted in
    nanoseconds: a small fetch costs a running server a few milliseconds, which the clock ticks
    of /proc/PID/stat (10 ms here) cannot tell apart. Those ticks where the clock cannot be
    read."""
    global TICKS_WARNED
    try:
        # The clock id of process `pid`'s CPU time (Linux's MAKE_PROCESS_CPUCLOCK(pid,
        # CPUCLOCK_SCHED)), what clock_getcpuclockid(3) gives.
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        if not TICKS_WARNED:
            TICKS_WARNED = True
            print("   (server CPU read in 10 ms clock ticks: its process clock cannot be read)")
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


def proc_hwm(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pkt(s):
    b = s.encode() if isinstance(s, str) else s
    return b"%04x" % (len(b) + 4) + b


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    for _ in range(300):
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not start listening on {port}")


class Packd:
    """A running `packd serve` over the repository's parent directory."""

    def __init__(self, packd, root, extra=(), log=None, env=None):
        """`log`: a file that takes the server's stderr (its log lines; default: dropped);
        `env`: its environment (default this process's)."""
        self.port = free_port()
        self.proc = subprocess.Popen([packd, "serve", "--root", root, "--listen",
                                      f"127.0.0.1:{self.port}", *extra],
                                     stdout=subprocess.DEVNULL,
                                     stderr=log or subprocess.DEVNULL, env=env)
        wait_port(self.port, self.proc, "packd serve")

    def fetch(self, name, wants, haves, out_path, include_tag=False):
        """A v2 fetch with done; writes the pack to out_path and returns its size."""
        body = fetch_body(wants, haves, include_tag)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("POST", f"/{name}/git-upload-pack", body=body, headers={
            "Content-Type": "application/x-git-upload-pack-request",
            "Accept": "application/x-git-upload-pack-result",
            "Git-Protocol": "version=2"})
        resp = conn.getresponse()
        if resp.status != 200:
            sys.exit(f"packd answered {resp.status}: {resp.read()[:500]!r}")
        size = 0
        in_pack = False
        with open(out_path, "wb") as out:
            while True:
                head = resp.read(4)
                if len(head) < 4:
                    sys.exit("packd's response ended early")
                n = int(head, 16)
                if n == 0:
                    if in_pack:
                        break
                    continue
                if n < 4:
                    continue
                data = resp.read(n - 4)
                if not in_pack:
                    if data == b"packfile\n":
                        in_pack = True
                    elif data.startswith(b"ERR"):
                        sys.exit(f"packd: {data!r}")
                    continue
                band, payload = data[0], data[1:]
                if band == 1:
                    out.write(payload)
                    size += len(payload)
                elif band == 3:
                    sys.exit(f"packd: {payload!r}")
        conn.close()
        return size

    def cpu(self):
        return proc_cpu(self.proc.pid)

    def hwm(self):
        return proc_hwm(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def index_pack(client, pack_path):
    """Wall seconds of `git index-pack --stdin --fix-thin` in client (then the pack is removed)."""
    before = set(os.listdir(f"{client}/objects/pack"))
    with open(pack_path, "rb") as f:
        data = f.read()
    cpu, _, wall, code = run_rusage(["git", "-C", client, "index-pack", "--stdin", "--fix-thin"],
                                    data)
    for name in set(os.listdir(f"{client}/objects/pack")) - before:
        os.unlink(f"{client}/objects/pack/{name}")
    return wall if code == 0 else float("nan")


def full_clone(packd, repo, wants, tmp):
    """Server CPU and peak memory of a clone of `repo` wanting `wants` (include-tag): git's
    pack-objects (the run of median CPU of 3) against packd serve in five states, as the
    module doc says. The five states are gone through CLONE_RUNS times (default 3, at least
    1), each time from nothing kept; each packd figure is the median over them (a fresh
    server's first clone cannot be repeated on one server), and its peak the highest."""
    root, name = os.path.dirname(repo), os.path.basename(repo)
    revs = "".join(w + "\n" for w in wants).encode()
    git_runs = [git_pack_objects(repo, revs, f"{tmp}/git-clone.pack", include_tag=True)
                for _ in range(3)]
    c, rss, wall = sorted(git_runs)[1]
    git_bytes = os.path.getsize(f"{tmp}/git-clone.pack")

    def clone_once(server, path):
        base_cpu = server.cpu()
        start = time.monotonic()
        size = server.fetch(name, wants, [], path, include_tag=True)
        return server.cpu() - base_cpu, time.monotonic() - start, size

    samples = {}  # label -> [(cpu, peak, wall, size)], in the order first met
    identical = True

    def serve(labels, args):
        """One server started with `args`, a clone for each of `labels`: a sample each."""
        nonlocal identical
        server = Packd(packd, root, args)
        try:
            for label in labels:
                pcpu, pwall, size = clone_once(server, f"{tmp}/packd-clone.pack")
                samples.setdefault(label, []).append((pcpu, server.hwm(), pwall, size))
                identical = identical and filecmp.cmp(f"{tmp}/packd-clone.pack",
                                                      f"{tmp}/git-clone.pack", shallow=False)
        finally:
            server.stop()

    # A fresh server's first clone and the running server's next one (indexes loaded); a
    # server started again over what the first kept of its walk; all three without the clone
    # cache. Then, with nothing kept and the clone cache on, the clone that fills it and the
    # next one, sent from it.
    cache = os.path.join(repo, "packd-cache")
    no_cache = ["--clone-cache-bytes", "0"]
    runs = max(1, int(os.environ.get("CLONE_RUNS", "3")))
    try:
        for _ in range(runs):
            shutil.rmtree(cache, ignore_errors=True)
            serve(("packd, fresh server", "packd, running server"), no_cache)
            serve(("packd, started again",), no_cache)
            shutil.rmtree(cache, ignore_errors=True)
            serve(("packd, cache filled", "packd, from cache"), [])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    os.unlink(f"{tmp}/packd-clone.pack")
    os.unlink(f"{tmp}/git-clone.pack")
    print(f"   packd: median of {runs} clones per state (cpu s, each listed after), peak the highest")
    print(f"   {'':22} {'cpu s':>8} {'peak MB':>8} {'wall s':>8} {'bytes':>11} {'cpu ratio':>9}"
          f" {'mem ratio':>9}  {'each cpu s':>10}")
    print(f"   {'git pack-objects':22} {c:>8.3f} {rss:>8.1f} {wall:>8.3f} {git_bytes:>11}")
    for label, rows in samples.items():
        pcpu = statistics.median(r[0] for r in rows)
        phwm = max(r[1] for r in rows)
        pwall = statistics.median(r[2] for r in rows)
        size = rows[-1][3]
        each = " ".join(f"{r[0]:.3f}" for r in rows)
        print(f"   {label:22} {pcpu:>8.3f} {phwm:>8.1f} {pwall:>8.3f} {size:>11} "
              f"{pcpu / c:>9.2f} {phwm / rss:>9.2f}  {each}")
    print(f"   packd's packs are byte for byte git's: {identical}")


def after_push(packd, repo, tmp, runs, every_ref=False):
    """A repository pushed to since its last repack: a hard-linked copy of `repo` with one new
    commit (a loose object, as git receive-pack stores a small push) on HEAD's branch. Server
    CPU and pack bytes of a clone (every branch and tag; with `every_ref`, every ref, as a
    mirror clone) and of a fetch 1 day behind (with `every_ref`, a mirror's fetch of the push:
    the new commit wanted, every ref before the push had), git's pack-objects against packd
    serve (clone cache off). packd's bitmaps do not number the new commit: it is walked until the walk
    enters the bitmapped pack. The server is a running one: it served the same clone once
    before the push (not counted; a mirror clone's fill-in walk then keeps its answer, which
    the next one starts from). After the push the clone is served twice by that server, whose
    peak resident memory over all three is set against git's (the pack can no longer be the
    file as it is: for a mirror clone its entries go out as they are, checked against the
    index's CRC-32, under a new header, then the pushed commit, then a new trailer)."""
    copy = f"{tmp}/pushed.git"
    linked_copy(repo, copy)
    old_head = git(copy, "rev-parse", "HEAD")
    patterns = [] if every_ref else ["refs/heads", "refs/tags"]
    server = Packd(packd, tmp, ["--clone-cache-bytes", "0"])
    try:
        before_push = sorted(set(git(copy, "for-each-ref", "--format=%(objectname)",
                                     *patterns).split()))
        server.fetch("pushed.git", before_push, [], f"{tmp}/packd.pack", include_tag=True)
        new = push_commit(copy, "pushed")
        head_time = int(git(copy, "log", "-1", "--format=%ct", old_head))
        have = git(copy, "rev-list", "-1", f"--before={head_time - 86400}", old_head)
        refs = sorted(set(git(copy, "for-each-ref", "--format=%(objectname)", *patterns).split()))
        label = "mirror clone, every ref" if every_ref else "clone, every branch and tag"
        cases = [(label, refs, [], True)]
        if not every_ref:
            cases.append(("fetch, 1 day behind", [new], [have], False))
        else:
            # A mirror fetching the push: it wants the pushed ref and has every ref before it.
            cases.append(("mirror fetch, all refs had", [new], before_push, False))
        print(f"{'':30} {'git cpu':>9} {'packd cpu':>9} {'ratio':>6}  {'git bytes':>11} "
              f"{'packd bytes':>11} {'ratio':>6}  {'git MB':>7} {'packd MB':>8}")
        for label, wants, haves, include_tag in cases:
            revs = "".join(w + "\n" for w in wants) + "".join("^" + h + "\n" for h in haves)
            git_cpu, git_rss = [], []
            for _ in range(3 if include_tag else runs):
                c, rss, _ = git_pack_objects(copy, revs.encode(), f"{tmp}/git.pack", include_tag)
                git_cpu.append(c)
                git_rss.append(rss)
            gc = statistics.median(git_cpu)
            git_bytes = os.path.getsize(f"{tmp}/git.pack")
            n = 2 if include_tag else runs
            before = server.cpu()
            for _ in range(n):
                size = server.fetch("pushed.git", wants, haves, f"{tmp}/packd.pack",
                                    include_tag=include_tag)
            pc = (server.cpu() - before) / n
            print(f"{label:30} {gc:>9.4f} {pc:>9.4f} {pc / gc:>6.2f}  {git_bytes:>11} "
                  f"{size:>11} {size / git_bytes:>6.3f}  {statistics.median(git_rss):>7.1f} "
                  f"{server.hwm():>8.1f}", flush=True)
            if include_tag and every_ref:
                clone_cache_after_push(packd, tmp, copy, wants, gc, git_bytes)
    finally:
        server.stop()
        shutil.rmtree(copy, ignore_errors=True)
        for f in ("git.pack", "packd.pack"):
            if os.path.exists(f"{tmp}/{f}"):
                os.unlink(f"{tmp}/{f}")


def clone_cache_bytes(repo):
    """Bytes of every file in `repo`'s clone cache (not the rest of `packd-cache/`)."""
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(f"{repo}/packd-cache/clone") for f in files)


def clone_cache_after_push(packd, tmp, copy, wants, git_cpu, git_bytes):
    """The mirror clone after a push through the clone cache: a fresh server with the cache on
    (emptied first) fills it with the first clone, which is the pack's entries as they are then
    the pushed objects, kept as a recipe of the pack's ranges rather than a copy; the second
    clone is replayed from it. CPU of each against git's for the same clone, and the bytes the
    cache holds."""
    cache = f"{copy}/packd-cache"
    shutil.rmtree(cache, ignore_errors=True)
    server = Packd(packd, tmp)
    try:
        for label in ("mirror clone, cache filled", "mirror clone, from cache"):
            before = server.cpu()
            size = server.fetch("pushed.git", wants, [], f"{tmp}/packd.pack", include_tag=True)
            pc = server.cpu() - before
            held = clone_cache_bytes(copy)
            print(f"{label:30} {git_cpu:>9.4f} {pc:>9.4f} {pc / git_cpu:>6.2f}  {git_bytes:>11} "
                  f"{size:>11} {size / git_bytes:>6.3f}  cache holds {held} bytes, .meta included", flush=True)
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)


def mirror_fetch_by_git(packd, repo, tmp, runs):
    """A mirror's `git fetch` of a push, by the real git client (protocol v2, which negotiates:
    it sends haves from its refs, newest first, until the server is ready, where the
    `after_push` row sends every ref as a have). A hard-linked copy of `repo` is the server;
    another, with a mirror's fetch refspec, the client. Each round pushes a new commit on
    HEAD's branch (loose, as receive-pack stores a small push) and resets the client's branch
    to before it, then fetches it from git upload-pack and from `packd upload-pack` (each a
    process per fetch, as over ssh; their CPU taken by `rusage_wrap.py`) and from a running
    `packd serve` over HTTP (which served one such fetch first; its CPU over 4 x `runs`
    fetches). No pack bytes: the client keeps the few objects loose."""
    server_copy, client = f"{tmp}/fetched.git", f"{tmp}/mirror.git"
    for path in (server_copy, client):
        linked_copy(repo, path)
    git(client, "config", "remote.origin.fetch", "+refs/*:refs/*")
    git(client, "config", "remote.origin.mirror", "true")
    branch = git(server_copy, "symbolic-ref", "HEAD")
    old_head = git(server_copy, "rev-parse", "HEAD")
    wrap = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rusage_wrap.py")
    log = f"{tmp}/rusage.log"
    pushes = [0]

    def fetch_push(url, upload_pack=None):
        pushes[0] += 1
        new = push_commit(server_copy, f"pushed {pushes[0]}", old_head)
        git(client, "update-ref", branch, old_head)
        git(client, "config", "remote.origin.url", url)
        args = ["git", "-C", client, "-c", "protocol.version=2", "fetch", "-q"]
        if upload_pack:
            args.append(f"--upload-pack={sys.executable} {wrap} {log} {upload_pack}")
        subprocess.run(args + ["origin"], check=True)
        if git(client, "rev-parse", branch) != new:
            sys.exit("the mirror did not fetch the push")

    server = Packd(packd, tmp, ["--clone-cache-bytes", "0"])
    try:
        cpu = {}
        for label, upload_pack in (("git upload-pack", "git-upload-pack"),
                                   ("packd upload-pack", f"{packd} upload-pack")):
            open(log, "w").close()
            for _ in range(runs):
                fetch_push(f"file://{server_copy}", upload_pack)
            # One server process per fetch: a fetch that took two would halve the mean.
            times = [float(x) for x in open(log).read().split()]
            if len(times) != runs:
                sys.exit(f"{label}: {len(times)} processes for {runs} fetches")
            cpu[label] = statistics.mean(times)
        url = f"http://127.0.0.1:{server.port}/fetched.git"
        first = server.cpu()
        fetch_push(url)
        first = server.cpu() - first
        # A few milliseconds each: more fetches make the mean steadier.
        before = server.cpu()
        for _ in range(4 * runs):
            fetch_push(url)
        cpu["packd serve"] = (server.cpu() - before) / (4 * runs)
        gc = cpu["git upload-pack"]
        print(f"   {'':34} {'cpu s':>7} {'ratio':>6}")
        for label in ("git upload-pack", "packd upload-pack", "packd serve"):
            print(f"   {label:34} {cpu[label]:>7.4f} {cpu[label] / gc:>6.2f}")
        print(f"   {'packd serve, its first such fetch':34} {first:>7.4f} {first / gc:>6.2f}",
              flush=True)
    finally:
        server.stop()
        for path in (server_copy, client):
            shutil.rmtree(path, ignore_errors=True)


def main():
    packd, repo, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    mirror = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else None
    every_tip = os.path.abspath(sys.argv[5]) if len(sys.argv) > 5 else None
    runs = int(os.environ.get("RUNS", "5"))
    days = [int(d) for d in os.environ.get("DAYS", "1 2 4 8 16 32 64 128").split()]
    root, name = os.path.dirname(repo), os.path.basename(repo)
    os.makedirs(work, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=work)
    head = git(repo, "rev-parse", "HEAD")
    head_time = int(git(repo, "log", "-1", "--format=%ct", "HEAD"))
    objects = git(repo, "count-objects", "-v")
    print(f"packd fetch benchmark, {time.strftime('%F %T UTC', time.gmtime())}, "
          f"{git(repo, 'version')}, {name}, {runs} runs")
    print(objects.replace("\n", ", "))

    client = f"{tmp}/client.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--shared", repo, client], check=True)

    server = Packd(packd, root)
    try:
        print("\n== incremental fetch: HEAD minus the newest commit N days older "
              "(server CPU per fetch, pack bytes, client index-pack --fix-thin wall)")
        rev_copy = os.environ.get("REV_COPY")
        print(f"{'N':>4} {'git cpu':>9} {'packd cpu':>9} {'ratio':>6}  {'git bytes':>11} "
              f"{'packd bytes':>11} {'ratio':>6}  {'ip git':>7} {'ip packd':>8}  "
              f"{'git up':>7} {'packd up':>8} {'ratio':>6}"
              + (f"  {'git .rev':>8} {'packd .rev':>10} {'ratio':>6}" if rev_copy else ""))
        server.fetch(name, [head], [], f"{tmp}/warm.pack")  # opens the repository once
        for n in days:
            have = git(repo, "rev-list", "-1", f"--before={head_time - n * 86400}", "HEAD")
            revs = f"{head}\n^{have}\n".encode()
            git_cpu = []
            for _ in range(runs):
                git_cpu.append(git_pack_objects(repo, revs, f"{tmp}/git.pack")[0])
            git_bytes = os.path.getsize(f"{tmp}/git.pack")
            before = server.cpu()
            for _ in range(runs):
                packd_bytes = server.fetch(name, [head], [have], f"{tmp}/packd.pack")
            packd_cpu = (server.cpu() - before) / runs
            gc = statistics.mean(git_cpu)
            ip_git = index_pack(client, f"{tmp}/git.pack")
            ip_packd = index_pack(client, f"{tmp}/packd.pack")
            # The same fetch by a process per request (ssh): git upload-pack against packd's.
            answer = f"{tmp}/stateless.out"
            git_up = statistics.median(stateless_fetch(["git", "upload-pack"], repo, head,
                                                       have, answer) for _ in range(runs))
            packd_up = statistics.median(stateless_fetch([packd, "upload-pack"], repo, head,
                                                         have, answer) for _ in range(runs))
            rev_cols = ""
            if rev_copy:
                git_rev = statistics.median(stateless_fetch(["git", "upload-pack"], rev_copy, head,
                                                            have, answer) for _ in range(runs))
                packd_rev = statistics.median(stateless_fetch([packd, "upload-pack"], rev_copy,
                                                              head, have, answer)
                                              for _ in range(runs))
                rev_cols = f"  {git_rev:>8.4f} {packd_rev:>10.4f} {packd_rev / git_rev:>6.2f}"
            print(f"{n:>4} {gc:>9.4f} {packd_cpu:>9.4f} {packd_cpu / gc:>6.2f}  {git_bytes:>11} "
                  f"{packd_bytes:>11} {packd_bytes / git_bytes:>6.3f}  {ip_git:>7.3f} "
                  f"{ip_packd:>8.3f}  {git_up:>7.4f} {packd_up:>8.4f} "
                  f"{packd_up / git_up:>6.2f}{rev_cols}", flush=True)
    finally:
        server.stop()

    print("\n== refs listed by a process per request (`git ls-remote` over ssh): CPU per process")
    for listed in (repo, mirror):
        if listed:
            print(f"   {os.path.basename(listed)}: "
                  f"{len(git(listed, 'for-each-ref', '--format=x').splitlines())} refs")
            ref_listing(packd, listed, runs, tmp)

    print("\n== full clone (every branch and tag, include-tag): server side")
    refs = git(repo, "for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags").split()
    full_clone(packd, repo, sorted(set(refs)), tmp)
    if mirror:
        print(f"\n== mirror clone of {os.path.basename(mirror)} (every ref, as `git clone --mirror`;"
              " the issue's setting): server side")
        print("   " + git(mirror, "count-objects", "-v").replace("\n", ", "))
        refs = git(mirror, "for-each-ref", "--format=%(objectname)").split()
        full_clone(packd, mirror, sorted(set(refs)), tmp)
    if every_tip:
        print(f"\n== mirror clone of {os.path.basename(every_tip)}: the same repository, its "
              "bitmaps written by `packd write-bitmap --every-tip` (every ref tip has one; both "
              "servers read them): server side")
        bitmaps = [f for f in os.listdir(f"{every_tip}/objects/pack") if f.endswith(".bitmap")]
        print("   bitmap file: " + ", ".join(
            f"{f} {os.path.getsize(f'{every_tip}/objects/pack/{f}')} bytes" for f in bitmaps))
        refs = git(every_tip, "for-each-ref", "--format=%(objectname)").split()
        full_clone(packd, every_tip, sorted(set(refs)), tmp)

    print("\n== after a push (one new loose commit on HEAD's branch since the last repack): "
          "server side")
    after_push(packd, repo, tmp, runs)
    if mirror:
        print(f"\n== after a push, {os.path.basename(mirror)}:")
        after_push(packd, mirror, tmp, runs, every_ref=True)
    if every_tip:
        print(f"\n== after a push, {os.path.basename(every_tip)}:")
        after_push(packd, every_tip, tmp, runs, every_ref=True)
    if mirror:
        print(f"\n== a mirror of {os.path.basename(mirror)} fetches a push with `git fetch` "
              "(protocol v2, negotiated haves; server CPU per fetch, the server's own process for "
              "upload-pack, mean of RUNS)")
        mirror_fetch_by_git(packd, mirror, tmp, runs)

    if os.environ.get("HTTP_CLONE", "1") == "1":
        print("\n== full clone over HTTP, end to end (`git clone --bare`, client index-pack included)")
        # Without the clone cache: the first clone of a running server.
        server = Packd(packd, root, ["--clone-cache-bytes", "0"])
        port_file = f"{tmp}/backend.port"
        backend = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__),
                                    "http_backend.py"), root, port_file])
        try:
            for _ in range(100):
                if os.path.exists(port_file):
                    break
                time.sleep(0.1)
            bport = int(open(port_file).read())
            for label, url in (("git http-backend", f"http://127.0.0.1:{bport}/{name}"),
                               ("packd serve", f"http://127.0.0.1:{server.port}/{name}")):
                dest = f"{tmp}/clone.git"
                shutil.rmtree(dest, ignore_errors=True)
                start = time.monotonic()
                r = subprocess.run(["git", "-c", "protocol.version=2", "clone", "-q", "--bare",
                                    url, dest])
                wall = time.monotonic() - start
                ok = "ok" if r.returncode == 0 else f"FAILED ({r.returncode})"
                print(f"   {label:18} {wall:8.1f} s  {ok}", flush=True)
                shutil.rmtree(dest, ignore_errors=True)
        finally:
            backend.terminate()
            server.stop()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
