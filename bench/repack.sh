#!/usr/bin/env bash
# Repack and maintenance benchmark, packd against git in one run (issue 33, "What it must
# show"), on one repository (git/git: /work/.mirror/git+git/repo):
#   adf      `repack -adf --window=10 --depth=50` (no bitmaps): pack bytes, wall, CPU, peak RSS;
#            targets packd/git: bytes <= 1.00, wall <= 0.5 (2 cores), memory <= 0.5.
#   adb      `repack -adb` (deltas reused, bitmaps written): targets wall <= 0.3, memory <= 0.5.
#   pushes   100 pushes of one day of history each (bench/lib/day_steps.py) with stock
#            `git push` over HTTP into a served copy that starts 100 steps back; then a fetch one
#            day behind and a mirror clone of the pushed copy against a fully repacked copy of
#            the same state (server CPU; target <= 1.2x), and the maintenance of the 100 pushes
#            against one full repack (target <= 0.1x). packd: `packd serve` with its maintenance
#            (the `packd_maint` log lines' cpu_ms); git: `git http-backend`, `git gc --auto`
#            after each push (what receive.autogc runs).
#   nodelta  a fetch of a branch whose objects have no delta to reuse (bench/lib/nodelta_branch.py)
#            by a client holding the original history, packd serve against git upload-pack
#            (as it is, and with pack.useBitmaps=false: with bitmaps git 2.39 sends such objects
#            whole): bytes sent (target <= 1.1x git's without bitmaps).
# Each part measures git, then packd (when PACKD has a `repack` command; otherwise its side is
# skipped and said so; nodelta's needs only `packd serve`), ratios packd/git from the same run;
# medians of RUNS.
#
# Usage: bench/repack.sh REPO   e.g. bench/repack.sh /work/.mirror/git+git/repo
#        (PARTS="adf adb pushes nodelta", RUNS=1 for adf/adb, FETCH_RUNS=5, CLONE_RUNS=3,
#         STEPS=100, NODELTA_COMMITS=20, FULL=0 for the bitmapped copy without refs/pull/*
#         (git/git: 489k objects) instead of the one that keeps all but the broken ones (841k,
#         the issue's setting; about 6 minutes to make the first time), CHECK=1 to run
#         `git fsck --connectivity-only` on packd's results, PACKD_REPACK_ARGS=more options for
#         packd's repack in adf and adb, e.g. --no-write-commit-graph, PACKD=the release build)
# Copies and prepared data live under bench/data/repack-* (kept between runs); the report is
# bench/data/results/repack-DATE.txt. Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/setup.sh
source "$here/lib/setup.sh"

[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 2; }
parts=${PARTS:-adf adb pushes nodelta}
runs=${RUNS:-1}
steps=${STEPS:-100}
if [[ ${FULL:-1} == 1 ]]; then
  base=$(full_copy "$1")
else
  base=$(bitmapped_copy "$1" true)
fi
name=$(basename "$1" .git)
work=$(mktemp -d "$data/repack-tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=lib/timed.sh
source "$here/lib/timed.sh"

# packd's side runs when its build has the repack command (issue 33 adds it).
packd_side=1
if ! "$packd" repack --help 2>&1 | grep -q 'Usage:.*repack'; then
  packd_side=0
fi
# The nodelta part needs only `packd serve`.
serve_side=1
"$packd" serve --help 2>&1 | grep -q 'Usage:.*serve' || serve_side=0

exec > >(tee "$data/results/repack-$(date -u +%Y%m%d-%H%M).txt")
echo "repack benchmark, $(date -u '+%F %T UTC'), $(git version), $(nproc) cores," \
  "$(basename "$base") ($(git -C "$base" count-objects -v | sed -n 's/^in-pack: //p') objects)," \
  "RUNS=$runs, $packd (checkout $(cd "$root" && git rev-parse --short HEAD))," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
if ((packd_side == 0)); then
  echo "packd side skipped: $packd has no \`repack\` command (git's side only)"
fi

# Bytes of the packs in repository $1.
pack_bytes() { stat -c %s "$1"/objects/pack/*.pack | awk '{ n += $1 } END { print n }'; }
# Objects in the packs of repository $1 (from their indexes).
pack_objects() {
  local idx n=0
  for idx in "$1"/objects/pack/*.idx; do
    n=$((n + $(git show-index < "$idx" | wc -l)))
  done
  echo "$n"
}

# One repack of a fresh hard-linked copy of the base by side $1 (git|packd) with the repack
# options "${@:3}"; appends "cpu wall rss bytes objects" to $2.
one_repack() {
  local side=$1 times=$2 copy=$work/$1.git
  shift 2
  rm -rf "$copy"
  cp -al "$base" "$copy"
  rm -f "$copy"/.*-done
  if [[ $side == git ]]; then
    # A bare repository's `repack -a` writes bitmaps unless told not to; -b turns them on.
    timed "$times.t" git -C "$copy" -c repack.writeBitmaps=false repack "$@" -q
  else
    # shellcheck disable=SC2086
    timed "$times.t" "$packd" -C "$copy" repack "$@" -q ${PACKD_REPACK_ARGS:-}
    if [[ ${CHECK:-0} == 1 ]]; then
      git -C "$copy" fsck --connectivity-only --no-dangling || echo "packd's repack: FSCK FAILED"
    fi
  fi
  echo "$(tail -1 "$times.t") $(pack_bytes "$copy") $(pack_objects "$copy")" >> "$times"
  rm -rf "$copy"
}

# A part: RUNS repacks of each side with the repack options "${@:2}", alternating; $1 names
# its targets.
repack_part() {
  local targets=$1 start=$SECONDS i
  shift
  : > "$work/g" && : > "$work/p"
  for ((i = 1; i <= runs; i++)); do
    if ((i % 2 || packd_side == 0)); then
      one_repack git "$work/g" "$@"
      ((packd_side == 0)) || one_repack packd "$work/p" "$@"
    else
      one_repack packd "$work/p" "$@"
      one_repack git "$work/g" "$@"
    fi
  done
  echo
  echo "== repack $* ($runs run(s) each; cpu = user+sys s, wall s, peak RSS MB, pack bytes)"
  printf '%-6s %9s %8s %8s %12s %9s\n' side cpu wall MB bytes objects
  local gc gw gm gb go pc pw pm pb po
  gc=$(median "$work/g" 1) gw=$(median "$work/g" 2) gm=$(median "$work/g" 3)
  gb=$(median "$work/g" 4) go=$(median "$work/g" 5)
  printf '%-6s %9s %8s %8s %12s %9s\n' git "$gc" "$gw" "$gm" "$gb" "$go"
  if ((packd_side)); then
    pc=$(median "$work/p" 1) pw=$(median "$work/p" 2) pm=$(median "$work/p" 3)
    pb=$(median "$work/p" 4) po=$(median "$work/p" 5)
    printf '%-6s %9s %8s %8s %12s %9s\n' packd "$pc" "$pw" "$pm" "$pb" "$po"
    printf '%-6s %9.2f %8.2f %8.2f %12.3f %9s\n' ratio "$(bc -l <<< "$pc / $gc")" \
      "$(bc -l <<< "$pw / $gw")" "$(bc -l <<< "$pm / $gm")" "$(bc -l <<< "$pb / $gb")" \
      "$([[ $po == "$go" ]] && echo same || echo DIFFERENT)"
  fi
  echo "targets packd/git: $targets; git's repack took $gw s wall, part $((SECONDS - start)) s"
}

# The served copy of the pushes part: the base reset to state 0 of the day steps (its refs and
# the tags they reach, nothing else), repacked with bitmaps as a server repacked then would be.
start_copy() {
  local stepfile=$1 dest=$data/repack-$name-start.git fingerprint
  fingerprint=$(cat "$stepfile" "$stepfile.tags" | md5sum | cut -d' ' -f1)
  if [[ $(cat "$dest/.start-done" 2>/dev/null) != "$fingerprint" ]]; then
    rm -rf "$dest"
    cp -al "$base" "$dest"
    rm -f "$dest"/.*-done
    git -C "$dest" for-each-ref --format='delete %(refname)' | git -C "$dest" update-ref --stdin
    {
      awk '$1 == 0 { print "create " $2 " " $3 }' "$stepfile"
      git -C "$base" for-each-ref --format='%(refname) %(objectname)' refs/tags \
        | awk 'NR == FNR { keep[$1] = 1; next } ($1 in keep) { print "create " $1 " " $2 }' \
          "$stepfile.tags" -
    } | git -C "$dest" update-ref --stdin
    git -C "$dest" symbolic-ref HEAD refs/heads/master
    git -C "$dest" repack -adb -q
    echo "$fingerprint" > "$dest/.start-done"
  fi
  echo "$dest"
}

for part in $parts; do
  case $part in
    adf) repack_part "bytes <= 1.00, wall <= 0.5, memory <= 0.5" -adf --window=10 --depth=50 ;;
    adb) repack_part "wall <= 0.3, memory <= 0.5" -adb ;;
    pushes)
      start=$SECONDS
      stepfile=$data/repack-$name-steps-$steps.txt
      [[ -s $stepfile ]] || python3 "$here/lib/day_steps.py" "$base" "$steps" "$stepfile"
      start_repo=$(start_copy "$stepfile")
      echo
      echo "== $steps pushes of a day each, then a fetch 1 day behind and a mirror clone" \
        "(prepared in $((SECONDS - start)) s)"
      PACKD_SIDE=$packd_side python3 "$here/lib/repack_bench.py" pushes "$packd" "$base" \
        "$stepfile" "$start_repo" "$work"
      echo "part $((SECONDS - start)) s" ;;
    nodelta)
      start=$SECONDS
      nodelta=$data/repack-$name-nodelta-${NODELTA_COMMITS:-20}
      python3 "$here/lib/nodelta_branch.py" "$base" "${NODELTA_COMMITS:-20}" "$nodelta"
      echo
      echo "== fetch of a branch with no reusable delta (prepared in $((SECONDS - start)) s)"
      PACKD_SIDE=$serve_side python3 "$here/lib/repack_bench.py" nodelta "$packd" "$base" \
        "$nodelta" "$work"
      echo "part $((SECONDS - start)) s" ;;
    *) echo "unknown part $part (PARTS: adf adb pushes nodelta)" >&2; exit 2 ;;
  esac
done
echo
echo "total $SECONDS s (parts: $parts)"
