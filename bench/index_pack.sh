#!/usr/bin/env bash
# index-pack benchmark, `packd index-pack` against `git index-pack` on the same input (issue 5,
# point 3): (1) thin packs of DAYS days of history (default 32 and 128), made by
# `git pack-objects --revs --thin --stdout --delta-base-offset` for HEAD minus the newest commit N
# days older than HEAD (as bench/fetch.sh picks a client N days behind), taken in with
# `index-pack --stdin --fix-thin` by a repository holding the history up to that commit (one
# pack written by `git pack-objects`, so neither side finds the received objects already there);
# (2) with FULL=1, the whole pack of the repository indexed in place (`index-pack FILE`).
# The two sides alternate (git first on odd runs, packd first on even runs); each figure is the
# median of RUNS: CPU (user+sys), wall, and peak RSS from /usr/bin/time, with packd/git ratios.
# Also checks the indexes: byte-identical for the full pack; for a thin pack (whose appended
# bases each side compresses its own way, so offsets, CRCs and checksum of the appended part
# differ) the same object ids, and the same offset and CRC for every received entry.
#
# Usage: bench/index_pack.sh [REPO]   (default bench/data/reach-repo-true.git, made by
#        bench/fetch.sh; RUNS=5, FULL_RUNS=1, DAYS="32 128", FULL=1 adds the full pack,
#        PACKD=the release build). Run by hand, never in CI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=lib/release.sh
source "$here/lib/release.sh"
set_packd_binary "$root"
data=$here/data
repo=$(cd "${1:-$data/reach-repo-true.git}" && pwd)
runs=${RUNS:-5}
full_runs=${FULL_RUNS:-1}
days=${DAYS:-32 128}
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time" >&2; exit 2; }
export GIT_CONFIG_NOSYSTEM=1 GIT_OPTIONAL_LOCKS=0
mkdir -p "$data/results"
work=$(mktemp -d "$data/index-pack-tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

# shellcheck source=lib/timed.sh
source "$here/lib/timed.sh"

# The sorted `git show-index` lines of an index, "offset id crc".
show_index() { git show-index < "$1" | sort; }

report() {
  local label=$1 g=$2 p=$3 gc gw gm pc pw pm
  gc=$(median "$g" 1) gw=$(median "$g" 2) gm=$(median "$g" 3)
  pc=$(median "$p" 1) pw=$(median "$p" 2) pm=$(median "$p" 3)
  printf '%-14s %9s %9s %6.2f  %8s %8s %6.2f  %8s %8s %6.2f\n' "$label" \
    "$gc" "$pc" "$(echo "$pc / $gc" | bc -l)" "$gw" "$pw" "$(echo "$pw / $gw" | bc -l)" \
    "$gm" "$pm" "$(echo "$pm / $gm" | bc -l)"
}

header() {
  printf '%-14s %9s %9s %6s  %8s %8s %6s  %8s %8s %6s\n' case "git cpu" "packd cpu" ratio \
    "git wall" "pd wall" ratio "git MB" "pd MB" ratio
}

exec > >(tee "$data/results/index-pack-$(date -u +%Y%m%d-%H%M).txt")
echo "index-pack benchmark, $(date -u '+%F %T UTC'), $(git version), $(nproc) cores," \
  "$(basename "$repo"), RUNS=$runs, $packd (checkout $(cd "$root" && git rev-parse --short HEAD))," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
head=$(git -C "$repo" rev-parse HEAD)
head_time=$(git -C "$repo" log -1 --format=%ct HEAD)
client=$work/client.git
header

# One side taking a thin pack in: "$1" = git|packd, $2 = pack, $3 = times file, $4 = idx copy.
take_in() {
  local side=$1 pack=$2 times=$3 keep=$4 before hex
  before=$(ls "$client/objects/pack")
  if [[ $side == git ]]; then
    timed "$times" git -C "$client" index-pack --stdin --fix-thin < "$pack"
  else
    timed "$times" "$packd" -C "$client" index-pack --stdin --fix-thin < "$pack"
  fi
  hex=$(sed -n 's/^pack\t//p' "$work/stdout")
  [[ -n $hex ]] || { echo "$side printed no pack name" >&2; exit 1; }
  cp "$client/objects/pack/pack-$hex.idx" "$keep"
  for f in $(ls "$client/objects/pack"); do
    grep -qxF "$f" <<< "$before" || rm -f "$client/objects/pack/$f"
  done
}

for n in $days; do
  have=$(git -C "$repo" rev-list -1 --before=$((head_time - n * 86400)) HEAD)
  pack=$work/thin-$n.pack
  rm -rf "$client"
  git init -q --bare "$client"
  echo "$have" | git -C "$repo" pack-objects --revs --delta-base-offset -q \
    "$client/objects/pack/pack" > /dev/null
  printf '%s\n^%s\n' "$head" "$have" \
    | git -C "$repo" pack-objects --revs --thin --stdout --delta-base-offset -q > "$pack"
  : > "$work/g" && : > "$work/p"
  for ((i = 1; i <= runs; i++)); do
    if ((i % 2)); then
      take_in git "$pack" "$work/g" "$work/git.idx"
      take_in packd "$pack" "$work/p" "$work/packd.idx"
    else
      take_in packd "$pack" "$work/p" "$work/packd.idx"
      take_in git "$pack" "$work/g" "$work/git.idx"
    fi
  done
  # Entries received (offset below the thin pack's trailer) must match exactly; appended bases
  # by id only.
  len=$(($(stat -c %s "$pack") - 20))
  show_index "$work/git.idx" | awk -v l="$len" '$1 < l' > "$work/g.recv"
  show_index "$work/packd.idx" | awk -v l="$len" '$1 < l' > "$work/p.recv"
  show_index "$work/git.idx" | awk '{ print $2 }' | sort > "$work/g.ids"
  show_index "$work/packd.idx" | awk '{ print $2 }' | sort > "$work/p.ids"
  if cmp -s "$work/g.recv" "$work/p.recv" && cmp -s "$work/g.ids" "$work/p.ids"; then
    total=$(wc -l < "$work/g.ids")
    same="idx: same ids, same received entries ($total objects,"
    same+=" $((total - $(wc -l < "$work/g.recv"))) appended)"
  else
    same="idx: DIFFERENT"
  fi
  report "thin ${n}d" "$work/g" "$work/p"
  echo "               $(stat -c %s "$pack") bytes; $same"
  rm -rf "$client" "$pack"
done

if [[ ${FULL:-0} == 1 ]]; then
  # Outside any repository (bench/data is inside packd's checkout): git would otherwise look
  # each object up there.
  export GIT_CEILING_DIRECTORIES=$work
  src=$(ls "$repo"/objects/pack/*.pack | head -1)
  mkdir -p "$work/full"
  ln -s "$src" "$work/full/git.pack"
  ln -s "$src" "$work/full/packd.pack"
  : > "$work/g" && : > "$work/p"
  for ((i = 1; i <= full_runs; i++)); do
    rm -f "$work/full/"*.idx
    if ((i % 2)); then
      timed "$work/g" git -C "$work/full" index-pack git.pack
      timed "$work/p" "$packd" -C "$work/full" index-pack packd.pack
    else
      timed "$work/p" "$packd" -C "$work/full" index-pack packd.pack
      timed "$work/g" git -C "$work/full" index-pack git.pack
    fi
  done
  if cmp -s "$work/full/git.idx" "$work/full/packd.idx"; then
    same="idx: byte-identical"
  else
    same="idx: DIFFERENT"
  fi
  report "full pack" "$work/g" "$work/p"
  echo "               $(stat -c %s "$src") bytes; $same"
fi
