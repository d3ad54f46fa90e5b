#!/usr/bin/env bash
# Reachability benchmark: `rev-list --objects --count --use-bitmap-index` in packd and git, side by
# side, each query in a fresh process (a server answers many such questions; a CLI pays the index
# and bitmap loading every time), median of RUNS, git and packd runs alternating.
#
# Queries, on each repository:   TIP    --all    TIP --not TIP~100
# Repositories:
#   spiky   bench/data/spiky.git: the synthetic repository (bench/make-synthetic-repo.sh) plus
#           SPIKES (default 5000) unmerged one-commit branches under refs/pull/N/head, as on a
#           busy code host (seed 001's pathological case for bitmaps is many such refs);
#   REPO    any repository given as an argument, e.g. a copy of git/git.
# Each repository is measured twice: bitmaps written with the commit lookup table and without
# (pack.writeBitmapLookupTable), in two copies under bench/data/reach-*, so that the cost of
# opening a bitmap index with and without the table shows.
#
# Usage: bench/reach.sh [REPO...]      (RUNS=5, SPIKES=5000, TABLES="true false",
#        WRITERS="git" or "git packd", FULL=0, PACKD=the release build)
# WRITERS containing packd adds a copy whose bitmap packd wrote (`packd write-bitmap`, with the
# lookup table and a .rev), read by both tools. FULL=1 adds, for a repository given as an
# argument, a copy that keeps its refs/pull/* (bench/data/full-<name>.git, as bench/fetch.sh
# MIRROR=1 makes it; git/git's has 4,282 refs and 841,300 objects).
# Run by hand, never in CI. Prints ratios packd/git; the target is <= 0.5 on every row.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=${RUNS:-5}
spikes=${SPIKES:-5000}
# shellcheck source=lib/release.sh
source "$here/lib/release.sh"
set_packd_binary "$root"
data=$here/data
mkdir -p "$data"
export GIT_CONFIG_NOSYSTEM=1 GIT_OPTIONAL_LOCKS=0

# --- repositories -------------------------------------------------------------------------------

make_spiky() {
  local dest=$data/spiky.git
  [[ -f $dest/.spiky-done-$spikes ]] && { echo "$dest"; return; }
  "$here/make-synthetic-repo.sh" "$data/synthetic.git" >&2
  rm -rf "$dest" "$dest.tmp"
  git clone -q --bare "$data/synthetic.git" "$dest.tmp" >&2
  # One commit per spike, on top of a commit spread through history, touching one file.
  git -C "$dest.tmp" rev-list --first-parent main > "$data/spiky-bases.txt"
  python3 - "$spikes" "$data/spiky-bases.txt" <<'EOF' | git -C "$dest.tmp" fast-import --quiet
import sys
n = int(sys.argv[1])
bases = [l.strip() for l in open(sys.argv[2])]
out = sys.stdout
for i in range(n):
    base = bases[(i * 7919) % len(bases)]
    msg = f"pull request {i}\n"
    body = f"spike {i}\n"
    out.write(f"commit refs/pull/{i}/head\ncommitter Spike <spike@example.com> {1700000000 + i} +0000\n")
    out.write(f"data {len(msg)}\n{msg}from {base}\nM 100644 inline spikes/spike-{i}.txt\ndata {len(body)}\n{body}\n")
EOF
  mv "$dest.tmp" "$dest"
  touch "$dest/.spiky-done-$spikes"
  echo "$dest"
}

# bitmapped_copy SRC TABLE: a copy of SRC with git's bitmaps (bench/lib/copies.sh).
# shellcheck source=lib/copies.sh
source "$here/lib/copies.sh"
packd=$(installed_copy "$packd" packd-reach)

# A copy of the lookup-table copy whose bitmap (and .rev) packd wrote instead: git and packd both
# read packd's files.
packd_bitmapped_copy() {
  local src=$1 base dest
  base=$(bitmapped_copy "$src" true)
  dest=${base%-true.git}-packd.git
  if [[ $(cat "$dest/.reach-done" 2>/dev/null) != "$(cat "$base/.reach-done")" ]]; then
    rm -rf "$dest"
    cp -a "$base" "$dest"
    rm -f "$dest/.reach-done"
    "$packd" -C "$dest" write-bitmap -q >&2
    cp "$base/.reach-done" "$dest/.reach-done"
    md5sum < "$packd" > "$dest/.reach-writer"
  fi
  # The bitmap is rewritten (in place, seconds) when the packd under test is another build:
  # the rows measure its writer's selection, not an older one's.
  if [[ $(cat "$dest/.reach-writer" 2>/dev/null) != "$(md5sum < "$packd")" ]]; then
    "$packd" -C "$dest" write-bitmap -q >&2
    md5sum < "$packd" > "$dest/.reach-writer"
  fi
  echo "$dest"
}

# --- timing -------------------------------------------------------------------------------------

# Wall seconds of one run of "$@" (output discarded).
wall() {
  local s e
  s=$(date +%s.%N)
  "$@" > /dev/null
  e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}

# The median of the numbers on stdin, 4 decimals.
med() {
  sort -g | awk '{a[NR]=$1} END {printf "%.4f", a[int((NR+1)/2)]}'
}

# Medians of RUNS runs of git and of packd for one query, the two run alternately so that a
# noisy moment on the machine hits both sides alike. Prints "GIT_MEDIAN PACKD_MEDIAN".
median_pair() {
  local q=$1 g=() p=()
  for _ in $(seq "$runs"); do
    # shellcheck disable=SC2086
    g+=("$(wall git -C "$repo" rev-list --objects --count --use-bitmap-index $q)")
    # shellcheck disable=SC2086
    p+=("$(wall "$packd" -C "$repo" rev-list --objects --count --use-bitmap-index $q)")
  done
  echo "$(printf '%s\n' "${g[@]}" | med) $(printf '%s\n' "${p[@]}" | med)"
}

report() {
  local repo=$1 label=$2 tip
  tip=$(git -C "$repo" rev-parse HEAD)
  local entries
  entries=$(git -C "$repo" for-each-ref | wc -l)
  echo "== $label ($(basename "$repo"), $entries refs)"
  printf '   %-28s %10s %10s %7s %s\n' query "git s" "packd s" ratio check
  for q in "$tip" "--all" "$tip --not $tip~100"; do
    local g p ok="same"
    # shellcheck disable=SC2086
    [[ $(git -C "$repo" rev-list --objects --count --use-bitmap-index $q) == \
       $("$packd" -C "$repo" rev-list --objects --count --use-bitmap-index $q) ]] || ok="DIFFERENT COUNT"
    read -r g p < <(median_pair "$q")
    printf '   %-28s %10s %10s %7.2f %s\n' "${q//$tip/TIP}" "$g" "$p" "$(echo "$p / $g" | bc -l)" "$ok"
  done
  # Opening the bitmap index: packd's debug log says how long it took and how many entries the
  # file has; with a lookup table the time should not grow with the entry count.
  local opens=() line
  for _ in $(seq "$runs"); do
    line=$(PACKD_LOG=debug NO_COLOR=1 "$packd" -C "$repo" rev-list --count --use-bitmap-index "$tip" 2>&1 >/dev/null \
      | sed 's/\x1b\[[0-9;]*m//g' | grep -m1 ' opened ')
    opens+=("$(echo "$line" | sed -E 's/.* in ([0-9.]+)(ns|µs|us|ms|s)$/\1 \2/' \
      | awk '{u=$2; v=$1; if (u=="ns") v/=1000; else if (u=="ms") v*=1000; else if (u=="s") v*=1000000; printf "%.0f", v}')")
  done
  local entries
  entries=$(echo "$line" | sed -E 's/.*objects, ([0-9]+) bitmaps, lookup table ([a-z ]+)\).*/\1 bitmaps, lookup table \2/')
  printf '   bitmap open (packd): %s µs median; %s\n' \
    "$(printf '%s\n' "${opens[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" "$entries"
}

repos=("$@")
[[ ${#repos[@]} -gt 0 ]] || repos=("$(make_spiky)")
echo "packd reachability benchmark, $(date -u '+%F %T UTC'), $(git --version), median of $runs"
for src in "${repos[@]}"; do
  for table in ${TABLES:-true false}; do
    report "$(bitmapped_copy "$src" "$table")" "git's bitmap, lookup table: $table"
  done
  if [[ " ${WRITERS:-git} " == *" packd "* ]]; then
    report "$(packd_bitmapped_copy "$src")" "packd's bitmap and .rev (packd write-bitmap)"
  fi
  if [[ ${FULL:-0} == 1 && $src != "$data/spiky.git" ]]; then
    report "$(full_copy "$src")" "git's bitmap, lookup table: true, every ref kept (refs/pull/* too)"
  fi
done
