#!/usr/bin/env bash
# Fetch and clone benchmark, packd serve against git, in the shape of git's t/perf/p5311:
# for clients 1..128 days behind, server CPU and pack bytes of packd's fetch against
# `git pack-objects --revs --thin --use-bitmap-index --delta-base-offset` with the same want and
# have, plus the client's `git index-pack --fix-thin` time; then a full clone (server CPU and peak
# memory, and end to end over HTTP against git http-backend); with MIRROR=1 (default) also a
# mirror clone (every ref) of a second copy that keeps refs/pull/*, the issue's own setting.
#
# Usage: bench/fetch.sh REPO      e.g. bench/fetch.sh /work/.mirror/git+git/repo
#        (RUNS=5, DAYS="1 2 4 8 16 32 64 128", HTTP_CLONE=1, MIRROR=1,
#         PACKD=the release build)
# REPO is copied once to bench/data/reach-<name>-true.git with git's bitmaps (as bench/reach.sh
# does: refs/pull/* dropped, promisor mark removed, `repack -adb`), and for MIRROR=1 to
# bench/data/full-<name>.git with every ref except the few that reach objects the snapshot
# lacks (bench/lib/broken_refs.py; about 6 minutes the first time), and a hard-linked copy of
# that whose bitmaps `packd write-bitmap --every-tip` wrote (every ref tip has one; git reads
# them too); and to bench/data/reach-<name>-true-rev.git, a hard-linked copy whose pack has a
# `.rev` that `git index-pack --rev-index` wrote, for the process-per-request columns. Run by
# hand, never in CI.
# Targets: pack bytes <= git's and server CPU <= 0.5x git's for every N; full-clone server CPU
# <= 0.25x git's and peak memory under 100 MB.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/setup.sh
source "$here/lib/setup.sh"

repo=$(bitmapped_copy "$1" true)
# The same repository with a `.rev` (as git 2.41 and later write), for the process-per-request
# columns.
export REV_COPY
REV_COPY=$(rev_copy "$repo")
mirror=()
if [[ ${MIRROR:-1} == 1 ]]; then
  full=$(full_copy "$1")
  mirror=("$full" "$(every_tip_copy "$full" "$packd")")
fi
python3 "$here/lib/fetch_bench.py" "$packd" "$repo" "$data/fetch-tmp" "${mirror[@]}" \
  | tee "$data/results/fetch-$(date -u +%Y%m%d-%H%M).txt"
