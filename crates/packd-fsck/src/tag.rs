//! Tag checks, in git's order (`fsck_tag_standalone`).
//!
//! ```text
//! "object <hex>\n" "type <kind>\n" "tag <name>\n" ["tagger <ident>\n"] "\n" message
//! ```

use crate::commit::{check_headers, hex_id_at, next_line};
use crate::ident::{at, check_ident};
use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::ObjectId;

/// Checks a tag. True when an error was reported.
pub(crate) fn check_tag(id: &ObjectId, data: &[u8], report: &mut Report<'_>) -> bool {
    if check_headers(data, id, report) {
        return true;
    }
    let Some(mut rest) = data.strip_prefix(b"object ") else {
        return report.report(
            id,
            MsgId::MissingObject,
            "invalid format - expected 'object' line",
        );
    };
    if !hex_id_at(rest, 0) || at(rest, 40) != b'\n' {
        if report.report(
            id,
            MsgId::BadObjectSha1,
            "invalid 'object' line format - bad sha1",
        ) {
            return true;
        }
        rest = &rest[next_line(rest, 0)..];
    } else {
        rest = &rest[41..];
    }
    let Some(after) = rest.strip_prefix(b"type ") else {
        return report.report(
            id,
            MsgId::MissingTypeEntry,
            "invalid format - expected 'type' line",
        );
    };
    let Some(eol) = line_end(after) else {
        return report.report(
            id,
            MsgId::MissingType,
            "invalid format - unexpected end after 'type' line",
        );
    };
    if !matches!(&after[..eol], b"commit" | b"tree" | b"blob" | b"tag")
        && report.report(id, MsgId::BadType, "invalid 'type' value")
    {
        return true;
    }
    rest = &after[eol + 1..];
    let Some(after) = rest.strip_prefix(b"tag ") else {
        return report.report(
            id,
            MsgId::MissingTagEntry,
            "invalid format - expected 'tag' line",
        );
    };
    let Some(eol) = line_end(after) else {
        return report.report(
            id,
            MsgId::MissingTag,
            "invalid format - unexpected end after 'type' line",
        );
    };
    let name = String::from_utf8_lossy(&after[..eol]);
    if packd_odb::refs::check_ref_format(&format!("refs/tags/{name}")).is_err()
        && report.report(
            id,
            MsgId::BadTagName,
            &format!("invalid 'tag' name: {name}"),
        )
    {
        return true;
    }
    rest = &after[eol + 1..];
    let mut err = false;
    match rest.strip_prefix(b"tagger ") {
        None => {
            if report.report(
                id,
                MsgId::MissingTaggerEntry,
                "invalid format - expected 'tagger' line",
            ) {
                return true;
            }
        }
        Some(after) => {
            rest = after;
            err = check_ident(&mut rest, id, report);
        }
    }
    if at(rest, 0) == 0 {
        return err;
    }
    if rest[0] != b'\n'
        && report.report(
            id,
            MsgId::ExtraHeaderEntry,
            "invalid format - extra header(s) after 'tagger'",
        )
    {
        return true;
    }
    err
}

/// C's `strchr(s, '\n')` on a NUL-terminated buffer.
fn line_end(data: &[u8]) -> Option<usize> {
    let nl = data.iter().position(|&b| b == b'\n' || b == 0)?;
    (data[nl] == b'\n').then_some(nl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::tests::ids;

    const OBJ: &str = "object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n";

    #[test]
    fn tags_as_git_checks_them() {
        let ok = format!("{OBJ}type tree\ntag v1\ntagger T <t@x> 1 +0000\n\nmsg\n");
        assert!(ids(check_tag, ok.as_bytes()).is_empty());
        let cases = [
            ("type tree\ntag v1\n".to_string(), vec!["missingObject"]),
            (
                "object 12\ntype tree\ntag v1\n".to_string(),
                vec!["badObjectSha1"],
            ),
            (format!("{OBJ}tag v1\n"), vec!["missingTypeEntry"]),
            (format!("{OBJ}type tree"), vec!["unterminatedHeader"]),
            (format!("{OBJ}type bush\ntag v1\n"), vec!["badType"]),
            (
                format!("{OBJ}type tree\ntagger T <t@x> 1 +0000\n"),
                vec!["missingTagEntry"],
            ),
            (
                format!("{OBJ}type tree\ntag a..b\ntagger T <t@x> 1 +0000\n\n"),
                vec!["badTagName"],
            ),
            (
                format!("{OBJ}type tree\ntag v1\n\nmsg\n"),
                vec!["missingTaggerEntry"],
            ),
            (
                format!("{OBJ}type tree\ntag v1\ntagger T <t@x> 1 +0000\nx y\n\nm\n"),
                vec![],
            ),
            (
                format!("{OBJ}type tree\ntag v1\ntagger T t@x 1 +0000\n\n"),
                vec!["missingEmail"],
            ),
        ];
        for (data, want) in cases {
            assert_eq!(ids(check_tag, data.as_bytes()), want, "{data:?}");
        }
    }
}
