#!/usr/bin/env python3
"""Two packd builds and git, side by side on one repository, alternating: for comparing a change
with what it replaces, each as a ratio against git measured in the same run.

    bench/ab.py OLD_PACKD NEW_PACKD REPO            # fetches N days behind, a process each
    DAYS="1 8 32" RUNS=15 bench/ab.py OLD NEW REPO
    CLONE=heads RUNS=4 bench/ab.py OLD NEW REPO     # clones instead: branches and tags
    CLONE=all RUNS=4 bench/ab.py OLD NEW REPO       # clones instead: every ref (mirror)
    CLONE=all CACHE=1 PUSHED=1 bench/ab.py OLD NEW REPO
                                 # with the clone cache, on a copy with one pushed commit
    CLONE=all CONCURRENT=4 bench/ab.py OLD NEW REPO  # each clone: four at once

Fetches: `git upload-pack --stateless-rpc` and each build's `packd upload-pack --stateless-rpc`,
one process per request (as over ssh), HEAD wanted and the newest commit N days older had;
median CPU of RUNS processes each. Clones: one fresh `packd serve` per run for each build
(clone cache off), its CPU for its first clone and for a second one, against `git pack-objects`
for the same wants; medians of RUNS. Pack sizes are printed: a change may choose other deltas.
Clones remove REPO's `packd-cache/` (kept walks, clone cache) before each server starts, so
that each starts as after a repack. With CACHE=1 the servers keep the clone cache: three clones
each, the first filling the cache, and the bytes the cache then holds. With PUSHED=1 the clones
are of a hard-linked copy of REPO with one new loose commit on HEAD's branch, as a push leaves.
With CONCURRENT=N each clone is N identical clones sent at once (a fleet of mirrors after a
repack): the server's CPU for all N, and its peak resident memory over the run.
"""
import os
import shutil
import statistics
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import fetch_bench as fb  # noqa: E402


def fetches(old, new, repo, tmp, runs):
    head = fb.git(repo, "rev-parse", "HEAD")
    newest = int(fb.git(repo, "log", "-1", "--format=%ct", "HEAD"))
    print(f"{'N':>4} {'git cpu':>9} {'old cpu':>9} {'ratio':>6} {'new cpu':>9} {'ratio':>6}"
          f" {'old bytes':>10} {'new bytes':>10}")
    for n in [int(d) for d in os.environ.get("DAYS", "1 8 64").split()]:
        have = fb.git(repo, "rev-list", "-1", f"--before={newest - n * 86400}", "HEAD")
        cmds = {"git": ["git", "upload-pack"], "old": [old, "upload-pack"],
                "new": [new, "upload-pack"]}
        cpu = {k: [] for k in cmds}
        for _ in range(runs):
            for k, cmd in cmds.items():
                cpu[k].append(fb.stateless_fetch(cmd, repo, head, have, f"{tmp}/ab.{k}"))
        med = {k: statistics.median(v) for k, v in cpu.items()}
        size = {k: os.path.getsize(f"{tmp}/ab.{k}") for k in ("old", "new")}
        print(f"{n:>4} {med['git']:>9.4f} {med['old']:>9.4f} {med['old'] / med['git']:>6.2f}"
              f" {med['new']:>9.4f} {med['new'] / med['git']:>6.2f}"
              f" {size['old']:>10} {size['new']:>10}", flush=True)


def pushed_copy(repo, tmp):
    """A hard-linked copy of `repo` in `tmp` with one new loose commit on HEAD's branch."""
    copy = f"{tmp}/pushed.git"
    fb.linked_copy(repo, copy)
    shutil.rmtree(f"{copy}/packd-cache", ignore_errors=True)
    fb.push_commit(copy, "pushed")
    return copy


def clones(old, new, repo, tmp, runs, which):
    if os.environ.get("PUSHED") == "1":
        repo = pushed_copy(repo, tmp)
    cache = os.environ.get("CACHE") == "1"
    args = ["--format=%(objectname)"] + (["refs/heads", "refs/tags"] if which == "heads" else [])
    wants = sorted(set(fb.git(repo, "for-each-ref", *args).split()))
    revs = "".join(w + "\n" for w in wants).encode()
    git_cpu = []
    nth = ("first", "second", "third") if cache else ("first", "second")
    cpu = {k: tuple([] for _ in nth) for k in ("old", "new")}
    together = int(os.environ.get("CONCURRENT", "1"))
    peak = {k: 0.0 for k in ("old", "new")}
    held = {}
    for _ in range(runs):
        git_cpu.append(fb.git_pack_objects(repo, revs, f"{tmp}/ab.git.pack", include_tag=True)[0])
        for k, packd in (("old", old), ("new", new)):
            shutil.rmtree(f"{repo}/packd-cache", ignore_errors=True)
            server = fb.Packd(packd, os.path.dirname(repo),
                              [] if cache else ["--clone-cache-bytes", "0"])
            for clone in cpu[k]:
                before = server.cpu()
                sizes = [0] * together
                errors = [None] * together

                def fetch(i):
                    # fetch_bench exits on a bad answer: in a thread that would go unseen.
                    try:
                        sizes[i] = server.fetch(os.path.basename(repo), wants, [],
                                                f"{tmp}/ab.{i}.pack", include_tag=True)
                    except BaseException as e:  # noqa: B036 (SystemExit included)
                        errors[i] = e
                fetches_at_once = [threading.Thread(target=fetch, args=(i,))
                                   for i in range(together)]
                for f in fetches_at_once:
                    f.start()
                for f in fetches_at_once:
                    f.join()
                clone.append(server.cpu() - before)
                failed = [str(e) for e in errors if e is not None]
                if failed:
                    sys.exit(f"{k}: a clone failed: {'; '.join(failed)}")
                if len(set(sizes)) != 1:
                    sys.exit(f"{k}: the clones sent at once differ: {sizes} bytes")
            peak[k] = max(peak[k], server.hwm())
            server.stop()
            held[k] = fb.clone_cache_bytes(repo)
    shutil.rmtree(f"{repo}/packd-cache", ignore_errors=True)
    for pack in ["ab.git.pack"] + [f"ab.{i}.pack" for i in range(together)]:
        if os.path.exists(f"{tmp}/{pack}"):
            os.unlink(f"{tmp}/{pack}")
    if os.environ.get("PUSHED") == "1":
        shutil.rmtree(repo, ignore_errors=True)
    g = statistics.median(git_cpu) * together
    print(f"git pack-objects {g:.3f} s" + (f" (one clone's, times {together})" if together > 1 else ""))
    for k in ("old", "new"):
        name_of = (lambda name: f"{name} {together} clones") if together > 1 else (lambda name: f"{name} clone")
        line = ", ".join(f"{name_of(name)} {m:.3f} s ({m / g:.2f})"
                         for name, m in zip(nth, (statistics.median(v) for v in cpu[k])))
        line += f"; peak {peak[k]:.1f} MB"
        if cache:
            line += f"; the cache holds {held[k]} bytes"
        print(f"{k}: {line}", flush=True)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    old, new, repo = (os.path.abspath(a) for a in sys.argv[1:])
    tmp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ab-tmp")
    os.makedirs(tmp, exist_ok=True)
    runs = int(os.environ.get("RUNS", "7"))
    which = os.environ.get("CLONE")
    if which:
        clones(old, new, repo, tmp, runs, which)
    else:
        fetches(old, new, repo, tmp, runs)


if __name__ == "__main__":
    main()
