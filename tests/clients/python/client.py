"""Drives dulwich or pygit2 (libgit2) for packd's client matrix test
(crates/packd/tests/clients.rs): the same four operations as the other drivers.

    client.py LIB clone URL DIR       a bare clone
    client.py LIB shallow URL DIR     a bare clone of depth 1
    client.py LIB fetch DIR           fetch from origin
    client.py LIB push DIR REFSPEC    push REFSPEC to origin

LIB is `dulwich` or `pygit2`. Any error, and any ref the server refuses, exits 1 with the
reason on stderr.
"""

import io
import sys


class Refused(Exception):
    """The operation ran but did not do what was asked (a ref refused, nothing fetched)."""


def dulwich_op(op, args):
    from dulwich import porcelain

    quiet = io.BytesIO()
    if op in ("clone", "shallow"):
        url, path = args
        depth = 1 if op == "shallow" else None
        porcelain.clone(url, path, bare=True, depth=depth, errstream=quiet).close()
    elif op == "fetch":
        (path,) = args
        result = porcelain.fetch(path, "origin", outstream=io.StringIO(), errstream=quiet)
        if not result.refs:
            raise Refused("fetch found no refs")
    elif op == "push":
        path, refspec = args
        result = porcelain.push(
            path, "origin", refspecs=[refspec], outstream=quiet, errstream=quiet
        )
        failed = {r: e for r, e in (result.ref_status or {}).items() if e is not None}
        if failed or not result.ref_status:
            raise Refused(f"push refused: {failed or 'no ref reported'}")
    else:
        raise Refused(f"unknown operation {op}")


def pygit2_op(op, args):
    import pygit2

    if op in ("clone", "shallow"):
        url, path = args
        depth = 1 if op == "shallow" else 0
        pygit2.clone_repository(url, path, bare=True, depth=depth)
    elif op == "fetch":
        (path,) = args
        stats = pygit2.Repository(path).remotes["origin"].fetch()
        if stats.received_objects == 0:
            raise Refused("fetch received no objects")
    elif op == "push":
        path, refspec = args
        refusals = []
        updated = []

        class Callbacks(pygit2.RemoteCallbacks):
            def push_update_reference(self, refname, message):
                (refusals if message else updated).append((refname, message))

        pygit2.Repository(path).remotes["origin"].push([refspec], callbacks=Callbacks())
        if refusals or not updated:
            raise Refused(f"push refused: {refusals or 'no ref reported'}")
    else:
        raise Refused(f"unknown operation {op}")


def main(argv):
    if len(argv) < 3 or argv[0] not in ("dulwich", "pygit2"):
        print(__doc__, file=sys.stderr)
        return 2
    lib, op, args = argv[0], argv[1], argv[2:]
    try:
        (dulwich_op if lib == "dulwich" else pygit2_op)(op, args)
    except Exception as e:  # every failure is the test's finding: say it, exit 1
        print(f"{lib}-client: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
