//! The identity lines of commits and tags, checked as git's `fsck_ident` does.
//!
//! ```text
//! <name> SP "<" <email> ">" SP <seconds> SP ("+"|"-") <4 digits> LF
//! ```
//! The seconds are read as C's `strtoumax` reads them (leading white space and a sign
//! accepted), as git does; a value past 2^63 - 1 overflows.

use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::ObjectId;

/// The byte at `i`, or 0 past the end (C's view of a NUL-terminated buffer).
pub(crate) fn at(data: &[u8], i: usize) -> u8 {
    data.get(i).copied().unwrap_or(0)
}

/// Checks the identity at the start of `*rest` and moves `*rest` past its line. True when an
/// error was reported.
pub(crate) fn check_ident(rest: &mut &[u8], id: &ObjectId, report: &mut Report<'_>) -> bool {
    let p = *rest;
    // The line is skipped whatever its content, as git does before checking it.
    *rest = match memchr_nl(p) {
        Some(nl) => &p[nl + 1..],
        None => &p[p.len()..],
    };
    let bad = |report: &mut Report<'_>, msg: MsgId, what: &str| {
        report.report(id, msg, &format!("invalid author/committer line - {what}"))
    };
    if at(p, 0) == b'<' {
        return bad(
            report,
            MsgId::MissingNameBeforeEmail,
            "missing space before email",
        );
    }
    let mut i = p
        .iter()
        .position(|&b| matches!(b, b'<' | b'>' | b'\n' | 0))
        .unwrap_or(p.len());
    if at(p, i) == b'>' {
        return bad(report, MsgId::BadName, "bad name");
    }
    if at(p, i) != b'<' {
        return bad(report, MsgId::MissingEmail, "missing email");
    }
    if i == 0 || p[i - 1] != b' ' {
        return bad(
            report,
            MsgId::MissingSpaceBeforeEmail,
            "missing space before email",
        );
    }
    i += 1;
    i += p[i..]
        .iter()
        .position(|&b| matches!(b, b'<' | b'>' | b'\n' | 0))
        .unwrap_or(p.len() - i);
    if at(p, i) != b'>' {
        return bad(report, MsgId::BadEmail, "bad email");
    }
    i += 1;
    if at(p, i) != b' ' {
        return bad(
            report,
            MsgId::MissingSpaceBeforeDate,
            "missing space before date",
        );
    }
    i += 1;
    if at(p, i) == b'0' && at(p, i + 1) != b' ' {
        return bad(report, MsgId::ZeroPaddedDate, "zero-padded date");
    }
    let (value, end) = strtoumax(p, i);
    if value == u64::MAX || value > i64::MAX as u64 {
        return bad(
            report,
            MsgId::BadDateOverflow,
            "date causes integer overflow",
        );
    }
    if end == i || at(p, end) != b' ' {
        return bad(report, MsgId::BadDate, "bad date");
    }
    let tz = end + 1;
    if !matches!(at(p, tz), b'+' | b'-')
        || !(1..=4).all(|k| at(p, tz + k).is_ascii_digit())
        || at(p, tz + 5) != b'\n'
    {
        return bad(report, MsgId::BadTimezone, "bad time zone");
    }
    false
}

fn memchr_nl(data: &[u8]) -> Option<usize> {
    data.iter().position(|&b| b == b'\n')
}

/// C's `strtoumax(s + from, &end, 10)`: white space, an optional sign, digits; saturates at
/// `u64::MAX`; a minus negates (wrapping). `end` is `from` when no digit was read.
fn strtoumax(s: &[u8], from: usize) -> (u64, usize) {
    let mut i = from;
    while matches!(at(s, i), b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let negative = at(s, i) == b'-';
    if matches!(at(s, i), b'+' | b'-') {
        i += 1;
    }
    let start = i;
    let mut value: u64 = 0;
    let mut overflow = false;
    while at(s, i).is_ascii_digit() {
        let digit = (at(s, i) - b'0') as u64;
        match value.checked_mul(10).and_then(|v| v.checked_add(digit)) {
            Some(v) => value = v,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return (0, from);
    }
    if overflow {
        return (u64::MAX, i);
    }
    (
        if negative {
            value.wrapping_neg()
        } else {
            value
        },
        i,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::FsckOptions;

    fn first_id(line: &str) -> Option<String> {
        let options = FsckOptions::strict();
        let mut report = Report::new(&options);
        let mut rest = line.as_bytes();
        check_ident(&mut rest, &ObjectId::NULL, &mut report);
        report
            .lines
            .first()
            .map(|l| l.split(": ").nth(2).unwrap().to_string())
    }

    #[test]
    fn identities_as_git_checks_them() {
        assert_eq!(first_id("A U Thor <a@x> 1234 +0000\n"), None);
        assert_eq!(
            first_id("A <a@x>  1234 +0000\n"),
            None,
            "strtoumax skips spaces"
        );
        assert_eq!(
            first_id("<a@x> 1 +0000\n").as_deref(),
            Some("missingNameBeforeEmail")
        );
        assert_eq!(first_id("A> <a@x> 1 +0000\n").as_deref(), Some("badName"));
        assert_eq!(first_id("A a@x 1 +0000\n").as_deref(), Some("missingEmail"));
        assert_eq!(
            first_id("A<a@x> 1 +0000\n").as_deref(),
            Some("missingSpaceBeforeEmail")
        );
        assert_eq!(first_id("A <a<x> 1 +0000\n").as_deref(), Some("badEmail"));
        assert_eq!(
            first_id("A <a@x>1 +0000\n").as_deref(),
            Some("missingSpaceBeforeDate")
        );
        assert_eq!(
            first_id("A <a@x> 01 +0000\n").as_deref(),
            Some("zeroPaddedDate")
        );
        assert_eq!(first_id("A <a@x> 0 +0000\n"), None);
        assert_eq!(
            first_id("A <a@x> 18446744073709551617 +0000\n").as_deref(),
            Some("badDateOverflow")
        );
        assert_eq!(
            first_id("A <a@x> 9223372036854775808 +0000\n").as_deref(),
            Some("badDateOverflow")
        );
        assert_eq!(first_id("A <a@x> x +0000\n").as_deref(), Some("badDate"));
        assert_eq!(first_id("A <a@x> 1 +000\n").as_deref(), Some("badTimezone"));
        assert_eq!(
            first_id("A <a@x> 1 +00000\n").as_deref(),
            Some("badTimezone")
        );
    }
}
