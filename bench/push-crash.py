#!/usr/bin/env python3
"""Crash trials of packd receive-pack (issue 31): SIGKILL at a random instant of a push of
200 refs, then count how the repository was left.

Usage: bench/push-crash.py [TRIALS]     (default 100 atomic + 100 non-atomic)
       PACKD=path/to/packd (default: the release build if present, else the debug build)

The repository (bench/data/push-crash/template.git) has commits A and B (B's parent A) and
refs r000..r179 at A, packed, r150..r179 loose too. The push (no objects: the ref phase is
most of its time) moves r000..r159 to B, deletes r160..r179 and creates n000..n019 at B.
Its uninterrupted duration T is measured first (median of 3); each trial copies the template,
starts `packd receive-pack` with the whole request on stdin, kills it after a delay drawn
uniformly from [0, T), and then:
  seen    the refs as git reads them at once: each ref must be old or new ("torn" if not)
  after   the refs after the next receiver's advertisement (which recovers a dead
          transaction): old (all), new (all), mixed (some of each: only a non-atomic push may)
  locks   trials that left lock files (*.lock under refs/, packed-refs.lock) right after the
          kill: what the next push must cope with
  blocked the next push (moving every ref from what is there to the plan's end) was refused
  fsck    trials after which `git fsck --strict` failed
Prints one line of counts per mode. Run by hand, never in CI.
"""
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data", "push-crash")
ZERO = "0" * 40
UPDATED, DELETED, CREATED = 160, 20, 20


def packd_binary():
    if os.environ.get("PACKD"):
        return os.environ["PACKD"]
    triple = subprocess.run(["rustc", "-vV"], capture_output=True, text=True).stdout
    host = next(l.split()[1] for l in triple.splitlines() if l.startswith("host:"))
    for profile in ("release", "debug"):
        path = os.path.join(ROOT, "target", host, profile, "packd")
        if os.path.exists(path):
            return path
    sys.exit("no packd binary: cargo build -p packd, or set PACKD")


def git(repo, *args, stdin=None):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="a",
               GIT_AUTHOR_EMAIL="a@b", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b")
    out = subprocess.run(["git", "-C", repo, *args], input=stdin, capture_output=True,
                         env=env, check=True)
    return out.stdout.decode().strip()


def template():
    repo = os.path.join(DATA, "template.git")
    shutil.rmtree(DATA, ignore_errors=True)
    os.makedirs(DATA)
    git(DATA, "init", "-q", "--bare", repo)
    tree = git(repo, "mktree", stdin=b"")
    a = git(repo, "commit-tree", tree, "-m", "a")
    b = git(repo, "commit-tree", tree, "-p", a, "-m", "b")
    old, new = {}, {}
    script = ""
    for i in range(UPDATED + DELETED):
        name = f"refs/heads/r{i:03}"
        script += f"create {name} {a}\n"
        old[name] = a
        new[name] = b if i < UPDATED else None
    for i in range(CREATED):
        name = f"refs/heads/n{i:03}"
        old[name] = None
        new[name] = b
    git(repo, "update-ref", "--stdin", stdin=script.encode())
    git(repo, "pack-refs", "--all")
    for i in range(150, UPDATED + DELETED):
        with open(os.path.join(repo, f"refs/heads/r{i:03}"), "w") as f:
            f.write(a + "\n")
    return repo, old, new


def pkt(payload):
    return b"%04x" % (len(payload) + 4) + payload


def empty_pack():
    body = b"PACK" + (2).to_bytes(4, "big") + (0).to_bytes(4, "big")
    return body + hashlib.sha1(body).digest()


def request(current, target, atomic):
    caps = b"report-status" + (b" atomic" if atomic else b"")
    out, first, any_new = b"", True, False
    for name in sorted(target):
        cur, new = current.get(name), target[name]
        if cur == new:
            continue
        any_new |= new is not None
        line = f"{cur or ZERO} {new or ZERO} {name}".encode()
        if first:
            line += b"\0" + caps
            first = False
        out += pkt(line + b"\n")
    out += b"0000"
    if any_new:
        out += empty_pack()
    return out


def refs_of(repo):
    text = git(repo, "for-each-ref", "--format=%(objectname) %(refname)")
    return {l.split(" ", 1)[1]: l.split(" ", 1)[0] for l in text.splitlines() if l}


def classify(old, new, refs):
    n_old = n_new = 0
    for name in old:
        now = refs.get(name)
        is_old, is_new = now == old[name], now == new[name]
        if not is_old and not is_new:
            return "torn"
        n_old += is_old and not is_new
        n_new += is_new and not is_old
    if n_new == 0:
        return "old"
    if n_old == 0:
        return "new"
    return "mixed"


def receive(packd, repo, data, kill_after=None):
    p = subprocess.Popen([packd, "receive-pack", repo], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE if kill_after is None else subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    if kill_after is None:
        out, _ = p.communicate(data)
        return out.decode(errors="replace")
    p.stdin.write(data)
    p.stdin.close()
    time.sleep(kill_after)
    p.kill()
    p.wait()
    return ""


def locks_left(repo):
    found = os.path.exists(os.path.join(repo, "packed-refs.lock"))
    for d, _, files in os.walk(os.path.join(repo, "refs")):
        found |= any(f.endswith(".lock") for f in files)
    return found


def run_mode(packd, tmpl, old, new, atomic, trials, rng):
    data = request(old, new, atomic)
    times = []
    for i in range(3):
        repo = os.path.join(DATA, f"full-{i}.git")
        shutil.copytree(tmpl, repo, symlinks=True)
        start = time.monotonic()
        receive(packd, repo, data)
        times.append(time.monotonic() - start)
        assert classify(old, new, refs_of(repo)) == "new", "uninterrupted push failed"
        shutil.rmtree(repo)
    duration = statistics.median(times)
    counts = dict(old=0, new=0, mixed=0, torn=0, locks=0, blocked=0, fsck=0)
    for t in range(trials):
        repo = os.path.join(DATA, "trial.git")
        shutil.copytree(tmpl, repo, symlinks=True)
        receive(packd, repo, data, kill_after=rng.uniform(0, duration))
        seen = classify(old, new, refs_of(repo))
        counts["locks"] += locks_left(repo)
        # The next receiver's advertisement (it recovers a dead transaction).
        subprocess.run([packd, "receive-pack", "--advertise-refs", repo],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = refs_of(repo)
        state = "torn" if seen == "torn" else classify(old, new, after)
        counts[state] += 1
        if subprocess.run(["git", "-C", repo, "fsck", "--strict", "--no-progress",
                           "--no-dangling"], capture_output=True).returncode:
            counts["fsck"] += 1
        report = receive(packd, repo, request(after, new, False))
        if "ng refs/" in report or classify(old, new, refs_of(repo)) != "new":
            counts["blocked"] += 1
        shutil.rmtree(repo)
    mode = "atomic    " if atomic else "non-atomic"
    print(f"{mode} push of {len(new)} refs, {duration * 1000:.0f} ms uninterrupted, "
          f"{trials} kills: " + " ".join(f"{k} {v}" for k, v in counts.items()), flush=True)


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    packd = packd_binary()
    seed = int(os.environ.get("SEED", time.time_ns()))
    print(f"packd {packd}, seed {seed}", flush=True)
    rng = random.Random(seed)
    tmpl, old, new = template()
    for atomic in (True, False):
        run_mode(packd, tmpl, old, new, atomic, trials, rng)


if __name__ == "__main__":
    main()
