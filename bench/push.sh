#!/usr/bin/env bash
# Push benchmark, packd receive-pack against git receive-pack on the same pushes (issue 5):
# (a) 8 commits into the synthetic repository with 100,000 spike refs (packed, and hidden from
# pushes by transfer.hideRefs=refs/pull as a code host does) and with 10 refs;
# (b) 1, 8, 32 and 128 days of a real repository's history; (c) a 1,000-object push into a
# repository with 0 and with 256x250 loose objects. Receiver CPU (user+sys, from wait4 in a
# wrapper around each side's receive-pack: `git push --receive-pack='wrap RECEIVER'`).
#
# Usage: bench/push.sh REPO      e.g. bench/push.sh /work/.mirror/git+git/repo
#        (RUNS=5, CASES="a b c", PACKD=the release build)
# REPO is copied once with bitmaps as bench/fetch.sh does. Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/setup.sh
source "$here/lib/setup.sh"

"$here/make-synthetic-repo.sh" "$data/synthetic.git" >&2
repo=$(bitmapped_copy "$1" true)
python3 "$here/lib/push_bench.py" "$packd" "$data/synthetic.git" "$repo" "$data/push-tmp" \
  | tee "$data/results/push-$(date -u +%Y%m%d-%H%M).txt"
