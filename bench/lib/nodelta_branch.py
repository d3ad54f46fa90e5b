#!/usr/bin/env python3
"""A branch whose objects have no delta a server could reuse, for bench/repack.sh (issue 33,
point 4).

Usage: nodelta_branch.py REPO COMMITS OUT
The last COMMITS first-parent commits of REPO's master, rewritten as a filter that touches
every file would rewrite them: each blob gets one line appended (symlinks and submodules are
kept), so every blob and tree is new, yet each new blob is a small change of one the client
already has. The first rewritten commit's parent is the original master~COMMITS; authors,
committers and messages are kept. `git fast-import` writes the history into a scratch repository
borrowing REPO's objects; its new objects are then packed again by `git pack-objects
--window=0 --no-reuse-delta`: one pack of whole objects, OUT/pack-*.pack and .idx, which a
server copy takes as it is (a fetch of the branch then finds no delta to reuse and must search
for its own). OUT/tip holds the rewritten tip's id. Idempotent when OUT/tip exists.
"""
import os
import shutil
import subprocess
import sys

SUFFIX = b"\n# rewritten by bench/lib/nodelta_branch.py\n"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout


def quote(path):
    """A path as fast-import reads it (C-style quoted when it needs to be)."""
    if any(c in path for c in (b'"', b"\n", b"\\")) or path.startswith(b" "):
        return b'"' + path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") \
            + b'"'
    return path


def main():
    repo, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if os.path.exists(f"{out}/tip"):
        return
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    commits = git(repo, "rev-list", "--first-parent", f"-{count}", "refs/heads/master").split()
    commits = [c.decode() for c in reversed(commits)]
    base = git(repo, "rev-parse", f"{commits[0]}^").decode().strip()
    trees = {}  # commit -> [(mode, id, path)]
    blobs = {}  # blob id -> mark
    for c in commits:
        entries = []
        for line in git(repo, "ls-tree", "-r", "-z", "--full-tree", c).split(b"\0"):
            if not line:
                continue
            meta, path = line.split(b"\t", 1)
            mode, kind, oid = meta.split()
            entries.append((mode, oid, path))
            if kind == b"blob" and mode != b"120000" and oid not in blobs:
                blobs[oid] = len(blobs) + 1
        trees[c] = entries
    scratch = f"{out}/scratch.git"
    subprocess.run(["git", "init", "-q", "--bare", scratch], check=True)
    with open(f"{scratch}/objects/info/alternates", "w") as f:
        f.write(os.path.abspath(f"{repo}/objects") + "\n")
    fi = subprocess.Popen(["git", "-C", scratch, "fast-import", "--quiet"], stdin=subprocess.PIPE)
    cat = subprocess.Popen(["git", "-C", repo, "cat-file", "--batch"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
    w = fi.stdin
    for oid, mark in blobs.items():
        cat.stdin.write(oid + b"\n")
        cat.stdin.flush()
        size = int(cat.stdout.readline().split()[2])
        data = cat.stdout.read(size) + SUFFIX
        cat.stdout.read(1)
        w.write(b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n")
    cat.stdin.close()
    cat.wait()
    parent = base.encode()
    for i, c in enumerate(commits):
        raw = git(repo, "cat-file", "commit", c)
        header, message = raw.split(b"\n\n", 1)
        who = {}
        for line in header.split(b"\n"):
            key, _, value = line.partition(b" ")
            if key in (b"author", b"committer"):
                who[key] = value
        mark = len(blobs) + 1 + i
        w.write(b"commit refs/heads/nodelta\nmark :%d\n" % mark)
        w.write(b"author " + who[b"author"] + b"\ncommitter " + who[b"committer"] + b"\n")
        w.write(b"data %d\n" % len(message) + message + b"\n")
        w.write(b"from " + parent + b"\ndeleteall\n")
        for mode, oid, path in trees[c]:
            ref = b":%d" % blobs[oid] if oid in blobs else oid
            w.write(b"M " + mode + b" " + ref + b" " + quote(path) + b"\n")
        w.write(b"\n")
        parent = b":%d" % mark
    w.close()
    if fi.wait() != 0:
        sys.exit("git fast-import failed")
    tip = git(scratch, "rev-parse", "refs/heads/nodelta").decode().strip()
    heads = git(repo, "for-each-ref", "--format=^%(objectname)", "refs/heads")
    subprocess.run(["git", "-C", scratch, "-c", "pack.window=0", "pack-objects", "--revs", "-q",
                    "--window=0", "--no-reuse-delta", "--delta-base-offset",
                    os.path.abspath(f"{out}/pack")], input=tip.encode() + b"\n" + heads,
                   check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(scratch)
    with open(f"{out}/tip", "w") as f:
        f.write(tip + "\n")
    print(f"nodelta: {len(commits)} commits rewritten, {len(blobs)} blobs, tip {tip}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
