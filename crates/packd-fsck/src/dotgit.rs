//! The names under which a filesystem git guards would open `.git`, `.gitmodules`,
//! `.gitattributes`, `.gitignore` or `.mailmap` (git's `is_hfs_dot*` and `is_ntfs_dot*`).
//!
//! ```text
//! HFS+   case-insensitive; these code points ignored anywhere: U+200C..U+200F, U+202A..U+202E,
//!        U+206A..U+206F, U+FEFF ('.g\u200cit' is '.git'); malformed UTF-8 ends the name
//! NTFS   case-insensitive; trailing spaces and dots dropped ('.git. .'); an alternate data
//!        stream after ':' ('.git::$INDEX_ALLOCATION'); 8.3 short names: 'git~1' for .git,
//!        the first six letters + '~1'..'~4' ('gitmod~1'), or a fall-back hashed prefix + '~N'
//!        ('gi7eba~9' for .gitmodules)
//! ```
//! Names are taken as C strings: up to their first NUL byte.

use crate::ident::at;

/// Which special file a name is an alias of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `.gitmodules`.
    Gitmodules,
    /// `.gitattributes`.
    Gitattributes,
    /// `.gitignore`.
    Gitignore,
    /// `.mailmap`.
    Mailmap,
}

impl Special {
    /// The name without its dot, as NTFS's long-name comparison uses it.
    fn name(self) -> &'static [u8] {
        match self {
            Special::Gitmodules => b"gitmodules",
            Special::Gitattributes => b"gitattributes",
            Special::Gitignore => b"gitignore",
            Special::Mailmap => b"mailmap",
        }
    }

    /// The fall-back NTFS short-name prefix Windows derives for it.
    fn ntfs_prefix(self) -> &'static [u8] {
        match self {
            Special::Gitmodules => b"gi7eba",
            Special::Gitattributes => b"gi7d29",
            Special::Gitignore => b"gi250a",
            Special::Mailmap => b"maba30",
        }
    }
}

/// One code point of `s` from `*i` as git's `pick_one_utf8_char` reads it (0 at the end), or
/// `None` for malformed UTF-8 (git's overlong, surrogate and U+FFFE/U+FFFF rules).
fn next_utf8(s: &[u8], i: &mut usize) -> Option<u32> {
    let b = |k: usize| at(s, *i + k) as u32;
    let cont = |k: usize| at(s, *i + k) & 0xc0 == 0x80;
    let (ch, len) = match b(0) {
        c if c < 0x80 => (c, 1),
        c if c & 0xe0 == 0xc0 => {
            if !cont(1) || c & 0xfe == 0xc0 {
                return None;
            }
            ((c & 0x1f) << 6 | (b(1) & 0x3f), 2)
        }
        c if c & 0xf0 == 0xe0 => {
            if !cont(1)
                || !cont(2)
                || (c == 0xe0 && b(1) & 0xe0 == 0x80)
                || (c == 0xed && b(1) & 0xe0 == 0xa0)
                || (c == 0xef && b(1) == 0xbf && b(2) & 0xfe == 0xbe)
            {
                return None;
            }
            ((c & 0x0f) << 12 | (b(1) & 0x3f) << 6 | (b(2) & 0x3f), 3)
        }
        c if c & 0xf8 == 0xf0 => {
            if !cont(1)
                || !cont(2)
                || !cont(3)
                || (c == 0xf0 && b(1) & 0xf0 == 0x80)
                || (c == 0xf4 && b(1) > 0x8f)
                || c > 0xf4
            {
                return None;
            }
            (
                (c & 0x07) << 18 | (b(1) & 0x3f) << 12 | (b(2) & 0x3f) << 6 | (b(3) & 0x3f),
                4,
            )
        }
        _ => return None,
    };
    if ch != 0 {
        *i += len;
    }
    Some(ch)
}

/// The next character HFS+ would compare: ignorable code points skipped, malformed UTF-8 and
/// the end read as 0.
fn next_hfs_char(s: &[u8], i: &mut usize) -> u32 {
    loop {
        match next_utf8(s, i) {
            None => return 0,
            Some(0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff) => continue,
            Some(c) => return c,
        }
    }
}

/// Whether HFS+ would open `name` as `.<needle>`.
fn is_hfs_dot(name: &[u8], needle: &[u8]) -> bool {
    let mut i = 0;
    if next_hfs_char(name, &mut i) != '.' as u32 {
        return false;
    }
    for &n in needle {
        let c = next_hfs_char(name, &mut i);
        if c > 127 || (c as u8).to_ascii_lowercase() != n {
            return false;
        }
    }
    let c = next_hfs_char(name, &mut i);
    c == 0 || c == '/' as u32
}

/// Whether HFS+ would open `name` as `.git`.
pub fn is_hfs_dotgit(name: &[u8]) -> bool {
    is_hfs_dot(name, b"git")
}

/// Whether HFS+ would open `name` as the special file `which`.
pub fn is_hfs_special(name: &[u8], which: Special) -> bool {
    is_hfs_dot(name, which.name())
}

/// Whether NTFS would open `name` as `.git` (a backslash or slash ends the name).
pub fn is_ntfs_dotgit(name: &[u8]) -> bool {
    let c = |i: usize| at(name, i).to_ascii_lowercase();
    let rest = if c(0) == b'.' {
        if c(1) != b'g' || c(2) != b'i' || c(3) != b't' {
            return false;
        }
        4
    } else if c(0) == b'g' {
        if c(1) != b'i' || c(2) != b't' || at(name, 3) != b'~' || at(name, 4) != b'1' {
            return false;
        }
        5
    } else {
        return false;
    };
    for i in rest.. {
        match at(name, i) {
            0 | b'/' | b'\\' | b':' => return true,
            b'.' | b' ' => {}
            _ => return false,
        }
    }
    unreachable!("the loop returns at the end of the name")
}

/// From `i` on, only spaces and dots up to the end or an alternate data stream (`:`).
fn only_spaces_and_periods(name: &[u8], mut i: usize) -> bool {
    loop {
        match at(name, i) {
            0 | b':' => return true,
            b' ' | b'.' => i += 1,
            _ => return false,
        }
    }
}

/// C's `strncasecmp(a, b, n) == 0` where `b` is at least `n` bytes of ASCII without NUL.
fn starts_with_ignoring_case(name: &[u8], from: usize, needle: &[u8]) -> bool {
    needle
        .iter()
        .enumerate()
        .all(|(k, &n)| at(name, from + k).to_ascii_lowercase() == n)
}

/// Whether NTFS would open `name` as the special file `which`.
pub fn is_ntfs_special(name: &[u8], which: Special) -> bool {
    let long = which.name();
    if at(name, 0) == b'.' && starts_with_ignoring_case(name, 1, long) {
        return only_spaces_and_periods(name, long.len() + 1);
    }
    if starts_with_ignoring_case(name, 0, &long[..6])
        && at(name, 6) == b'~'
        && (b'1'..=b'4').contains(&at(name, 7))
    {
        return only_spaces_and_periods(name, 8);
    }
    let prefix = which.ntfs_prefix();
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let c = at(name, i);
        if c == 0 {
            return false;
        } else if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !(b'1'..=b'9').contains(&at(name, i)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(name, i)
}

/// Whether any filesystem git guards would open `name` as `.git`.
pub fn is_dotgit(name: &[u8]) -> bool {
    is_hfs_dotgit(name) || is_ntfs_dotgit(name)
}

/// Whether any filesystem git guards would open `name` as `which`.
pub fn is_special(name: &[u8], which: Special) -> bool {
    is_hfs_special(name, which) || is_ntfs_special(name, which)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hfs_and_ntfs_aliases_of_dotgit() {
        // t0060-path-utils.sh's is_hfs_dotgit / is_ntfs_dotgit cases, and more.
        for name in [
            ".git",
            ".GIT",
            ".gIt",
            ".g\u{200c}it",
            ".\u{200d}git",
            ".git\u{feff}",
            ".gi\u{206f}t",
            "git~1",
            "GIT~1",
            ".git.",
            ".git ",
            ".git. . .",
            ".git::$INDEX_ALLOCATION",
            ".git:",
            ".GIT ",
            ".git\\x",
        ] {
            assert!(is_dotgit(name.as_bytes()), "{name:?}");
        }
        assert!(
            is_hfs_dotgit(b".git\xef\xbf\xbf"),
            "malformed UTF-8 ends the name"
        );
        for name in [
            ".gitx",
            "git",
            "git~2",
            ".g\u{200b}it",
            "x.git",
            ".git~1",
            "..git",
            ".gi",
            "gi~1",
        ] {
            assert!(!is_dotgit(name.as_bytes()), "{name:?}");
        }
    }

    #[test]
    fn aliases_of_special_files() {
        let gm = Special::Gitmodules;
        for name in [
            ".gitmodules",
            ".GITMODULES",
            ".gitmodules ",
            ".gitmodules.",
            ".gitmodules:x",
            "gitmod~1",
            "GITMOD~4",
            "gi7eba~1",
            "gi7eba~9",
            "gi7eb~10",
            "gi7e~100",
            ".git\u{200c}modules",
        ] {
            assert!(is_special(name.as_bytes(), gm), "{name:?}");
        }
        for name in [
            ".gitmodulesx",
            "gitmod~5",
            "gi7eba~0",
            "gitmodules",
            ".gitmodule",
            "gi7eba~1x",
        ] {
            assert!(!is_special(name.as_bytes(), gm), "{name:?}");
        }
        assert!(is_special(b".gitattributes", Special::Gitattributes));
        assert!(is_special(b"gi7d29~1", Special::Gitattributes));
        assert!(is_special(b".mailmap", Special::Mailmap));
        assert!(is_special(b"maba30~2", Special::Mailmap));
        assert!(is_special(b"gi250a~1", Special::Gitignore));
    }
}
