//! Tree checks (git's `fsck_tree`), the links a tree has (git's `fsck_walk_tree`), and the
//! entries that make a blob one to check as `.gitmodules` or `.gitattributes`.
//!
//! ```text
//! tree   (<octal mode> SP <name> NUL <20-byte id>)*
//! modes  100644 100755 120000 40000 160000 standard; 100664 a bad mode in strict mode;
//!        a mode written with a leading 0 is zero-padded
//! order  names compared bytewise, a directory as if it ended in '/'; no name twice (a file
//!        and a directory of one name included, however far apart they sort)
//! links  directories (trees) and files and symlinks (blobs); gitlinks and unknown modes none
//! ```
//! An entry is cut as git's `decode_tree_entry` cuts it: what remains must hold at least 23
//! bytes and a NUL 21 bytes before its end, the mode is octal digits up to a space (none
//! before it), the name is not empty.

use crate::dotgit::{is_dotgit, is_ntfs_dotgit, is_ntfs_special, is_special, Special};
use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::{ObjectId, ObjectKind};

const S_IFMT: u32 = 0o170000;

/// One entry as git cuts it.
struct Entry<'a> {
    mode: u32,
    name: &'a [u8],
    id: ObjectId,
    /// The entry's length in the tree.
    len: usize,
    /// Whether the name holds a '/' or a '\\' (found while looking for its end).
    slash: bool,
    backslash: bool,
}

/// git's `decode_tree_entry` on what remains of a tree; `Err` is git's message.
fn decode(rest: &[u8]) -> Result<Entry<'_>, &'static str> {
    const SHORT: &str = "too-short tree object";
    const MODE: &str = "malformed mode in tree entry";
    let size = rest.len();
    if size < 23 || rest[size - 21] != 0 {
        return Err(SHORT);
    }
    if rest[0] == b' ' {
        return Err(MODE);
    }
    let mut mode: u32 = 0;
    let mut i = 0;
    loop {
        let c = rest[i];
        i += 1;
        if c == b' ' {
            break;
        }
        if !(b'0'..=b'7').contains(&c) {
            return Err(MODE);
        }
        mode = mode.wrapping_shl(3).wrapping_add((c - b'0') as u32);
    }
    // There is a NUL 21 bytes before the end: the name ends by then, with room for the id.
    // One pass to the name's end, noting the separators the checks ask about.
    let (mut slash, mut backslash) = (false, false);
    let mut nul = i;
    loop {
        match rest.get(nul) {
            None => return Err(SHORT),
            Some(0) => break,
            Some(b'/') => slash = true,
            Some(b'\\') => backslash = true,
            Some(_) => {}
        }
        nul += 1;
    }
    if nul == i {
        return Err("empty filename in tree entry");
    }
    let id = ObjectId::from_bytes(&rest[nul + 1..nul + 21]).ok_or(SHORT)?;
    Ok(Entry {
        mode,
        name: &rest[i..nul],
        id,
        len: nul + 21,
        slash,
        backslash,
    })
}

/// What the tree links to (objects that must be present) and the special blobs it names.
#[derive(Debug, Default)]
pub(crate) struct TreeLinks {
    /// Trees and blobs the entries name, with the kind their mode says.
    pub links: Vec<(ObjectId, ObjectKind)>,
    /// Objects named `.gitmodules` / `.gitattributes` (any alias), not symlinks: to be checked
    /// as such blobs once every tree is.
    pub marked: Vec<(ObjectId, Special)>,
    /// Whether every entry could be cut (else the links are those before the bad one).
    pub complete: bool,
}

/// The kind of object a mode links to, as git's walk reads it (`None`: no link).
fn linked_kind(mode: u32) -> Option<ObjectKind> {
    match mode & S_IFMT {
        0o040000 => Some(ObjectKind::Tree),
        0o100000 | 0o120000 => Some(ObjectKind::Blob),
        _ => None,
    }
}

/// The links of a tree without checking it (fsck off): `None` when it cannot be parsed.
pub(crate) fn tree_links(data: &[u8], links: &mut TreeLinks) -> Option<()> {
    let mut rest = data;
    while !rest.is_empty() {
        let entry = decode(rest).ok()?;
        if let Some(kind) = linked_kind(entry.mode) {
            links.links.push((entry.id, kind));
        }
        rest = &rest[entry.len..];
    }
    links.complete = true;
    Some(())
}

fn less_than_slash(c: u8) -> bool {
    c != 0 && c < b'/'
}

/// git's `verify_ordered` of two consecutive entries; `candidates` holds the files that a
/// later directory of the same name would duplicate.
fn verify_ordered<'a>(
    (mode1, name1): (u32, &'a [u8]),
    (mode2, name2): (u32, &'a [u8]),
    candidates: &mut Vec<&'a [u8]>,
) -> Result<(), MsgId> {
    let len = name1.len().min(name2.len());
    match name1[..len].cmp(&name2[..len]) {
        std::cmp::Ordering::Less => return Ok(()),
        std::cmp::Ordering::Greater => return Err(MsgId::TreeNotSorted),
        std::cmp::Ordering::Equal => {}
    }
    let mut c1 = name1.get(len).copied().unwrap_or(0);
    let mut c2 = name2.get(len).copied().unwrap_or(0);
    if c1 == 0 && c2 == 0 {
        return Err(MsgId::DuplicateEntries);
    }
    if c1 == 0 && mode1 & S_IFMT == 0o040000 {
        c1 = b'/';
    }
    if c2 == 0 && mode2 & S_IFMT == 0o040000 {
        c2 = b'/';
    }
    if c1 == 0 && less_than_slash(c2) {
        candidates.push(name1);
    } else if c2 == b'/' && less_than_slash(c1) {
        while let Some(file) = candidates.pop() {
            let Some(rest) = name2.strip_prefix(file) else {
                continue;
            };
            match rest.first() {
                None => return Err(MsgId::DuplicateEntries),
                Some(&c) if less_than_slash(c) => {
                    candidates.push(file);
                    break;
                }
                Some(_) => {}
            }
        }
    }
    if c1 < c2 {
        Ok(())
    } else {
        Err(MsgId::TreeNotSorted)
    }
}

/// Whether `name` can be an alias of `.git` or of a special file at all: every alias starts
/// with '.', 'g' or 'm' (either case), or with an HFS+-ignored code point (0xE2 or 0xEF
/// lead byte). Most names are not, and skip the eight alias checks.
fn may_be_alias(name: &[u8]) -> bool {
    matches!(
        name.first(),
        Some(b'.' | b'g' | b'G' | b'm' | b'M' | 0xe2 | 0xef)
    )
}

/// What one tree's entries showed, reported once each after the walk, as git does.
#[derive(Default)]
struct Seen {
    null_sha1: bool,
    full_path: bool,
    empty_name: bool,
    dot: bool,
    dotdot: bool,
    dotgit: bool,
    zero_pad: bool,
    bad_modes: bool,
    duplicates: bool,
    unsorted: bool,
}

/// Checks a tree and collects its links and special blobs. True when an error was reported.
pub(crate) fn check_tree(
    id: &ObjectId,
    data: &[u8],
    report: &mut Report<'_>,
    out: &mut TreeLinks,
) -> bool {
    let mut err = false;
    // git prints the decoder's complaint, then reports the tree.
    let cannot_parse = |report: &mut Report<'_>, why: &str| {
        report.raw(format!("error: {why}"));
        report.report(id, MsgId::BadTree, "cannot be parsed as a tree")
    };
    if data.is_empty() {
        out.complete = true;
        return false;
    }
    let mut entry = match decode(data) {
        Ok(entry) => entry,
        Err(why) => return cannot_parse(report, why),
    };
    let mut seen = Seen::default();
    let mut rest = data;
    let mut previous: Option<(u32, &[u8])> = None;
    let mut candidates = Vec::new();
    loop {
        let Entry {
            mode,
            name,
            id: entry_id,
            len,
            slash,
            backslash,
        } = entry;
        let symlink = mode & S_IFMT == 0o120000;
        seen.null_sha1 |= entry_id == ObjectId::NULL;
        seen.full_path |= slash;
        seen.empty_name |= name.is_empty();
        seen.dot |= name == b".";
        seen.dotdot |= name == b"..";
        let alias = may_be_alias(name);
        seen.dotgit |= alias && is_dotgit(name);
        seen.zero_pad |= rest[0] == b'0';
        let mark = |which: Special, report: &mut Report<'_>, out: &mut TreeLinks| {
            if !symlink {
                out.marked.push((entry_id, which));
                return false;
            }
            match which {
                Special::Gitmodules => report.report(
                    id,
                    MsgId::GitmodulesSymlink,
                    ".gitmodules is a symbolic link",
                ),
                _ => report.report(
                    id,
                    MsgId::GitattributesSymlink,
                    ".gitattributes is a symlink",
                ),
            }
        };
        if alias && is_special(name, Special::Gitmodules) {
            err |= mark(Special::Gitmodules, report, out);
        }
        if alias && is_special(name, Special::Gitattributes) {
            err |= mark(Special::Gitattributes, report, out);
        }
        if alias && symlink {
            if is_special(name, Special::Gitignore) {
                err |= report.report(id, MsgId::GitignoreSymlink, ".gitignore is a symlink");
            }
            if is_special(name, Special::Mailmap) {
                err |= report.report(id, MsgId::MailmapSymlink, ".mailmap is a symlink");
            }
        }
        // Backslashes: NTFS reads them as directory separators.
        if backslash {
            for (at, _) in name.iter().enumerate().filter(|(_, &b)| b == b'\\') {
                let after = &name[at + 1..];
                seen.dotgit |= is_ntfs_dotgit(after);
                if is_ntfs_special(after, Special::Gitmodules) {
                    err |= mark(Special::Gitmodules, report, out);
                }
            }
        }
        if let Some(kind) = linked_kind(mode) {
            out.links.push((entry_id, kind));
        }
        rest = &rest[len..];
        let next = if rest.is_empty() {
            out.complete = true;
            None
        } else {
            match decode(rest) {
                Ok(e) => Some(e),
                Err(why) => {
                    err |= cannot_parse(report, why);
                    break;
                }
            }
        };
        match mode {
            0o100755 | 0o100644 | 0o120000 | 0o040000 | 0o160000 => {}
            _ => seen.bad_modes = true,
        }
        if let Some(prev) = previous {
            match verify_ordered(prev, (mode, name), &mut candidates) {
                Err(MsgId::TreeNotSorted) => seen.unsorted = true,
                Err(_) => seen.duplicates = true,
                Ok(()) => {}
            }
        }
        previous = Some((mode, name));
        match next {
            Some(e) => entry = e,
            None => break,
        }
    }
    let findings = [
        (
            seen.null_sha1,
            MsgId::NullSha1,
            "contains entries pointing to null sha1",
        ),
        (
            seen.full_path,
            MsgId::FullPathname,
            "contains full pathnames",
        ),
        (seen.empty_name, MsgId::EmptyName, "contains empty pathname"),
        (seen.dot, MsgId::HasDot, "contains '.'"),
        (seen.dotdot, MsgId::HasDotdot, "contains '..'"),
        (seen.dotgit, MsgId::HasDotgit, "contains '.git'"),
        (
            seen.zero_pad,
            MsgId::ZeroPaddedFilemode,
            "contains zero-padded file modes",
        ),
        (
            seen.bad_modes,
            MsgId::BadFilemode,
            "contains bad file modes",
        ),
        (
            seen.duplicates,
            MsgId::DuplicateEntries,
            "contains duplicate file entries",
        ),
        (seen.unsorted, MsgId::TreeNotSorted, "not properly sorted"),
    ];
    for (found, msg, text) in findings {
        if found {
            err |= report.report(id, msg, text);
        }
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::FsckOptions;

    fn tree(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut t = Vec::new();
        for (mode, name) in entries {
            t.extend_from_slice(mode.as_bytes());
            t.push(b' ');
            t.extend_from_slice(name);
            t.push(0);
            t.extend_from_slice(&[7u8; 20]);
        }
        t
    }

    fn ids(data: &[u8]) -> (Vec<String>, TreeLinks) {
        let options = FsckOptions::strict();
        let mut report = Report::new(&options);
        let mut links = TreeLinks::default();
        check_tree(&ObjectId::NULL, data, &mut report, &mut links);
        let ids = report
            .lines
            .iter()
            .filter_map(|l| l.split(": ").nth(2).map(str::to_string))
            .collect();
        (ids, links)
    }

    #[test]
    fn trees_as_git_checks_them() {
        let good = tree(&[
            ("100644", b"a"),
            ("40000", b"a-b"),
            ("40000", b"a.d"),
            ("100644", b"b"),
        ]);
        let (found, links) = ids(&good);
        assert!(found.is_empty());
        assert_eq!(links.links.len(), 4);
        let cases: Vec<(Vec<u8>, Vec<&str>)> = vec![
            (
                tree(&[("100644", b"b"), ("100644", b"a")]),
                vec!["treeNotSorted"],
            ),
            (
                tree(&[("100644", b"a"), ("100644", b"a")]),
                vec!["duplicateEntries"],
            ),
            (
                tree(&[("100644", b"a"), ("100644", b"a.b"), ("40000", b"a")]),
                vec!["duplicateEntries"],
            ),
            (tree(&[("100664", b"a")]), vec!["badFilemode"]),
            (tree(&[("100600", b"a")]), vec!["badFilemode"]),
            (tree(&[("0100644", b"a")]), vec!["zeroPaddedFilemode"]),
            (tree(&[("100644", b".")]), vec!["hasDot"]),
            (tree(&[("100644", b"..")]), vec!["hasDotdot"]),
            (tree(&[("40000", b".GIT")]), vec!["hasDotgit"]),
            (tree(&[("40000", b"a\\git~1")]), vec!["hasDotgit"]),
            (tree(&[("100644", b"a/b")]), vec!["fullPathname"]),
            (
                tree(&[("120000", b".gitmodules")]),
                vec!["gitmodulesSymlink"],
            ),
            (
                tree(&[("120000", b".gitattributes")]),
                vec!["gitattributesSymlink"],
            ),
            (tree(&[("120000", b".gitignore")]), vec!["gitignoreSymlink"]),
            (tree(&[("120000", b".mailmap")]), vec!["mailmapSymlink"]),
            (b"100644 a\0".to_vec(), vec!["badTree"]),
        ];
        for (data, want) in cases {
            assert_eq!(ids(&data).0, want, "{:?}", String::from_utf8_lossy(&data));
        }
        let (_, links) = ids(&tree(&[("100644", b"GITMOD~1"), ("160000", b"sub")]));
        assert_eq!(links.marked.len(), 1);
        assert_eq!(links.links.len(), 1, "a gitlink is no link");
        let mut t = tree(&[("100644", b"a")]);
        t.extend_from_slice(b"100644 b\0");
        let (found, _) = ids(&t);
        assert_eq!(found, ["badTree"]);
    }
}
