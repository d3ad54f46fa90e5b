#!/usr/bin/env bash
# Push benchmark with the fsck checks on (issue 31): receiver CPU of packd receive-pack against
# git receive-pack with receive.fsckObjects=true, on pushes of 1, 8, 32 and 128 days of a real
# repository's history and of a full-clone pack (HEAD's whole history into an empty
# repository). Receiver CPU (user+sys, from wait4 in a wrapper around each side's receive-pack).
# Target: packd <= 0.5x git's CPU.
#
# Usage: bench/push-fsck.sh REPO      e.g. bench/push-fsck.sh /work/.mirror/git+git/repo
#        (RUNS=5, RUNS_FULL=1, CASES="1 8 32 128 full", PACKD=the release build)
# REPO is copied once with bitmaps as bench/push.sh does (refs/pull/* dropped: git/git's
# snapshot lacks objects only they reach). Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/setup.sh
source "$here/lib/setup.sh"

repo=$(bitmapped_copy "$1" true)
python3 "$here/lib/push_fsck_bench.py" "$packd" "$repo" "$data/push-fsck-tmp" \
  | tee "$data/results/push-fsck-$(date -u +%Y%m%d-%H%M).txt"
