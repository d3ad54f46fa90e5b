//! Commit checks, in git's order (`fsck_commit`); most stop at the first error.
//!
//! ```text
//! "tree <hex>\n" ("parent <hex>\n")* "author <ident>\n" "committer <ident>\n" ... "\n" message
//! ```
//! and, for commits and tags alike, a header free of NUL bytes that ends with a line feed.

use crate::ident::{at, check_ident};
use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::ObjectId;

/// git's `verify_headers`: a NUL before the blank line, or a header without its final line
/// feed, is fatal. True when an error was reported.
pub(crate) fn check_headers(data: &[u8], id: &ObjectId, report: &mut Report<'_>) -> bool {
    for (i, &b) in data.iter().enumerate() {
        match b {
            0 => {
                return report.report(
                    id,
                    MsgId::NulInHeader,
                    &format!("unterminated header: NUL at offset {i}"),
                )
            }
            b'\n' if data.get(i + 1) == Some(&b'\n') => return false,
            _ => {}
        }
    }
    if data.last() == Some(&b'\n') {
        return false;
    }
    report.report(id, MsgId::UnterminatedHeader, "unterminated header")
}

/// Whether 40 hex digits (either case, as git's `get_oid_hex` takes them) start at `i`.
pub(crate) fn hex_id_at(data: &[u8], i: usize) -> bool {
    (0..40).all(|k| at(data, i + k).is_ascii_hexdigit())
}

/// Where the next line starts after position `i` (past the end when there is none).
pub(crate) fn next_line(data: &[u8], i: usize) -> usize {
    match data
        .get(i..)
        .and_then(|r| r.iter().position(|&b| b == b'\n'))
    {
        Some(nl) => i + nl + 1,
        None => data.len(),
    }
}

/// Checks a commit. True when an error was reported.
pub(crate) fn check_commit(id: &ObjectId, data: &[u8], report: &mut Report<'_>) -> bool {
    if check_headers(data, id, report) {
        return true;
    }
    let Some(mut rest) = data.strip_prefix(b"tree ") else {
        return report.report(
            id,
            MsgId::MissingTree,
            "invalid format - expected 'tree' line",
        );
    };
    // After an id line: the next line (git reads past the 40 digits and one byte).
    let id_line = |rest: &[u8], report: &mut Report<'_>, msg: MsgId, what: &str| {
        if !hex_id_at(rest, 0) || at(rest, 40) != b'\n' {
            if report.report(id, msg, &format!("invalid '{what}' line format - bad sha1")) {
                return None;
            }
            return Some(next_line(rest, 0));
        }
        Some(41)
    };
    match id_line(rest, report, MsgId::BadTreeSha1, "tree") {
        Some(n) => rest = &rest[n.min(rest.len())..],
        None => return true,
    }
    while let Some(after) = rest.strip_prefix(b"parent ") {
        match id_line(after, report, MsgId::BadParentSha1, "parent") {
            Some(n) => rest = &after[n.min(after.len())..],
            None => return true,
        }
    }
    let mut authors = 0;
    while let Some(after) = rest.strip_prefix(b"author ") {
        authors += 1;
        rest = after;
        if check_ident(&mut rest, id, report) {
            return true;
        }
    }
    let err = match authors {
        0 => report.report(
            id,
            MsgId::MissingAuthor,
            "invalid format - expected 'author' line",
        ),
        1 => false,
        _ => report.report(
            id,
            MsgId::MultipleAuthors,
            "invalid format - multiple 'author' lines",
        ),
    };
    if err {
        return true;
    }
    let Some(after) = rest.strip_prefix(b"committer ") else {
        return report.report(
            id,
            MsgId::MissingCommitter,
            "invalid format - expected 'committer' line",
        );
    };
    rest = after;
    if check_ident(&mut rest, id, report) {
        return true;
    }
    if data.contains(&0)
        && report.report(id, MsgId::NulInCommit, "NUL byte in the commit object body")
    {
        return true;
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::options::FsckOptions;

    pub(crate) fn ids(
        check: fn(&ObjectId, &[u8], &mut Report<'_>) -> bool,
        data: &[u8],
    ) -> Vec<String> {
        let options = FsckOptions::strict();
        let mut report = Report::new(&options);
        check(&ObjectId::NULL, data, &mut report);
        report
            .lines
            .iter()
            .map(|l| l.split(": ").nth(2).unwrap().to_string())
            .collect()
    }

    const TREE: &str = "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n";
    const WHO: &str = "A <a@x> 1 +0000\n";

    #[test]
    fn commits_as_git_checks_them() {
        let ok = format!("{TREE}author {WHO}committer {WHO}\nmsg\n");
        assert!(ids(check_commit, ok.as_bytes()).is_empty());
        let cases = [
            (format!("author {WHO}committer {WHO}\n"), "missingTree"),
            (
                format!("tree 4b825dc6\nauthor {WHO}committer {WHO}\n"),
                "badTreeSha1",
            ),
            (
                format!("{TREE}parent zz\nauthor {WHO}committer {WHO}\n"),
                "badParentSha1",
            ),
            (format!("{TREE}committer {WHO}\n"), "missingAuthor"),
            (
                format!("{TREE}author {WHO}author {WHO}committer {WHO}\n"),
                "multipleAuthors",
            ),
            (format!("{TREE}author {WHO}\n"), "missingCommitter"),
            (
                format!("{TREE}author {WHO}committer {WHO}\nm\0sg\n"),
                "nulInCommit",
            ),
            (
                format!("{TREE}author {WHO}committer A <a@x> 1 +0000"),
                "unterminatedHeader",
            ),
            (
                format!("{TREE}author A <a@x> 1 +0000\0\ncommitter {WHO}\n"),
                "nulInHeader",
            ),
        ];
        for (data, id) in cases {
            assert_eq!(ids(check_commit, data.as_bytes()), [id], "{data:?}");
        }
    }
}
