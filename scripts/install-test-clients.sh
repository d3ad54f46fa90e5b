#!/usr/bin/env bash
# Installs the git client implementations that crates/packd/tests/clients.rs runs against
# `packd serve`, each pinned, into a cache that later runs reuse:
#
#   CACHE/python/       a venv with dulwich and pygit2 (tests/clients/python/requirements.txt)
#   CACHE/jgit/lib/     JGit and its dependencies from Maven Central (tests/clients/jgit/pom.xml)
#   CACHE/jgit/classes/ tests/clients/jgit/Client.java compiled against them
#   CACHE/go-git/       tests/clients/go-git built with `go build` (go.mod/go.sum pin go-git)
#
# CACHE is $1, else $PACKD_TEST_CLIENTS_DIR, else ~/.cache/packd-test-clients. Each part is
# redone only when its inputs (the files named above and this script) change: a part that is
# ready has CACHE/PART/ready holding the hash of its inputs. Parts are independent: one that
# fails (a registry refusing a package) is reported and the others are still installed; the
# exit status is then 1. The parts install at once; the script runs under a lock, so
# concurrent runs wait for each other.
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
clients="$here/tests/clients"
cache="${1:-${PACKD_TEST_CLIENTS_DIR:-$HOME/.cache/packd-test-clients}}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# The hash of a part's inputs: its files and this script.
inputs_hash() {
    cat "$0" "$@" | sha256sum | cut -d' ' -f1
}

# `install_part NAME INSTALL_FUNCTION INPUT...`: runs the function unless NAME is ready with
# the same inputs; the function works in a fresh CACHE/NAME.tmp, renamed to CACHE/NAME.
install_part() {
    local name="$1" fn="$2"
    shift 2
    local want
    want="$(inputs_hash "$@")"
    if [ "$(cat "$cache/$name/ready" 2>/dev/null)" = "$want" ]; then
        echo "$name: ready"
        return 0
    fi
    local start=$SECONDS
    rm -rf "$cache/$name.tmp"
    mkdir -p "$cache/$name.tmp"
    if "$fn" "$cache/$name.tmp" >"$cache/$name.log" 2>&1; then
        echo "$want" >"$cache/$name.tmp/ready"
        rm -rf "$cache/$name"
        mv "$cache/$name.tmp" "$cache/$name"
        echo "$name: installed in $((SECONDS - start)) s"
    else
        echo "$name: FAILED (log: $cache/$name.log):" >&2
        tail -n 20 "$cache/$name.log" >&2
        return 1
    fi
}

python_part() {
    local dir="$1"
    # The venv is made in its final place (a venv cannot be moved): CACHE/python.tmp is
    # renamed, so make it at CACHE/python and leave only the stamp in the temporary directory.
    rm -rf "$cache/python.venv.tmp"
    "${PYTHON:-python3}" -m venv "$cache/python.venv.tmp" &&
        "$cache/python.venv.tmp/bin/pip" install --quiet --disable-pip-version-check \
            --no-input -r "$clients/python/requirements.txt" &&
        "$cache/python.venv.tmp/bin/python" -c 'import dulwich, pygit2' &&
        rm -rf "$cache/python.venv" &&
        mv "$cache/python.venv.tmp" "$cache/python.venv" &&
        ln -s ../python.venv "$dir/venv"
}

jgit_part() {
    local dir="$1"
    mvn --batch-mode --quiet --file "$clients/jgit/pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DoutputDirectory="$dir/lib" &&
        javac -d "$dir/classes" -cp "$dir/lib/*" "$clients/jgit/Client.java"
}

go_git_part() {
    local dir="$1"
    (cd "$clients/go-git" && go build -mod=readonly -trimpath -o "$dir/go-git-client" .)
}

# The parts at once: two wait on a registry, go-git mostly on the compiler.
install_part python python_part "$clients/python/requirements.txt" &
python=$!
install_part jgit jgit_part "$clients/jgit/pom.xml" "$clients/jgit/Client.java" &
jgit=$!
install_part go-git go_git_part "$clients/go-git/go.mod" "$clients/go-git/go.sum" \
    "$clients/go-git/main.go" &
go_git=$!
status=0
for part in $python $jgit $go_git; do
    wait "$part" || status=1
done
exit $status
