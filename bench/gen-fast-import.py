#!/usr/bin/env python3
"""Writes a deterministic `git fast-import` stream describing a synthetic history.

Used by bench/make-synthetic-repo.sh to build the benchmark repository for the object
database (bench/odb.sh). The point is a pack that looks like a real source tree's pack:
a few thousand text files in a two-level directory tree, tens of thousands of commits
that each change a few files with small line edits (so `git repack` builds long delta
chains of blobs and trees), some files much hotter than others, files added and removed
over time, a maintenance branch, topic branches merged back, annotated and lightweight
tags.

Everything comes from one seeded random.Random, so the same arguments always give the
same stream, the same object ids and (after the same repack) the same pack.

Usage: gen-fast-import.py [--commits N] [--seed S] | git fast-import
"""

import argparse
import random
import sys

# --- vocabulary -------------------------------------------------------------------------

WORDS = """
able access account action active adapter address after again agent alloc allow already
answer append apply archive array assert async atomic attach author backend balance base
batch before begin block body bound branch buffer build bundle byte cache call cancel
capacity cell chain change channel check child chunk class clean clear client clock close
cluster code column commit common compact compare config connect consume context copy
count counter create cursor data deadline debug decode default defer delete delta depth
detach device digest direct dirty disable dispatch done double drain drop dump edge empty
enable encode entry error event evict exact expand expire export extend fail fast fetch
field file filter final first flag flush follow format frame free fresh full future gather
global graph group guard handle hash header heap hint hold host index inner input insert
inspect issue item join keep kernel key kind label large last layer layout lazy leader
length level limit line link list load local lock log lookup loop main manifest map mark
match merge message meta method mirror mode module mount move name native next node notify
object offset open option order origin output owner pack page parent parse partial patch
path peer pending pick pipe pool port prefix prepare primary print probe process profile
prune push queue quota range rate read ready record reduce ref region register release
reload remote remove render replace reply request reset resolve result retry return reuse
revision root route rule scan schedule scope search section seed select send sequence
server session shadow share shift signal simple size skip slice slot snapshot socket sort
source span split stack stage start state status step store stream strict string submit
suffix summary switch sync table tag target task temp test text thread tick timeout token
total trace track tree trim type unit unlock update upper usage user value verify version
view wait walk watch weight window worker write yield zone
""".split()

TOP_DIRS = ["src", "lib", "include", "tools", "tests", "docs", "net", "storage", "contrib"]
CODE_EXTS = [".c", ".h", ".rs", ".py", ".go"]
DOC_EXTS = [".md", ".txt"]
TYPES = ["int", "size_t", "u32", "u64", "bool", "char *", "struct entry *", "void *"]
OPS = ["==", "!=", "<", ">", "<=", ">="]

FIRST = """Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy
Rupert Sybil Trent Victor Walter Yuki Zoe Amir Bea Chen Dmitri Elena Farid Gita Hana
Igor Jonas Kenji Lena Marta Nils Omar Priya Quinn Rosa Sven""".split()
LAST = """Smith Jones Garcia Muller Rossi Tanaka Novak Silva Kowalski Dubois Larsen Okafor
Petrov Haddad Kim Nguyen Schmidt Costa Berg Ivanova""".split()


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        r = self.r
        self.people = []
        for i in range(48):
            f, l = r.choice(FIRST), r.choice(LAST)
            self.people.append(f"{f} {l} <{f.lower()}.{l.lower()}{i}@example.org>")
        # A few people write most commits, as in real projects.
        self.people_w = [1.0 / (i + 1) ** 0.9 for i in range(len(self.people))]
        self.time = 1262304000  # 2010-01-01
        self.mark = 0

    # --- names and text ----------------------------------------------------------------

    def ident(self):
        r = self.r
        n = r.choice((1, 2, 2, 2, 3))
        return "_".join(r.choice(WORDS) for _ in range(n))

    def words(self, lo, hi):
        return " ".join(self.r.choice(WORDS) for _ in range(self.r.randint(lo, hi)))

    def code_line(self, indent):
        r = self.r
        pad = "    " * indent
        k = r.random()
        if k < 0.30:
            return f"{pad}{self.ident()} = {self.ident()}({self.ident()}, {r.randint(0, 4096)});"
        if k < 0.45:
            return f"{pad}if ({self.ident()} {r.choice(OPS)} {r.randint(0, 255)})"
        if k < 0.60:
            return f"{pad}// {self.words(3, 10)}"
        if k < 0.72:
            return f"{pad}{r.choice(TYPES)} {self.ident()} = {self.ident()}->{self.ident()};"
        if k < 0.80:
            return f"{pad}return {self.ident()};"
        if k < 0.90:
            return f"{pad}{self.ident()}({self.ident()}, \"{self.words(1, 4)}\");"
        return ""

    def code_block(self):
        """A function: signature, body lines, closing brace, blank line."""
        r = self.r
        args = ", ".join(f"{r.choice(TYPES)} {self.ident()}" for _ in range(r.randint(0, 4)))
        lines = [f"static {r.choice(TYPES)} {self.ident()}({args})", "{"]
        for _ in range(r.randint(2, 14)):
            lines.append(self.code_line(r.choice((1, 1, 1, 2))))
        lines += ["}", ""]
        return lines

    def doc_block(self):
        r = self.r
        if r.random() < 0.2:
            return ["#" * r.randint(1, 3) + " " + self.words(2, 6).capitalize(), ""]
        text = self.words(20, 90).split()
        lines, cur = [], ""
        for w in text:
            if len(cur) + len(w) + 1 > 72:
                lines.append(cur)
                cur = w
            else:
                cur = f"{cur} {w}" if cur else w
        lines += [cur, ""]
        return lines

    def new_file(self, path, target_lines):
        doc = path.endswith(tuple(DOC_EXTS))
        if doc:
            lines = [f"{path}", "=" * len(path), ""]
        else:
            lines = [f"/* {path}: {self.words(3, 8)} */", "", f"#include \"{self.ident()}.h\"", ""]
        while len(lines) < target_lines:
            lines += self.doc_block() if doc else self.code_block()
        return lines

    def edit(self, path, lines):
        """Returns a new list: 1-3 small hunks (never mutates `lines`)."""
        r = self.r
        doc = path.endswith(tuple(DOC_EXTS))
        out = list(lines)
        for _ in range(r.choice((1, 1, 1, 2, 2, 3))):
            n = len(out)
            at = r.randrange(n + 1)
            k = r.random()
            if n > 700:
                k = 0.9  # keep files from growing without bound: delete
            elif n < 15:
                k = 0.5  # too small: insert
            if k < 0.40 and n:
                # tweak one or two lines: change a word or a number
                for i in range(at, min(n, at + r.choice((1, 1, 2)))):
                    toks = out[i].split(" ")
                    j = r.randrange(len(toks))
                    toks[j] = self.ident() if r.random() < 0.7 else str(r.randint(0, 9999))
                    out[i] = " ".join(toks)
            elif k < 0.75:
                new = self.doc_block() if doc else self.code_block()
                if r.random() < 0.5:
                    new = new[: r.randint(1, len(new))]
                out[at:at] = new
            elif k < 0.97 and n:
                del out[at : at + r.randint(1, 6)]
            else:
                # occasional larger rewrite of a region
                span = r.randint(10, 40)
                new = []
                while len(new) < span:
                    new += self.doc_block() if doc else self.code_block()
                out[at : at + span] = new
        return out

    def message(self, subsystem):
        r = self.r
        verb = r.choice(["fix", "add", "remove", "refactor", "speed up", "document",
                         "clean up", "handle", "avoid", "simplify", "test", "rename"])
        lines = [f"{subsystem}: {verb} {self.words(2, 6)}"]
        if r.random() < 0.7:
            lines.append("")
            for _ in range(r.randint(1, 3)):
                body = self.words(10, 40).split()
                cur = ""
                for w in body:
                    if len(cur) + len(w) + 1 > 72:
                        lines.append(cur)
                        cur = w
                    else:
                        cur = f"{cur} {w}" if cur else w
                lines += [cur, ""]
            lines.pop()
        if r.random() < 0.3:
            lines += ["", f"Signed-off-by: {r.choice(self.people)}"]
        return "\n".join(lines) + "\n"

    def person(self):
        return self.r.choices(self.people, self.people_w)[0]

    def tick(self):
        self.time += self.r.randint(60, 4 * 3600)
        return f"{self.time} +0000"

    def next_mark(self):
        self.mark += 1
        return self.mark


class Tree:
    """One branch's files: path -> list of lines. Line lists are never mutated in place,
    so fork() only copies the dict. Keeps per-directory pools with cumulative heat weights
    so that picking files stays cheap."""

    def __init__(self, files=None, heat=None):
        self.files = dict(files or {})
        self.heat = heat if heat is not None else {}
        self._pools = None

    def fork(self):
        return Tree(self.files, self.heat)

    def set(self, path, lines, heat=None):
        if path not in self.files:
            self._pools = None
        self.files[path] = lines
        if heat is not None:
            self.heat[path] = heat

    def delete(self, path):
        del self.files[path]
        self._pools = None

    def pool(self, d):
        """(paths, cumulative weights) for directory d, or for everything if d is None."""
        if self._pools is None:
            groups = {None: []}
            for p in self.files:
                groups.setdefault(p.rsplit("/", 1)[0], []).append(p)
                groups[None].append(p)
            self._pools = {}
            for k, paths in groups.items():
                cw, acc = [], 0.0
                for p in paths:
                    acc += self.heat[p]
                    cw.append(acc)
                self._pools[k] = (paths, cw)
        return self._pools.get(d, ([], []))


class Writer:
    def __init__(self, out):
        self.out = out

    def w(self, s):
        self.out.write(s.encode())

    def data(self, s):
        b = s.encode()
        self.out.write(b"data %d\n" % len(b))
        self.out.write(b)
        self.out.write(b"\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=36000, help="commits on main")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--initial-files", type=int, default=1500)
    ap.add_argument("--final-files", type=int, default=2800, help="files on main at the end (approx.)")
    args = ap.parse_args()

    g = Gen(args.seed)
    r = g.r
    w = Writer(sys.stdout.buffer)
    w.w("feature done\n")

    # Directory tree: TOP_DIRS, each with 5-8 subdirectories (about 60 directories).
    dirs = []
    for top in TOP_DIRS:
        dirs.append(top)
        subs = set()
        want = r.randint(5, 8)
        while len(subs) < want:
            subs.add(r.choice(WORDS))
        dirs += [f"{top}/{s}" for s in sorted(subs)]
    dir_w = [r.uniform(0.2, 3.0) for _ in dirs]  # some areas are busier than others

    def new_path(tree):
        while True:
            d = r.choices(dirs, dir_w)[0]
            doc = d.startswith("docs") or r.random() < 0.08
            p = f"{d}/{g.ident()}{r.choice(DOC_EXTS if doc else CODE_EXTS)}"
            if p not in tree.files:
                return p

    def file_size():
        return int(min(900, max(8, r.lognormvariate(4.4, 0.8))))  # median ~80 lines

    def add_file(tree, p):
        # heat: how often the file gets edited; heavy-tailed, a few files are very hot
        tree.set(p, g.new_file(p, file_size()), heat=r.paretovariate(1.2))

    def emit_commit(ref, tree, changed, deleted, msg, frm=None, merges=()):
        m = g.next_mark()
        who = g.person()
        when = g.tick()
        w.w(f"commit {ref}\nmark :{m}\nauthor {who} {when}\ncommitter {who} {when}\n")
        w.data(msg)
        if frm is not None:
            w.w(f"from :{frm}\n")
        for mm in merges:
            w.w(f"merge :{mm}\n")
        for p in deleted:
            w.w(f"D {p}\n")
        for p in changed:
            w.w(f"M 100644 inline {p}\n")
            w.data("\n".join(tree.files[p]) + "\n")
        w.w("\n")
        return m

    def pick_files(tree):
        """Picks 1..12 files, mostly from one directory, weighted by heat."""
        n = r.choices((1, 2, 3, 4, 5, 6, 8, 12), (30, 22, 15, 10, 8, 6, 5, 4))[0]
        focus = r.choices(dirs, dir_w)[0]
        local, local_cw = tree.pool(focus)
        every, every_cw = tree.pool(None)
        picked = []
        for _ in range(n):
            if local and r.random() < 0.8:
                p = r.choices(local, cum_weights=local_cw)[0]
            else:
                p = r.choices(every, cum_weights=every_cw)[0]
            if p not in picked:
                picked.append(p)
        return picked, focus.split("/")[-1]

    def work_commit(ref, tree, frm=None, grow=0.0, shrink=0.0):
        picked, subsystem = pick_files(tree)
        changed, deleted = [], []
        for p in picked:
            tree.set(p, g.edit(p, tree.files[p]))
            changed.append(p)
        if r.random() < grow:
            for _ in range(r.choice((1, 1, 1, 2, 3))):
                p = new_path(tree)
                add_file(tree, p)
                changed.append(p)
        if r.random() < shrink:
            victim = r.choice(tree.pool(None)[0])
            if victim not in changed:
                tree.delete(victim)
                deleted.append(victim)
        return emit_commit(ref, tree, changed, deleted, g.message(subsystem), frm=frm)

    # Files grow from --initial-files to about --final-files over the history: adds come
    # with probability `grow` (1.6 files each on average), deletes with `shrink`.
    shrink = 0.01
    grow = ((args.final_files - args.initial_files) / max(1, args.commits) + shrink) / 1.6

    main_tree = Tree()
    for _ in range(args.initial_files):
        add_file(main_tree, new_path(main_tree))
    tip = emit_commit("refs/heads/main", main_tree, list(main_tree.files), [], "Initial import\n")

    maint = None  # [tree, tip] once forked
    maint_fork_at = int(args.commits * 0.55)
    topics = []  # active topic branches
    topic_names = ["topic/fast-path", "topic/new-index", "topic/async-io", "topic/docs-revamp",
                   "topic/cache-rework", "next"]
    topic_starts = {int(args.commits * f): n for f, n in
                    zip((0.15, 0.3, 0.45, 0.6, 0.75, 0.9), topic_names)}
    tag_every = max(1, args.commits // 12)
    ntag = 0

    for i in range(1, args.commits):
        tip = work_commit("refs/heads/main", main_tree, grow=grow, shrink=shrink)

        if i % tag_every == 0:
            ntag += 1
            name = f"v1.{ntag}.0"
            g.next_mark()
            w.w(f"tag {name}\nfrom :{tip}\ntagger {g.person()} {g.tick()}\n")
            w.data(f"Release {name}\n\n{g.words(10, 30)}\n")
            if ntag % 4 == 0:
                w.w(f"reset refs/tags/{name}-light\nfrom :{tip}\n\n")

        # Maintenance branch: forked once, then gets a fix every ~15 main commits.
        if i == maint_fork_at:
            maint = [main_tree.fork(), tip]
        if maint is not None and r.random() < 1 / 15:
            maint[1] = work_commit("refs/heads/maint", maint[0], frm=maint[1])

        # Topic branches work in a new directory of their own and are merged into main
        # when done (all but "next", which stays open).
        if i in topic_starts:
            name = topic_starts[i]
            prefix = f"{r.choice(TOP_DIRS)}/{name.split('/')[-1]}/"
            topics.append({"name": name, "tree": Tree(), "prefix": prefix, "tip": tip,
                           "left": r.randint(80, 300)})
        for t in list(topics):
            tt = t["tree"]
            if t["left"] > 0 and r.random() < 0.3:
                changed = []
                if not tt.files or r.random() < 0.3:
                    for _ in range(r.randint(1, 3)):
                        p = f"{t['prefix']}{g.ident()}{r.choice(CODE_EXTS)}"
                        if p not in tt.files:
                            add_file(tt, p)
                            changed.append(p)
                for p in r.sample(sorted(tt.files), min(len(tt.files), r.randint(1, 3))):
                    if p not in changed:
                        tt.set(p, g.edit(p, tt.files[p]))
                        changed.append(p)
                t["tip"] = emit_commit(f"refs/heads/{t['name']}", tt, changed, [],
                                       g.message(t["name"].split("/")[-1]), frm=t["tip"])
                t["left"] -= 1
            if t["left"] == 0 and t["name"] != "next":
                # Merge: main's tree plus the topic's new directory.
                for p, lines in tt.files.items():
                    main_tree.set(p, lines, heat=tt.heat[p])
                tip = emit_commit("refs/heads/main", main_tree, sorted(tt.files), [],
                                  f"Merge branch '{t['name']}'\n", merges=(t["tip"],))
                topics.remove(t)

    w.w("done\n")
    sys.stdout.buffer.flush()
    print(f"gen-fast-import: {g.mark} marks, {len(main_tree.files)} files on main at the end",
          file=sys.stderr)


if __name__ == "__main__":
    main()
