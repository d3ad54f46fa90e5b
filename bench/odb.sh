#!/usr/bin/env bash
# Object database benchmark: packd against git, side by side, on the same repository.
#
# What it measures (each RUNS times, git and packd alternating, median reported):
#   - cat-file --batch of every object, ids in pack-offset order: reading a pack front to
#     back, where each delta base was usually just read (the delta base cache's best case);
#   - cat-file --batch of every object, ids shuffled (fixed seed): random access, where
#     delta chains must be resolved from scratch unless the cache holds their bases;
#   - verify of every pack (git verify-pack IDX vs packd verify PACK): inflate, resolve and
#     hash every object of a pack and check it against its index.
# Wall time is what the targets apply to; user+sys CPU and peak RSS are shown next to it.
# Before timing, it checks once that packd's `cat-file --batch` output is byte for byte
# git's for the shuffled ids (and the same for --batch-check): a fast wrong answer is no win.
#
# Targets (packd wall time / git wall time): shuffled <= 0.5, pack order <= 0.8, verify <= 0.5.
#
# Usage: bench/odb.sh [REPO]
#   REPO        repository to read (bare or not); never written to. Default:
#               bench/data/synthetic.git, built by bench/make-synthetic-repo.sh if missing.
#   RUNS=N      runs per measurement (default 3); use RUNS=1 on big repositories.
#   PACKD=PATH  the packd binary (default the release build,
#               target/<host triple>/release/packd, brought up to date first).
#   PACKD_ARGS  extra global options for packd, e.g. PACKD_ARGS="--cache-size 256m".
#   SKIP_VERIFY=1 / SKIP_CHECK=1  leave out the verify timings / the output comparison.
#   TIMER=bash  time with bash's `time` even if /usr/bin/time exists (no peak RSS then).
# The report is also saved under bench/data/results/. Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=${RUNS:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "error: RUNS must be a positive integer" >&2; exit 2; }

# --- inputs ---------------------------------------------------------------------------------

if [[ $# -ge 1 ]]; then
  repo=$1
else
  repo=$here/data/synthetic.git
  "$here/make-synthetic-repo.sh" "$repo"
fi
repo=$(cd "$repo" && pwd)
objdir=$(git -C "$repo" rev-parse --path-format=absolute --git-path objects)
shopt -s nullglob
packs=("$objdir"/pack/*.pack)
shopt -u nullglob
((${#packs[@]})) || { echo "error: no pack in $objdir/pack" >&2; exit 1; }

if [[ -n ${PACKD:-} ]]; then
  packd=$PACKD
  [[ -x $packd ]] || { echo "error: PACKD=$packd is not an executable" >&2; exit 1; }
else
  # shellcheck source=lib/release.sh
  source "$here/lib/release.sh"
  set_packd_binary "$root"
fi
read -r -a packd_args <<< "${PACKD_ARGS:-}"

# git reads only the object database, as packd does: no replace refs, no lazy fetches, no
# optional locks (the repository may be read-only reference data).
export GIT_NO_REPLACE_OBJECTS=1 GIT_OPTIONAL_LOCKS=0 GIT_NO_LAZY_FETCH=1

work=$(mktemp -d "${TMPDIR:-/tmp}/packd-odb.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$here/data/results"
report=$here/data/results/odb-$(date +%Y%m%d-%H%M%S).txt
exec > >(tee "$report") 2>&1

# --- timing ---------------------------------------------------------------------------------

if [[ ${TIMER:-} != bash ]] && /usr/bin/time -f '%e %U %S %M' -o /dev/null true 2>/dev/null; then
  timer="/usr/bin/time"
else
  timer="bash time (no peak RSS)"
fi

# timed IN ERR CMD...: runs CMD with stdin IN, stdout discarded, stderr to ERR, and prints
# "wall user sys maxrss_kb" (maxrss "-" without /usr/bin/time). Returns CMD's status.
timed() {
  local in=$1 err=$2 tf=$work/time.out status=0
  shift 2
  if [[ $timer == /usr/bin/time ]]; then
    /usr/bin/time -f '%e %U %S %M' -o "$tf" "$@" < "$in" > /dev/null 2> "$err" || status=$?
    tail -n 1 "$tf"  # a "Command exited with non-zero status" line may come first
  else
    local TIMEFORMAT='%3R %3U %3S'
    { time "$@" < "$in" > /dev/null 2> "$err"; } 2> "$tf" || status=$?
    echo "$(tail -n 1 "$tf") -"
  fi
  return "$status"
}

median() {  # median of the arguments ("-" if any is "-")
  printf '%s\n' "$@" | sort -g | awk '
    $1 == "-" { dash = 1 } { a[NR] = $1 }
    END { if (dash) print "-"; else if (NR % 2) print a[(NR + 1) / 2];
          else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

rows=()  # one line per measurement: name|target|git wall|packd wall|git cpu|packd cpu|git rss|packd rss|note

# measure NAME TARGET IN -- GIT_CMD... -- PACKD_CMD...
measure() {
  local name=$1 target=$2 in=$3
  shift 4
  local gcmd=() pcmd=()
  while [[ $1 != -- ]]; do gcmd+=("$1"); shift; done
  shift
  pcmd=("$@")
  local gw=() pw=() gc=() pc=() gr=() pr=() note="" run line w u s m
  echo "== $name ($runs run(s) each)"
  for ((run = 1; run <= runs; run++)); do
    for side in git packd; do
      local cmd=() err=$work/$side.err
      if [[ $side == git ]]; then cmd=("${gcmd[@]}"); else cmd=("${pcmd[@]}"); fi
      if ! line=$(timed "$in" "$err" "${cmd[@]}"); then
        echo "   $side FAILED (exit status), stderr:"; sed 's/^/     /' "$err" | tail -n 20
        note="$side failed"
        break 2
      fi
      read -r w u s m <<< "$line"
      echo "   run $run $side: ${w}s wall, $(awk -v u="$u" -v s="$s" 'BEGIN {printf "%.2f", u + s}')s cpu"
      if [[ $side == git ]]; then
        gw+=("$w"); gc+=("$(awk -v u="$u" -v s="$s" 'BEGIN {print u + s}')"); gr+=("$m")
      else
        pw+=("$w"); pc+=("$(awk -v u="$u" -v s="$s" 'BEGIN {print u + s}')"); pr+=("$m")
      fi
    done
  done
  if [[ -n $note ]]; then
    if ((${#gw[@]})); then
      rows+=("$name|$target|$(median "${gw[@]}")|-|$(median "${gc[@]}")|-|$(median "${gr[@]}")|-|$note")
    else
      rows+=("$name|$target|-|-|-|-|-|-|$note")
    fi
  else
    if [[ -s $work/packd.err ]]; then  # e.g. --stats output of the last run
      echo "   packd stderr (last run):"; sed 's/^/     /' "$work/packd.err" | tail -n 10
    fi
    rows+=("$name|$target|$(median "${gw[@]}")|$(median "${pw[@]}")|$(median "${gc[@]}")|$(median "${pc[@]}")|$(median "${gr[@]}")|$(median "${pr[@]}")|")
  fi
}

# --- object lists ---------------------------------------------------------------------------

echo "== packd object database benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "repository: $repo"
for p in "${packs[@]}"; do
  echo "pack:       $(basename "$p") ($(stat -c %s "$p") bytes)"
done
echo "git:        $(git --version)"
echo "packd:      $packd ($(date -u -r "$packd" '+built %Y-%m-%d %H:%M UTC'))${PACKD_ARGS:+ args: $PACKD_ARGS}"
echo "machine:    $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), timer: $timer"
echo "runs:       $runs per measurement, median reported"

echo "== listing object ids"
: > "$work/ids.offset"
for p in "${packs[@]}"; do  # each pack's objects by offset, packs one after the other
  git -C "$repo" show-index < "${p%.pack}.idx" | sort -n -k1,1 | awk '{print $2}' >> "$work/ids.offset"
done
# loose objects, if any, come last
find "$objdir" -mindepth 2 -maxdepth 2 -path "$objdir/[0-9a-f][0-9a-f]/*" -type f |
  awk -F/ '{print $(NF - 1) $NF}' >> "$work/ids.offset"
python3 - "$work/ids.offset" "$work/ids.shuffled" <<'EOF'
import random, sys
ids = open(sys.argv[1]).read().split()
random.Random(20240611).shuffle(ids)
open(sys.argv[2], "w").write("\n".join(ids) + "\n")
EOF
nobj=$(wc -l < "$work/ids.offset")
echo "   $nobj object ids (${#packs[@]} pack(s)$(find "$objdir" -mindepth 2 -maxdepth 2 -path "$objdir/[0-9a-f][0-9a-f]/*" -type f | wc -l | awk '$1 > 0 {print ", " $1 " loose"}'))"

echo "== reading the packs once so that both sides start with them in the page cache"
cat "$objdir"/pack/* > /dev/null

git_cat=(git -C "$repo" cat-file --batch)
packd_cat=("$packd" -C "$repo" "${packd_args[@]}" cat-file --batch)

# --- correctness ----------------------------------------------------------------------------

check_result="skipped"
check_check_result="skipped"
if [[ ${SKIP_CHECK:-} != 1 ]]; then
  echo "== checking packd's output against git's (shuffled ids)"
  # --batch-check: small, and names the first differing object if there is one.
  git -C "$repo" cat-file --batch-check < "$work/ids.shuffled" > "$work/git.check"
  if "$packd" -C "$repo" "${packd_args[@]}" cat-file --batch-check < "$work/ids.shuffled" \
      > "$work/packd.check" 2> "$work/packd.err" && cmp -s "$work/git.check" "$work/packd.check"; then
    check_check_result="MATCH"
  else
    check_check_result="MISMATCH"
    { diff "$work/git.check" "$work/packd.check" || true; } | head -n 6 | sed 's/^/     /'
    sed 's/^/     packd stderr: /' "$work/packd.err" | tail -n 5
  fi
  echo "   cat-file --batch-check: $check_check_result"
  # --batch: streamed through fifos, too big to keep for a real repository.
  mkfifo "$work/git.fifo" "$work/packd.fifo"
  "${git_cat[@]}" < "$work/ids.shuffled" > "$work/git.fifo" 2> "$work/git.err" &
  gpid=$!
  "${packd_cat[@]}" < "$work/ids.shuffled" > "$work/packd.fifo" 2> "$work/packd.err" &
  ppid=$!
  cstatus=0
  cmp "$work/git.fifo" "$work/packd.fifo" > "$work/cmp.out" 2>&1 || cstatus=$?
  gstatus=0; wait "$gpid" || gstatus=$?
  pstatus=0; wait "$ppid" || pstatus=$?
  if ((cstatus == 0 && gstatus == 0 && pstatus == 0)); then
    check_result="MATCH"
  else
    check_result="MISMATCH"
    echo "   cmp: $(cat "$work/cmp.out") (exit status: git $gstatus, packd $pstatus)"
    sed 's/^/     packd stderr: /' "$work/packd.err" | tail -n 5
    # Name the object holding the first differing byte, from git's batch-check sizes.
    byte=$(sed -n 's/.* byte \([0-9]*\),.*/\1/p' "$work/cmp.out")
    if [[ -n $byte ]]; then
      awk -v b="$byte" '{ end = pos + length($0) + 1 + $3 + 1
                          if (b <= end) { print "     first difference is in object " $1 " (" $2 ", " $3 " bytes)"; exit }
                          pos = end }' "$work/git.check"
    fi
  fi
  echo "   cat-file --batch:       $check_result"
fi

# --- timings --------------------------------------------------------------------------------

measure "cat-file --batch, shuffled" 0.5 "$work/ids.shuffled" -- "${git_cat[@]}" -- "${packd_cat[@]}"
measure "cat-file --batch, pack order" 0.8 "$work/ids.offset" -- "${git_cat[@]}" -- "${packd_cat[@]}"
if [[ ${SKIP_VERIFY:-} != 1 ]]; then
  # One pack per invocation on both sides (packd verify takes one PATH), in small scripts so
  # that several packs are timed as one measurement.
  {
    echo 'set -e'
    for p in "${packs[@]}"; do printf 'git -C %q verify-pack %q\n' "$repo" "${p%.pack}.idx"; done
  } > "$work/verify-git.sh"
  {
    echo 'set -e'
    for p in "${packs[@]}"; do
      printf '%q ' "$packd" -C "$repo" "${packd_args[@]}" verify "$p"; echo
    done
  } > "$work/verify-packd.sh"
  measure "verify, ${#packs[@]} pack(s)" 0.5 /dev/null \
    -- bash "$work/verify-git.sh" -- bash "$work/verify-packd.sh"
fi

# --- report ---------------------------------------------------------------------------------

echo
echo "== results: $(basename "$repo"), $nobj objects, median of $runs, wall seconds (ratio = packd/git)"
echo "   output check, shuffled ids: cat-file --batch $check_result, --batch-check $check_check_result"
fmt='   %-30s %8s %8s %6s %6s %-8s %8s %9s %8s %9s\n'
printf "$fmt" measurement "git s" "packd s" ratio target verdict "git cpu" "packd cpu" "git MiB" "packd MiB"
for row in "${rows[@]}"; do
  IFS='|' read -r name target gw pw gc pc gr pr note <<< "$row"
  if [[ -n $note ]]; then
    printf "$fmt" "$name" "$gw" - - "<=$target" "ERROR: $note" "$gc" - \
      "$(awk -v r="$gr" 'BEGIN {print r == "-" ? "-" : sprintf("%.0f", r / 1024)}')" -
    continue
  fi
  awk -v fmt="$fmt" -v n="$name" -v t="$target" -v gw="$gw" -v pw="$pw" -v gc="$gc" -v pc="$pc" \
      -v gr="$gr" -v pr="$pr" 'BEGIN {
    ratio = gw > 0 ? pw / gw : 0
    verdict = gw <= 0 ? "?" : (ratio <= t + 1e-9 ? "met" : "MISSED")
    printf fmt, n, sprintf("%.3f", gw), sprintf("%.3f", pw), sprintf("%.2f", ratio), "<=" t, verdict,
      sprintf("%.2f", gc), sprintf("%.2f", pc),
      (gr == "-" ? "-" : sprintf("%.0f", gr / 1024)), (pr == "-" ? "-" : sprintf("%.0f", pr / 1024))
  }'
done
echo "   (cpu = user+sys seconds; MiB = peak RSS; report saved to ${report#"$root"/})"
