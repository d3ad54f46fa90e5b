# Repository copies shared by the benchmarks (sourced; expects $data to be set), and the
# installed copy of packd they run.

# BINARY copied to bench/data/bin/NAME, as an installed binary would be; prints its path. The
# file the linker wrote costs every process more page faults (165 against 148 for a copy of the
# same bytes: its page cache is in smaller folios), 0.15 ms more CPU per start.
installed_copy() {
  mkdir -p "$data/bin"
  install -m 755 "$1" "$data/bin/$2"
  echo "$data/bin/$2"
}

# SRC's fingerprint: its refs (a copy is rebuilt when they changed, e.g. another SPIKES).
refs_fingerprint() {
  git -C "$1" for-each-ref | md5sum | cut -d' ' -f1
}

# DEST made afresh as a mirror clone of SRC (hard links, so quick).
mirror_copy() {
  local src=$1 dest=$2
  rm -rf "$dest"
  git clone -q --bare --mirror "$src" "$dest"
  # A snapshot fetched as a partial clone marks its pack as a promisor pack; repack keeps
  # such objects apart and then writes no bitmap. The copy is a full repository: unmark it.
  rm -f "$dest"/objects/pack/*.promisor
}

# A copy of REPO whose single pack has bitmaps, with or without the lookup table.
bitmapped_copy() {
  local src=$1 table=$2 name
  name=$(basename "$src" .git)-$table
  local dest=$data/reach-$name.git
  local fingerprint
  fingerprint=$(refs_fingerprint "$src")
  if [[ $(cat "$dest/.reach-done" 2>/dev/null) != "$fingerprint" ]]; then
    mirror_copy "$src" "$dest"
    # A fetched snapshot's refs/pull/* may reach objects the snapshot lacks (git/git's do), and
    # repack then refuses to write bitmaps. This copy drops them all (the spiky repository is
    # the many-refs case; full_copy below keeps all but the broken ones). Refs whose commit is
    # missing go too.
    if [[ $src != "$data/spiky.git" ]]; then
      git -C "$dest" for-each-ref --format='delete %(refname)' refs/pull | git -C "$dest" update-ref --stdin
    fi
    git -C "$dest" for-each-ref --format='%(refname)' | while read -r ref; do
      git -C "$dest" cat-file -e "$ref^{commit}" 2>/dev/null || git -C "$dest" update-ref -d "$ref"
    done
    git -C "$dest" -c pack.writeBitmapLookupTable="$table" -c pack.writeBitmapHashCache=true \
      repack -adb -q
    echo "$fingerprint" > "$dest/.reach-done"
  fi
  echo "$dest"
}

# A copy of REPO with every ref but those reaching objects the snapshot lacks (git/git's 12
# broken refs/pull/* refs; bench/lib/broken_refs.py finds them): the issue's own full-clone
# setting (git/git: 4,282 refs, 841,300 objects in one bitmapped pack), where a mirror clone sends the whole pack.
full_copy() {
  local src=$1 name
  name=$(basename "$src" .git)
  local dest=$data/full-$name.git
  local fingerprint
  fingerprint=$(refs_fingerprint "$src")
  if [[ $(cat "$dest/.full-done" 2>/dev/null) != "$fingerprint" ]]; then
    mirror_copy "$src" "$dest"
    python3 "$(dirname "${BASH_SOURCE[0]}")/broken_refs.py" "$dest" \
      | sed 's/^/delete /' | git -C "$dest" update-ref --stdin
    git -C "$dest" -c pack.writeBitmapLookupTable=true -c pack.writeBitmapHashCache=true \
      repack -adb -q
    echo "$fingerprint" > "$dest/.full-done"
  fi
  echo "$dest"
}

# A copy of full_copy's repository (hard links) whose bitmaps packd wrote with --every-tip:
# every ref tip, the pull-request refs too, has one (git/git: 4,380 bitmaps, 11.8 MB). Both
# servers read the same files. Prints its path; the time the bitmaps took goes to stderr.
every_tip_copy() {
  local full=$1 packd=$2 name
  name=$(basename "$full" .git)
  local dest=$data/$name-every-tip.git
  # Rebuilt when the full copy's refs or pack, or packd's binary (its bitmap writer), changed.
  local fingerprint
  fingerprint="$(cat "$full/.full-done") $(cd "$full/objects/pack" && ls ./*.pack) $(md5sum < "$packd")"
  if [[ $(cat "$dest/.every-tip-done" 2>/dev/null) != "$fingerprint" ]]; then
    rm -rf "$dest"
    cp -al "$full" "$dest"
    rm -f "$dest/.full-done"
    # write-bitmap replaces the .bitmap and .rev by renaming new files over the links.
    local start=$SECONDS
    "$packd" -C "$dest" write-bitmap --every-tip -q
    echo "every-tip bitmaps written in $((SECONDS - start)) s" >&2
    echo "$fingerprint" > "$dest/.every-tip-done"
  fi
  echo "$dest"
}

# A copy of REPO (hard links) whose pack has a `.rev` that git wrote (`git index-pack
# --rev-index`): git 2.41 and later write one on every repack, and a process that reads it
# need not sort the pack's offsets (git 2.39 reads it too). Prints its path.
rev_copy() {
  local src=$1 name
  name=$(basename "$src" .git)
  local dest=$data/$name-rev.git
  local fingerprint
  fingerprint="$(refs_fingerprint "$src") $(cd "$src/objects/pack" && ls ./*.pack)"
  if [[ $(cat "$dest/.rev-done" 2>/dev/null) != "$fingerprint" ]]; then
    rm -rf "$dest"
    # Called as $(rev_copy ...), where `set -e` does not stop a function: each step says.
    cp -al "$src" "$dest" || return 1
    rm -f "$dest"/.*-done
    local pack
    for pack in "$dest"/objects/pack/*.pack; do
      # index-pack writes the .idx again (the same bytes) and the .rev beside it.
      rm -f "${pack%.pack}.idx" "${pack%.pack}.rev"
      git index-pack --rev-index "$pack" > /dev/null || return 1
    done
    echo "$fingerprint" > "$dest/.rev-done"
  fi
  echo "$dest"
}
