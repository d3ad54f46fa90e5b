#!/usr/bin/env python3
"""Push benchmark with the fsck checks on (issue 31): packd receive-pack against git
receive-pack with receive.fsckObjects=true, on the same pushes.

Called by bench/push-fsck.sh. Both servers' repositories have receive.fsckObjects=true in their
configuration (packd checks by default; git only so). Pushes, made by the stock git client
through push_bench's wrapper (receiver CPU, user+sys from wait4, children included):
  - 1, 8, 32 and 128 days of a real repository's history (server = the repository as of N
    days before HEAD, client = the whole repository), as push.sh's case (b);
  - a full-clone pack: HEAD's whole history into an empty repository.
git and packd runs alternate; the server is put back after each run. Median of RUNS (the
full pack: RUNS_FULL). Target: packd <= 0.5x git's CPU.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from push_bench import Server, git, measure, row, write_wrapper  # noqa: E402

RUNS = int(os.environ.get("RUNS", "5"))
RUNS_FULL = int(os.environ.get("RUNS_FULL", "1"))


def server_at(real, work, name, have, head_ref, packd):
    """A bare repository holding `have`'s history (none when `have` is None)."""
    path = os.path.join(work, f"push-fsck-{name}.git")
    if not os.path.exists(os.path.join(path, ".done")):
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run(["git", "init", "-q", "--bare", path], check=True)
        if have:
            pack = subprocess.run(["git", "-C", real, "pack-objects", "--revs", "--stdout", "-q",
                                   "--delta-base-offset"], input=f"{have}\n".encode(),
                                  capture_output=True, check=True).stdout
            setup = os.environ.get("PACKD_SETUP", packd)
            subprocess.run([setup, "index-pack", "--stdin"], input=pack, cwd=path,
                           capture_output=True, check=True)
            git(path, "update-ref", head_ref, have)
        git(path, "symbolic-ref", "HEAD", head_ref)
        git(path, "config", "receive.fsckObjects", "true")
        open(os.path.join(path, ".done"), "w").close()
    return Server(path)


def main():
    packd, real, work = (os.path.abspath(a) if os.sep in a else a for a in sys.argv[1:4])
    os.makedirs(work, exist_ok=True)
    write_wrapper(work)
    print(f"packd push benchmark, fsck on, {git('.', 'version')}, median of {RUNS} "
          f"({RUNS_FULL} for the full pack), receiver CPU user+sys s")
    print(f"   {'push':<34} {'git cpu':>9} {'packd':>9} {'ratio':>6}")
    head_ref = git(real, "symbolic-ref", "HEAD")
    t = int(git(real, "log", "-1", "--format=%ct", "HEAD"))
    cases = os.environ.get("CASES", "1 8 32 128 full").split()
    for case in cases:
        if case == "full":
            server = server_at(real, work, "full", None, head_ref, packd)
            runs = RUNS_FULL
            objects = git(real, "rev-list", "--objects", "--count", "HEAD")
            label = f"full pack ({objects} objects)"
        else:
            n = int(case)
            have = git(real, "rev-list", "-1", f"--before={t - n * 86400}", "HEAD")
            server = server_at(real, work, f"{n}", have, head_ref, packd)
            runs = RUNS
            label = f"{n} days"
        g, p = measure(work, real, server, f"HEAD:{head_ref}", packd, runs)
        row(label, g, p)


if __name__ == "__main__":
    main()
