#!/usr/bin/env python3
"""The day-by-day pushes of bench/repack.sh (issue 33, point 3), taken from a repository's
real history.

Usage: day_steps.py REPO STEPS OUT
Writes OUT, one line per state, oldest first: `STEP REF ID`. State 0 is where the served copy
starts; each state after it is one push. A state holds, for each branch of BRANCHES (default
"master next maint todo": the branches git/git only moves forward; seen and jch are rebuilt
every day, so their first-parent history says nothing about their past tips; those missing are
left out), the first commit
on the branch's first-parent chain whose committer date is at or before the day's boundary.
Boundaries are whole days back from the newest commit on master; a day on which no branch
moved is skipped, so the STEPS pushes are STEPS days that each brought history (git/git: about
half of its calendar days move master). Also writes OUT.tags: the tags (refname) whose target
state 0 already reaches, which the served copy starts with; later tags go with the pushes
(`git push --follow-tags`).
"""
import bisect
import os
import subprocess
import sys

DAY = 86400


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def first_parent_chain(repo, branch):
    """(committer times ascending, ids) of the branch's first-parent chain."""
    lines = git(repo, "rev-list", "--first-parent", "--format=%ct", "--no-commit-header",
                f"refs/heads/{branch}").split()
    times = [int(t) for t in reversed(lines)]
    ids = git(repo, "rev-list", "--first-parent", f"refs/heads/{branch}").split()[::-1]
    return times, ids


def tip_at(chain, boundary):
    """The newest commit of the chain at or before `boundary`, or None."""
    times, ids = chain
    i = bisect.bisect_right(times, boundary)
    return ids[i - 1] if i else None


def main():
    repo, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    branches = os.environ.get("BRANCHES", "master next maint todo").split()
    present = git(repo, "for-each-ref", "--format=%(refname:lstrip=2)", "refs/heads").split()
    chains = {b: first_parent_chain(repo, b) for b in branches if b in present}
    newest = chains["master"][0][-1]
    states = []  # newest first
    day = 0
    while len(states) < steps + 1:
        boundary = newest - day * DAY
        state = {b: tip_at(c, boundary) for b, c in chains.items()}
        state = {b: t for b, t in state.items() if t}
        if not states or state != states[-1]:
            states.append(state)
        if not state or day > 20 * (steps + 1):
            sys.exit(f"only {len(states) - 1} steps of history in {repo}")
        day += 1
    states.reverse()
    with open(out, "w") as f:
        for step, state in enumerate(states):
            for b, t in sorted(state.items()):
                f.write(f"{step} refs/heads/{b} {t}\n")
    tags = set()
    for t in states[0].values():
        tags.update(git(repo, "for-each-ref", f"--merged={t}", "--format=%(refname)",
                        "refs/tags").split())
    with open(out + ".tags", "w") as f:
        f.write("".join(f"{t}\n" for t in sorted(tags)))
    print(f"{steps} steps over {day - 1} days back from {newest}, {len(tags)} tags at the start",
          file=sys.stderr)


if __name__ == "__main__":
    main()
