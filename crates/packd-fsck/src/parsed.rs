//! What git's object parsers refuse before its fsck checks see an object: with
//! `receive.fsckObjects`, git's unpacker parses each commit and tag (`parse_commit_buffer`,
//! `parse_tag_buffer`) and dies with `fatal: invalid commit` / `invalid tag` when that fails,
//! after the `error:` line the parser printed (if any).
//!
//! ```text
//! commit  "tree " <40 hex> "\n" (more than 46 bytes in all)  else "bogus commit object <id>"
//!                                                             or "bad tree pointer in commit"
//!         ("parent " <40 hex> "\n")*                          else "bad parents in commit <id>"
//! tag     at least 64 bytes; "object " <40 hex> "\n" "type " <under 20 bytes> "\n"
//!         the type one of commit/tree/blob/tag                else "unknown tag type '<t>' in <id>"
//!         "tag " ... "\n"                                     (the other failures print nothing)
//! ```

use crate::commit::hex_id_at;
use packd_odb::{ObjectId, ObjectKind};

/// Why git's parser refused an object: its `error:` lines (possibly none) and its `fatal:` text.
pub(crate) struct ParseRefusal {
    pub lines: Vec<String>,
    pub fatal: &'static str,
}

/// git's parse of a commit or tag before fsck; `Err` when git's unpacker would die of it.
pub(crate) fn git_parse(id: &ObjectId, kind: ObjectKind, data: &[u8]) -> Result<(), ParseRefusal> {
    let refuse = |line: Option<String>, fatal| ParseRefusal {
        lines: line.map(|l| format!("error: {l}")).into_iter().collect(),
        fatal,
    };
    match kind {
        ObjectKind::Commit => {
            let fail = |what: String| Err(refuse(Some(what), "invalid commit"));
            if data.len() <= 46 || !data.starts_with(b"tree ") || data[45] != b'\n' {
                return fail(format!("bogus commit object {id}"));
            }
            if !hex_id_at(data, 5) {
                return fail(format!("bad tree pointer in commit {id}"));
            }
            let mut at = 46;
            while at + 47 < data.len() && data[at..].starts_with(b"parent ") {
                if data.len() <= at + 48 || !hex_id_at(data, at + 7) || data[at + 47] != b'\n' {
                    return fail(format!("bad parents in commit {id}"));
                }
                at += 48;
            }
            Ok(())
        }
        ObjectKind::Tag => {
            let silent = || Err(refuse(None, "invalid tag"));
            if data.len() < 64
                || !data.starts_with(b"object ")
                || !hex_id_at(data, 7)
                || data[47] != b'\n'
            {
                return silent();
            }
            let Some(rest) = data[48..].strip_prefix(b"type ") else {
                return silent();
            };
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                return silent();
            };
            if nl >= 20 {
                return silent();
            }
            let kind = &rest[..nl];
            let kind = match kind.iter().position(|&b| b == 0) {
                Some(nul) => &kind[..nul],
                None => kind,
            };
            if !matches!(kind, b"commit" | b"tree" | b"blob" | b"tag") {
                let kind = String::from_utf8_lossy(kind);
                return Err(refuse(
                    Some(format!("unknown tag type '{kind}' in {id}")),
                    "invalid tag",
                ));
            }
            let rest = &rest[nl + 1..];
            if rest.len() <= 4 || !rest.starts_with(b"tag ") {
                return silent();
            }
            if !rest[4..].contains(&b'\n') {
                return silent();
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
