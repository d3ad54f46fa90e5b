#!/usr/bin/env python3
"""Prints the refs under PREFIX of REPO that reach objects REPO lacks, one per line.

A fetched snapshot of git/git lacks 25 objects, reached only from 12 of its 3,277 refs/pull/*
refs; `git repack -adb` refuses to write bitmaps while they are there. Testing each ref alone
costs a walk per ref, so the refs are tested 200 at a time and a group that reaches a missing
object is halved until the culprits are single refs (a few dozen walks in all).

Usage: broken_refs.py REPO [PREFIX]      (PREFIX defaults to refs/pull/)
"""
import subprocess
import sys


def reaches_missing(repo, refs):
    """Whether any of `refs` reaches an object missing from `repo` (beyond branches and tags)."""
    r = subprocess.run(["git", "-C", repo, "rev-list", "--objects", "--missing=print", "--stdin",
                        "--not", "--branches", "--tags"],
                       input=("\n".join(refs) + "\n").encode(), capture_output=True)
    if r.returncode != 0:
        sys.exit(f"git rev-list failed in {repo}: {r.stderr.decode(errors='replace')}")
    return any(line.startswith(b"?") for line in r.stdout.splitlines())


def culprits(repo, refs):
    if not reaches_missing(repo, refs):
        return []
    if len(refs) == 1:
        return refs
    half = len(refs) // 2
    return culprits(repo, refs[:half]) + culprits(repo, refs[half:])


def main():
    repo = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else "refs/pull/"
    refs = subprocess.run(["git", "-C", repo, "for-each-ref", "--format=%(refname)", prefix],
                          capture_output=True, check=True, text=True).stdout.split()
    for start in range(0, len(refs), 200):
        for ref in culprits(repo, refs[start:start + 200]):
            print(ref, flush=True)


if __name__ == "__main__":
    main()
