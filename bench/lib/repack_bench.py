#!/usr/bin/env python3
"""The served parts of bench/repack.sh (issue 33, points 3 and 4). Called by it:

  repack_bench.py pushes PACKD BASE STEPS START WORK
  repack_bench.py nodelta PACKD BASE NODELTA_DIR WORK

pushes: STEPS (bench/lib/day_steps.py) lists the states of the branches, state 0 being START's
(a copy of BASE holding exactly that state, repacked). Each state after it is pushed, the refs
that moved (`+ID:REF`, with --follow-tags for the tags of the new history), by the stock git
client from BASE over HTTP into a hard-linked copy of START:
  - git: `git http-backend` (bench/lib/http_backend.py), receive.autogc off and instead
    `git gc --auto` run after each push (what receive-pack runs; detaching off), its CPU summed:
    git's maintenance;
  - packd: `packd serve --allow-push` with its maintenance after pushes (on by default), the
    server's log at PACKD_LOG=warn,packd_maint=info; the maintenance cost is the sum of the
    `cpu_ms` fields of its `packd_maint` lines, counted by `kind`.
packd's wait goes past `packd serve`'s settle time (SETTLE), for the settled run that appends
the pushes' objects to the bitmapped pack. Then, on that copy and on a hard-linked copy of it
fully repacked (`git repack -adb`, `packd maintenance run --full`, whose CPU is "one full
repack"; `packd repack -adb` would append to the bitmapped pack instead), the server CPU of a fetch one day behind (wants:
the last state's tips, haves: the one before, include-tag) and of a mirror clone (every ref, no
have): git's `git pack-objects --revs --thin --use-bitmap-index --delta-base-offset` as
upload-pack runs it, a process each (median of FETCH_RUNS and CLONE_RUNS); packd's a fresh
`packd serve --clone-cache-bytes 0` per copy, one request first to open the repository, then
the CPU of each request from the server's CPU clock (median). Targets (packd): pushed copy at most
1.2x the repacked one for both, maintenance at most 0.1x one full repack. git's own ratios are
printed for reference.

nodelta: BASE with the pack of NODELTA_DIR (whole objects only) and its branch refs/heads/nodelta
added; a client holding BASE's history (haves: BASE's branch tips) fetches that branch (v2,
thin-pack, ofs-delta): git upload-pack --stateless-rpc, as it is and with pack.useBitmaps=false,
against packd serve; bytes of the pack each sends, CPU of each (median of FETCH_RUNS). With
bitmaps git 2.39 makes no delta search for the objects its bitmap walk found outside the
bitmapped pack and sends them as stored (whole); without, it searches them against the trees
at the client's edge (--thin): the figure packd must match (target <= 1.1x). Every pack is
checked by `git index-pack --stdin --fix-thin` in a copy of BASE, which must then hold the
branch's whole history.

With PACKD_SIDE=0 only git's side runs.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fetch_bench import (Packd, fetch_body, git, git_pack_objects, linked_copy,  # noqa: E402
                         run_rusage)

FETCH_RUNS = int(os.environ.get("FETCH_RUNS", "5"))
CLONE_RUNS = int(os.environ.get("CLONE_RUNS", "3"))
PACKD_SIDE = os.environ.get("PACKD_SIDE", "1") == "1"
PUSH_SIDES = os.environ.get("PUSH_SIDES", "git packd").split()
# packd serve's --maintenance-settle default (seconds): the pushes part waits past it.
SETTLE = 30
HERE = os.path.dirname(os.path.abspath(__file__))


def read_states(path):
    """[{ref: id}] of the steps file, state 0 first."""
    states = []
    for line in open(path):
        step, ref, oid = line.split()
        step = int(step)
        while len(states) <= step:
            states.append({})
        states[step][ref] = oid
    return states


def push_all(client, url, states, after_push=None):
    """Pushes every state after the first into `url`; returns the pushes' wall seconds and
    calls `after_push(step)` after each."""
    total = 0.0
    for step in range(1, len(states)):
        specs = [f"+{oid}:{ref}" for ref, oid in sorted(states[step].items())
                 if states[step - 1].get(ref) != oid]
        start = time.monotonic()
        proc = subprocess.run(["git", "-C", client, "push", "--quiet", "--follow-tags", url,
                               *specs], capture_output=True, text=True)
        total += time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"push of step {step} failed: {proc.stderr}")
        if after_push:
            after_push(step)
    return total


def check_refs(repo, state, who):
    """Exits unless `repo`'s branches are `state`'s."""
    got = dict(line.split()[::-1] for line in git(
        repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads").splitlines())
    if got != state:
        sys.exit(f"{who}: after the pushes the branches are {got}, not {state}")


def shape(repo):
    """"N packs, M loose" of a repository."""
    packs = len([f for f in os.listdir(f"{repo}/objects/pack") if f.endswith(".pack")])
    loose = sum(len(os.listdir(f"{repo}/objects/{d}")) for d in os.listdir(f"{repo}/objects")
                if len(d) == 2)
    return f"{packs} packs, {loose} loose"


def requests(repo, states):
    """(fetch revs, fetch wants, haves), (clone revs, clone wants) for `repo`'s final state."""
    last, before = states[-1], states[-2]
    wants = sorted(set(last.values()))
    haves = sorted(set(before.values()))
    fetch_revs = "".join(f"{w}\n" for w in wants) + "".join(f"^{h}\n" for h in haves)
    every = sorted(set(git(repo, "for-each-ref", "--format=%(objectname)").split()))
    return (fetch_revs.encode(), wants, haves), ("".join(f"{w}\n" for w in every).encode(),
                                                 every)


def git_costs(repo, reqs, tmp):
    """(fetch cpu, fetch bytes, clone cpu, clone bytes) of git pack-objects on `repo`."""
    (fetch_revs, _, _), (clone_revs, _) = reqs
    out = f"{tmp}/git.pack"
    fetch = statistics.median(git_pack_objects(repo, fetch_revs, out, include_tag=True)[0]
                              for _ in range(FETCH_RUNS))
    fetch_bytes = os.path.getsize(out)
    clone = statistics.median(git_pack_objects(repo, clone_revs, out, include_tag=True)[0]
                              for _ in range(CLONE_RUNS))
    clone_bytes = os.path.getsize(out)
    os.unlink(out)
    return fetch, fetch_bytes, clone, clone_bytes


def packd_costs(packd, repo, reqs, tmp):
    """The same from a fresh `packd serve` over `repo` (one fetch first, not counted)."""
    (_, wants, haves), (_, every) = reqs
    root, name = os.path.dirname(repo), os.path.basename(repo)
    server = Packd(packd, root, ["--clone-cache-bytes", "0"])
    out = f"{tmp}/packd.pack"
    try:
        server.fetch(name, wants, haves, out, include_tag=True)

        def cost(w, h, n):
            cpus = []
            for _ in range(n):
                before = server.cpu()
                size = server.fetch(name, w, h, out, include_tag=True)
                cpus.append(server.cpu() - before)
            return statistics.median(cpus), size
        fetch, fetch_bytes = cost(wants, haves, FETCH_RUNS)
        clone, clone_bytes = cost(every, [], CLONE_RUNS)
    finally:
        server.stop()
    os.unlink(out)
    return fetch, fetch_bytes, clone, clone_bytes


def report_costs(side, pushed, repacked, maint, full, maint_note):
    print(f"   {side:6} {'':22} {'pushed':>9} {'repacked':>9} {'ratio':>6}")
    print(f"   {side:6} {'fetch 1 day, CPU s':22} {pushed[0]:9.4f} {repacked[0]:9.4f} "
          f"{pushed[0] / repacked[0]:6.2f}   bytes {pushed[1]} / {repacked[1]}")
    print(f"   {side:6} {'mirror clone, CPU s':22} {pushed[2]:9.3f} {repacked[2]:9.3f} "
          f"{pushed[2] / repacked[2]:6.2f}   bytes {pushed[3]} / {repacked[3]}")
    print(f"   {side:6} {'maintenance, CPU s':22} {maint:9.3f} {full:9.3f} "
          f"{maint / full:6.3f}   ({maint_note}; against one full repack -adb)", flush=True)


def has_children(pid):
    """Whether process `pid` has a child process running (a maintenance run may be one)."""
    tasks = f"/proc/{pid}/task"
    return any(open(f"{tasks}/{t}/children").read().strip() for t in os.listdir(tasks))


def wait_idle(server, quiet=3.0, limit=600):
    """Waits until the server has used no CPU and had no child process for `quiet` seconds (its
    maintenance is done)."""
    last, still, start = server.cpu(), time.monotonic(), time.monotonic()
    while time.monotonic() - start < limit:
        time.sleep(0.5)
        now = server.cpu()
        if now - last > 0.005 or has_children(server.proc.pid):
            last, still = now, time.monotonic()
        elif time.monotonic() - still >= quiet:
            return
    print(f"   (the server was still busy {limit} s after the last push)")


FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def maint_log(path):
    """(sum of cpu_ms / 1000, sum of wall_ms / 1000, {kind: count}) of the `packd_maint` lines
    (tracing's `target: message field=value ...`) of a server log."""
    cpu, wall, kinds = 0, 0, {}
    for line in open(path, errors="replace"):
        if "packd_maint" not in line:
            continue
        line = ANSI.sub("", line)
        fields = {k: v.strip('"') for k, v in FIELD.findall(line)}
        if "cpu_ms" not in fields:
            continue
        cpu += int(float(fields["cpu_ms"]))
        wall += int(float(fields.get("wall_ms", "0")))
        kind = fields.get("kind", "?")
        kinds[kind] = kinds.get(kind, 0) + 1
    return cpu / 1000, wall / 1000, kinds


def pushes(packd, base, steps_file, start_repo, work):
    states = read_states(steps_file)
    reqs = None
    # git's side (PUSH_SIDES="packd" leaves it out).
    if "git" in PUSH_SIDES:
        t0 = time.monotonic()
        root = f"{work}/git-root"
        os.makedirs(root)
        srv = f"{root}/repo.git"
        linked_copy(start_repo, srv)
        for key, value in (("http.receivepack", "true"), ("receive.autogc", "false"),
                           ("gc.autoDetach", "false")):
            git(srv, "config", key, value)
        port_file = f"{work}/git-port"
        backend = subprocess.Popen([sys.executable, f"{HERE}/http_backend.py", root, port_file])
        while not os.path.exists(port_file):
            time.sleep(0.05)
        url = f"http://127.0.0.1:{open(port_file).read()}/repo.git"
        gc = []

        def gc_auto(step):
            cpu, _, _, code = run_rusage(["git", "-C", srv, "gc", "--auto", "--quiet"])
            if code != 0:
                sys.exit("git gc --auto failed")
            gc.append(cpu)
        wall = push_all(base, url, states, gc_auto)
        backend.terminate()
        backend.wait()
        check_refs(srv, states[-1], "git")
        print(f"   git    {len(states) - 1} pushes: {wall:.1f} s of push wall, then {shape(srv)};"
              f" gc --auto took {sum(gc):.2f} s CPU ({sum(1 for c in gc if c > 1)} runs over 1 s)",
              flush=True)
        reqs = requests(srv, states)
        pushed = git_costs(srv, reqs, work)
        print(f"   git    pushed copy: fetch 1 day {pushed[0]:.4f} s CPU, mirror clone "
              f"{pushed[2]:.3f} s CPU", flush=True)
        full_copy = f"{work}/git-repacked.git"
        linked_copy(srv, full_copy)
        full, _, full_wall, code = run_rusage(["git", "-C", full_copy, "repack", "-adb", "-q"])
        if code != 0:
            sys.exit("git repack -adb failed")
        repacked = git_costs(full_copy, reqs, work)
        report_costs("git", pushed, repacked, sum(gc), full, f"gc --auto after each push, "
                     f"full repack {full_wall:.1f} s wall")
        print(f"   git's side took {time.monotonic() - t0:.0f} s", flush=True)
        shutil.rmtree(root)
        shutil.rmtree(full_copy)
    if not PACKD_SIDE or "packd" not in PUSH_SIDES:
        print("   packd side skipped" + ("" if PACKD_SIDE else " (no `packd repack`)"))
        return
    t0 = time.monotonic()
    root = f"{work}/packd-root"
    os.makedirs(root)
    srv = f"{root}/repo.git"
    linked_copy(start_repo, srv)
    log_path = f"{work}/packd-serve.log"
    env = dict(os.environ, PACKD_LOG="warn,packd_maint=info")
    with open(log_path, "w") as log:
        server = Packd(packd, root, ["--allow-push", "--clone-cache-bytes", "0"], log=log,
                       env=env)
        try:
            before = server.cpu()
            wall = push_all(base, f"http://127.0.0.1:{server.port}/repo.git", states)
            # Past the settle time (packd serve's default, 30 s) too: the settled run that
            # appends the pushes' objects to the bitmapped pack is part of the maintenance.
            wait_idle(server, quiet=SETTLE + 3)
            # Every thread of the server: the pushes and their maintenance.
            served = server.cpu() - before
        finally:
            server.stop()
    check_refs(srv, states[-1], "packd")
    reqs = reqs or requests(srv, states)
    maint, maint_wall, kinds = maint_log(log_path)
    kept = os.path.join(os.path.dirname(os.path.abspath(work)), "repack-last-serve.log")
    shutil.copy(log_path, kept)
    if not kinds:
        print(f"   packd: NO packd_maint line with cpu_ms in its log (kept as {kept})")
    print(f"   packd  {len(states) - 1} pushes: {wall:.1f} s of push wall, then {shape(srv)};"
          f" maintenance runs {kinds}, {maint_wall:.2f} s wall in all; the server's CPU over"
          f" pushes and maintenance {served:.2f} s", flush=True)
    pushed = packd_costs(packd, srv, reqs, work)
    print(f"   packd  pushed copy: fetch 1 day {pushed[0]:.4f} s CPU, mirror clone "
          f"{pushed[2]:.3f} s CPU", flush=True)
    full_copy = f"{root}/repacked.git"
    linked_copy(srv, full_copy)
    # A full repack as `packd maintenance run --full` runs it (every object rewritten, the
    # clone's first): `packd repack -adb` would append to the bitmapped pack instead.
    full, _, full_wall, code = run_rusage([packd, "-C", full_copy, "maintenance", "run",
                                           "--full", "--quiet"])
    if code != 0:
        sys.exit("packd maintenance run --full failed")
    repacked = packd_costs(packd, full_copy, reqs, work)
    report_costs("packd", pushed, repacked, maint, full, f"sum of cpu_ms, maintenance run --full "
                 f"{full_wall:.1f} s wall")
    print(f"   targets packd: pushed/repacked <= 1.2 for fetch and clone, maintenance <= 0.1;"
          f" packd's side took {time.monotonic() - t0:.0f} s")
    shutil.rmtree(root)


def pack_of(answer):
    """The pack bytes of a protocol v2 fetch answer (side band 1 of its packfile section)."""
    pack, i, in_pack = bytearray(), 0, False
    while i + 4 <= len(answer):
        n = int(answer[i:i + 4], 16)
        if n < 4:
            i += 4
            if n == 0 and in_pack:
                break
            continue
        data = answer[i + 4:i + n]
        i += n
        if not in_pack:
            in_pack = data == b"packfile\n"
        elif data[0] == 1:
            pack += data[1:]
        elif data[0] == 3:
            sys.exit(f"fetch failed: {data[1:]!r}")
    return bytes(pack)


def check_pack(client, pack_path, tip, haves, who):
    """Takes the pack into `client` and checks it now has the branch's whole history; removes
    the pack again."""
    before = set(os.listdir(f"{client}/objects/pack"))
    with open(pack_path, "rb") as f:
        subprocess.run(["git", "-C", client, "index-pack", "--stdin", "--fix-thin"], stdin=f,
                       check=True, capture_output=True)
    proc = subprocess.run(["git", "-C", client, "rev-list", "--objects", tip, "--not", *haves],
                          capture_output=True)
    for name in set(os.listdir(f"{client}/objects/pack")) - before:
        os.unlink(f"{client}/objects/pack/{name}")
    if proc.returncode != 0:
        sys.exit(f"{who}'s pack does not complete the branch: {proc.stderr[:300]!r}")


def nodelta(packd, base, nodelta_dir, work):
    t0 = time.monotonic()
    tip = open(f"{nodelta_dir}/tip").read().strip()
    root = f"{work}/nodelta-root"
    os.makedirs(root)
    srv = f"{root}/repo.git"
    linked_copy(base, srv)
    whole = 0
    for name in os.listdir(nodelta_dir):
        if name.startswith("pack-"):
            os.link(f"{nodelta_dir}/{name}", f"{srv}/objects/pack/{name}")
            if name.endswith(".pack"):
                whole = os.path.getsize(f"{nodelta_dir}/{name}")
    git(srv, "update-ref", "refs/heads/nodelta", tip)
    haves = sorted(set(git(base, "for-each-ref", "--format=%(objectname)",
                           "refs/heads").split()))
    client = f"{work}/nodelta-client.git"
    linked_copy(base, client)
    count = git(srv, "rev-list", "--count", tip, "--not", *haves)
    objects = git(srv, "rev-list", "--objects", tip, "--not", *haves).count("\n") + 1
    print(f"   branch: {count} commits, {objects} objects, stored whole in a {whole}-byte pack")
    body = fetch_body([tip], haves, False)
    env = dict(os.environ, GIT_PROTOCOL="version=2")
    out = f"{work}/nodelta.out"
    print(f"   {'':34} {'bytes':>10} {'CPU s':>8}")
    git_bytes = []
    # git's pack-objects does no delta search for objects a bitmap walk found (git 2.39: it
    # sends them as stored, here whole); without bitmaps it searches against the client's
    # edge (--thin), which is what packd must match.
    for label, config in (("git upload-pack", []),
                          ("git upload-pack, no bitmaps", ["-c", "pack.useBitmaps=false"])):
        cpus = []
        for _ in range(FETCH_RUNS):
            with open(out, "wb") as f:
                cpu, _, _, code = run_rusage(["git", *config, "upload-pack", "--stateless-rpc",
                                              srv], body, stdout=f, env=env)
            if code != 0:
                sys.exit("git upload-pack failed")
            cpus.append(cpu)
        git_pack = pack_of(open(out, "rb").read())
        with open(f"{work}/git.pack", "wb") as f:
            f.write(git_pack)
        check_pack(client, f"{work}/git.pack", tip, haves, "git")
        git_bytes.append(len(git_pack))
        git_cpu = statistics.median(cpus)
        print(f"   {label:34} {len(git_pack):>10} {git_cpu:8.3f}   (pack checked)", flush=True)
    if PACKD_SIDE:
        server = Packd(packd, root, ["--clone-cache-bytes", "0"])
        try:
            cpus = []
            for _ in range(FETCH_RUNS):
                before = server.cpu()
                size = server.fetch("repo.git", [tip], haves, f"{work}/packd.pack")
                cpus.append(server.cpu() - before)
        finally:
            server.stop()
        check_pack(client, f"{work}/packd.pack", tip, haves, "packd")
        packd_cpu = statistics.median(cpus)
        print(f"   {'packd serve':34} {size:>10} {packd_cpu:8.3f}   (pack checked)")
        print(f"   {'ratio to git, no bitmaps':34} {size / len(git_pack):>10.3f} "
              f"{packd_cpu / git_cpu:8.2f}   target bytes <= 1.1 (to git with bitmaps: "
              f"{size / git_bytes[0]:.3f})")
    else:
        print("   packd side skipped (no `packd serve`)")
    print(f"   took {time.monotonic() - t0:.0f} s")
    shutil.rmtree(root)
    shutil.rmtree(client)


def main():
    if sys.argv[1] == "pushes":
        pushes(*sys.argv[2:7])
    elif sys.argv[1] == "nodelta":
        nodelta(*sys.argv[2:6])
    else:
        sys.exit(f"unknown part {sys.argv[1]}")


if __name__ == "__main__":
    main()
