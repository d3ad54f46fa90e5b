#!/usr/bin/env python3
"""Push benchmark, packd receive-pack against git receive-pack (issue 5).

Called by bench/push.sh. Each push is made by the stock git client with
`--receive-pack='WRAP RECEIVER'`, where WRAP runs the receiver and records its user+sys CPU
(wait4, microseconds, children included): git's side is `git-receive-pack`, packd's `packd receive-pack`. git and packd runs
alternate; after every run the server is put back as it was (refs restored, every file the push
added under objects/ removed), so each run pushes into the same state. Median of RUNS.

Cases:
  (a) 8 commits pushed onto main of the synthetic repository, once with 100,000 spike refs under
      refs/pull/N/head (one commit each on a random main commit) and once with 10 refs;
  (b) pushes of 1, 8, 32 and 128 days of a real repository's history (server = the repository as
      of N days before HEAD, client = the whole repository);
  (c) a 1,000-object push into the synthetic repository with no loose objects and with 256x250.

Targets: (a) packd <= 0.1x git's CPU, and packd's 100k-ref push <= 2x its 10-ref push;
(b) <= 0.6x; (c) no worse than git in either case.
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import zlib
import hashlib

RUNS = int(os.environ.get("RUNS", "5"))


def git(repo, *args, input=None):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          input=input).stdout.decode().strip()


def files_under(d):
    out = set()
    for root, _, names in os.walk(d):
        for n in names:
            out.add(os.path.join(root, n))
    return out


class Server:
    """A bare repository pushed into and put back after each push."""

    def __init__(self, path):
        self.path = path
        # No gc after a push: case (c)'s loose objects would be packed away.
        git(path, "config", "receive.autogc", "false")
        git(path, "config", "gc.auto", "0")
        self.refs = git(path, "for-each-ref", "--format=%(objectname) %(refname)",
                        "refs/heads", "refs/tags")
        self.objects = files_under(os.path.join(path, "objects"))

    def restore(self):
        now = files_under(os.path.join(self.path, "objects"))
        for f in now - self.objects:
            os.remove(f)
        lines = []
        current = dict(l.split(" ", 1)[::-1] for l in git(
            self.path, "for-each-ref", "--format=%(objectname) %(refname)",
            "refs/heads", "refs/tags").splitlines() if l)
        before = dict(l.split(" ", 1)[::-1] for l in self.refs.splitlines() if l)
        for ref, oid in before.items():
            if current.get(ref) != oid:
                lines.append(f"update {ref} {oid}")
        for ref in current:
            if ref not in before:
                lines.append(f"delete {ref}")
        if lines:
            git(self.path, "update-ref", "--stdin", input=("\n".join(lines) + "\n").encode())


def write_wrapper(work):
    """Writes `work/rp-wrap.sh`, which runs the receiver and records its user and system CPU
    (microseconds, from wait4; GNU time would round to 10 ms) in $RP_TIME, for [`push`]."""
    wrap = os.path.join(work, "rp-wrap.sh")
    with open(wrap, "w") as f:
        f.write("#!/usr/bin/env python3\n"
                "import os, subprocess, sys\n"
                "p = subprocess.Popen(sys.argv[1:])\n"
                "_, status, ru = os.wait4(p.pid, 0)\n"
                "open(os.environ['RP_TIME'], 'w').write(f'{ru.ru_utime:.6f} {ru.ru_stime:.6f}')\n"
                "sys.exit(os.waitstatus_to_exitcode(status))\n")
    os.chmod(wrap, 0o755)


def push(work, client, server, refspec, receiver):
    """One push; returns the receiver's CPU seconds."""
    timing = os.path.join(work, "rp-time")
    wrap = os.path.join(work, "rp-wrap.sh")
    if os.path.exists(timing):
        os.remove(timing)
    env = dict(os.environ, RP_TIME=timing)
    r = subprocess.run(["git", "-C", client, "push", "-q", "--no-verify",
                        f"--receive-pack={wrap} {receiver}", server.path, refspec],
                       capture_output=True, env=env)
    if r.returncode != 0:
        sys.exit(f"push with {receiver} failed:\n{r.stderr.decode(errors='replace')}")
    user, sys_ = open(timing).read().split()[-2:]
    return float(user) + float(sys_)


def measure(work, client, server, refspec, packd, runs=RUNS):
    """Median receiver CPU of `runs` pushes by git and by packd, alternating, the server put
    back after each."""
    g, p = [], []
    for _ in range(runs):
        g.append(push(work, client, server, refspec, "git-receive-pack"))
        server.restore()
        p.append(push(work, client, server, refspec, f"{packd} receive-pack"))
        server.restore()
    return statistics.median(g), statistics.median(p)


def row(name, g, p, extra=""):
    ratio = p / g if g > 0 else float("nan")
    print(f"   {name:<34} {g:9.4f} {p:9.4f} {ratio:6.2f} {extra}", flush=True)


def fast_import(repo, stream):
    subprocess.run(["git", "-C", repo, "fast-import", "--quiet"], input=stream, check=True)


def new_commits_stream(ref, parent, count, seed, files_per_commit=3):
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        out.append(f"commit {ref}\ncommitter Bench <b@example.com> {1700000000 + i} +0000\n")
        msg = f"bench commit {seed}-{i}\n"
        out.append(f"data {len(msg)}\n{msg}")
        if i == 0:
            out.append(f"from {parent}\n")
        for f in range(files_per_commit):
            body = "".join(f"line {rnd.random()}\n" for _ in range(20))
            out.append(f"M 100644 inline bench/{seed}/{i}-{f}.txt\ndata {len(body)}\n{body}")
        out.append("\n")
    return "".join(out).encode()


def write_loose(objects, count, seed):
    rnd = random.Random(seed)
    for _ in range(count):
        data = f"loose {rnd.random()} {rnd.random()}\n".encode()
        raw = b"blob %d\0" % len(data) + data
        h = hashlib.sha1(raw).hexdigest()
        d = os.path.join(objects, h[:2])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, h[2:]), "wb") as f:
            f.write(zlib.compress(raw))


def case_a(packd, synthetic, work):
    print("== (a) 8 commits onto main, server with 100,000 spike refs and with 10 refs")
    print(f"   {'server':<34} {'git cpu':>9} {'packd':>9} {'ratio':>6}")
    main = git(synthetic, "rev-parse", "refs/heads/main")
    commits = git(synthetic, "rev-list", "--first-parent", "-n", "20000", "main").split()
    results = {}
    for name, spikes in (("10 refs", 9), ("100,000 refs", 100_000)):
        path = os.path.join(work, f"push-a-{spikes}.git")
        if not os.path.exists(os.path.join(path, ".done")):
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run(["git", "clone", "-q", "--bare", "--shared", synthetic, path], check=True)
            git(path, "for-each-ref", "--format=%(refname)")
            rnd = random.Random(7)
            stream = []
            for n in range(spikes):
                base = commits[rnd.randrange(len(commits))]
                msg = f"spike {n}\n"
                stream.append(f"commit refs/pull/{n}/head\ncommitter S <s@example.com> "
                              f"{1700000000 + n} +0000\ndata {len(msg)}\n{msg}from {base}\n\n")
            fast_import(path, "".join(stream).encode())
            # A code host keeps its refs packed (fast-import leaves them loose: 100,000 files),
            # and hides its read-only refs/pull/* from pushes (both servers honour it).
            git(path, "pack-refs", "--all")
            git(path, "config", "transfer.hideRefs", "refs/pull")
            open(os.path.join(path, ".done"), "w").close()
        client = os.path.join(work, "push-a-client.git")
        if not os.path.exists(os.path.join(client, ".done")):
            shutil.rmtree(client, ignore_errors=True)
            subprocess.run(["git", "clone", "-q", "--bare", "--shared", synthetic, client], check=True)
            fast_import(client, new_commits_stream("refs/heads/main", main, 8, 1))
            open(os.path.join(client, ".done"), "w").close()
        server = Server(path)
        g, p = measure(work, client, server, "main:main", packd)
        results[spikes] = p
        row(name, g, p)
    print(f"   packd 100,000 refs / 10 refs: {results[100_000] / max(results[9], 1e-6):.2f}")


def case_b(packd, real, work):
    print("== (b) N days of history pushed (server = the repository N days before HEAD)")
    print(f"   {'N days':<34} {'git cpu':>9} {'packd':>9} {'ratio':>6}")
    head_ref = git(real, "symbolic-ref", "HEAD")
    t = int(git(real, "log", "-1", "--format=%ct", "HEAD"))
    for n in (1, 8, 32, 128):
        have = git(real, "rev-list", "-1", f"--before={t - n * 86400}", "HEAD")
        path = os.path.join(work, f"push-b-{n}.git")
        if not os.path.exists(os.path.join(path, ".done")):
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run(["git", "init", "-q", "--bare", path], check=True)
            pack = subprocess.run(["git", "-C", real, "pack-objects", "--revs", "--stdout", "-q",
                                   "--delta-base-offset"], input=f"{have}\n".encode(),
                                  capture_output=True, check=True).stdout
            # packd's index-pack takes the history in (git's would take minutes).
            setup = os.environ.get("PACKD_SETUP", packd)
            subprocess.run([setup, "index-pack", "--stdin"], input=pack, cwd=path,
                           capture_output=True, check=True)
            git(path, "update-ref", head_ref, have)
            git(path, "symbolic-ref", "HEAD", head_ref)
            open(os.path.join(path, ".done"), "w").close()
        server = Server(path)
        g, p = measure(work, real, server, f"HEAD:{head_ref}", packd)
        row(f"{n} days", g, p)


def case_c(packd, synthetic, work):
    print("== (c) a 1,000-object push, server with 0 and with 256x250 loose objects")
    print(f"   {'server':<34} {'git cpu':>9} {'packd':>9} {'ratio':>6}")
    main = git(synthetic, "rev-parse", "refs/heads/main")
    client = os.path.join(work, "push-c-client.git")
    if not os.path.exists(os.path.join(client, ".done")):
        shutil.rmtree(client, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--bare", "--shared", synthetic, client], check=True)
        # 1 commit, 1 new directory tree... 998 new blobs: 1,000 new objects.
        fast_import(client, new_commits_stream("refs/heads/main", main, 1, 3,
                                               files_per_commit=998))
        open(os.path.join(client, ".done"), "w").close()
    for name, loose in (("0 loose objects", 0), ("256x250 loose objects", 64_000)):
        path = os.path.join(work, f"push-c-{loose}.git")
        if not os.path.exists(os.path.join(path, ".done")):
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run(["git", "clone", "-q", "--bare", "--shared", synthetic, path], check=True)
            write_loose(os.path.join(path, "objects"), loose, 11)
            open(os.path.join(path, ".done"), "w").close()
        server = Server(path)
        g, p = measure(work, client, server, "main:main", packd)
        row(name, g, p)


def main():
    packd, synthetic, real, work = (os.path.abspath(a) if os.sep in a else a
                                    for a in sys.argv[1:5])
    cases = os.environ.get("CASES", "a b c").split()
    os.makedirs(work, exist_ok=True)
    write_wrapper(work)
    version = git(".", "version")
    print(f"packd push benchmark, {version}, median of {RUNS} (receiver CPU, user+sys s)")
    if "a" in cases:
        case_a(packd, synthetic, work)
    if "b" in cases:
        case_b(packd, real, work)
    if "c" in cases:
        case_c(packd, synthetic, work)


if __name__ == "__main__":
    main()
