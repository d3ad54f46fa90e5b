#!/usr/bin/env bash
# Builds the synthetic benchmark repository for the object database benchmark (bench/odb.sh).
#
# What it makes: a bare repository with about 300k objects in one pack, shaped like a real
# source tree: ~3000 text files in ~60 directories, ~36k commits that each change a few files
# with small line edits, a maintenance branch, topic branches merged back, annotated and
# lightweight tags. bench/gen-fast-import.py writes the history as a `git fast-import` stream
# (seeded, so the result is the same on every machine); git imports it and then
# `git repack -adf --depth=50 --window=50` packs it the way an aggressive gc would, with long
# delta chains of blobs and trees. Deep chains and many small objects are what make reading
# objects out of a pack expensive, which is what the benchmark measures.
#
# Usage: bench/make-synthetic-repo.sh DEST
#   COMMITS=N   commits on the main branch (default 36000; more commits, more objects)
#   SEED=S      random seed of the generator (default 20240611)
# Idempotent: if DEST was already completed with the same COMMITS and SEED, it only prints
# the summary. An existing DEST that this script did not complete is left alone (error).
# Takes a few minutes on 2 cores, most of it in the repack.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: $0 DEST}
commits=${COMMITS:-36000}
seed=${SEED:-20240611}
marker=packd-bench-synthetic.done
params="commits=$commits seed=$seed generator=$(sha1sum "$here/gen-fast-import.py" | cut -c1-12)"

summary() {
  local repo=$1 count size
  count=$(git -C "$repo" count-objects -v | awk '/^in-pack:/ {print $2}')
  size=$(du -cb "$repo"/objects/pack/*.pack | awk 'END {print $1}')
  echo "repository: $repo"
  echo "objects:    $count in $(ls "$repo"/objects/pack/*.pack | wc -l) pack(s)"
  echo "pack size:  $size bytes ($(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}') MiB)"
  git -C "$repo" count-objects -v | sed -n 's/^count: \(.*\)/loose:      \1/p'
}

if [[ -e $dest ]]; then
  if [[ -f $dest/$marker && $(cat "$dest/$marker") == "$params" ]]; then
    echo "$dest is already complete ($params)"
    summary "$dest"
    exit 0
  fi
  if [[ -f $dest/$marker ]]; then
    echo "error: $dest was built with other parameters: $(cat "$dest/$marker")" >&2
    echo "       (wanted: $params); remove it to rebuild" >&2
  else
    echo "error: $dest exists but is not a completed synthetic repository; remove it to rebuild" >&2
  fi
  exit 1
fi

mkdir -p "$(dirname "$dest")"
tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

git init --quiet --bare --initial-branch=main "$tmp"
git -C "$tmp" config gc.auto 0           # never let a later git command repack behind our back
git -C "$tmp" config core.logAllRefUpdates false

echo "== generating history ($params) and importing it with git fast-import"
python3 "$here/gen-fast-import.py" --commits "$commits" --seed "$seed" |
  git -C "$tmp" fast-import --quiet
t_import=$((SECONDS - start))
echo "   import took ${t_import}s: $(git -C "$tmp" count-objects -v | awk '/^in-pack:/ {print $2}') objects"

echo "== git repack -adf --depth=50 --window=50"
git -C "$tmp" repack -adf --depth=50 --window=50 --quiet
git -C "$tmp" prune-packed
git -C "$tmp" pack-refs --all
t_repack=$((SECONDS - start - t_import))
echo "   repack took ${t_repack}s"

echo "== git fsck --connectivity-only"
git -C "$tmp" fsck --connectivity-only --no-progress

echo "$params" > "$tmp/$marker"
mv "$tmp" "$dest"
trap - EXIT
echo "== done in $((SECONDS - start))s (import ${t_import}s, repack ${t_repack}s)"
summary "$dest"
