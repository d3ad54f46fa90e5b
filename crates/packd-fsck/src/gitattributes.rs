//! `.gitattributes` blobs: git refuses one it would not read whole (over 100 MiB) or with a
//! line it would not parse (2,048 bytes or more).
//!
//! ```text
//! (<pattern> <attr>... LF)*      lines measured up to LF or NUL; a NUL ends the text
//! ```

use crate::msg_id::MsgId;
use crate::options::Report;
use packd_odb::ObjectId;

/// Largest `.gitattributes` git reads (its `ATTR_MAX_FILE_SIZE`).
pub const GITATTRIBUTES_MAX: u64 = 100 << 20;

/// Longest line git parses, exclusive (its `ATTR_MAX_LINE_LENGTH`).
pub const LINE_MAX: usize = 2048;

/// Checks a `.gitattributes` blob of `data` (its size known to be within
/// [`GITATTRIBUTES_MAX`]). True when an error was reported.
pub(crate) fn check_gitattributes(id: &ObjectId, data: &[u8], report: &mut Report<'_>) -> bool {
    let text = match data.iter().position(|&b| b == 0) {
        Some(nul) => &data[..nul],
        None => data,
    };
    if text
        .split(|&b| b == b'\n')
        .any(|line| line.len() >= LINE_MAX)
    {
        return report.report(
            id,
            MsgId::GitattributesLineLength,
            ".gitattributes has too long lines to parse",
        );
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::FsckOptions;

    #[test]
    fn long_lines_are_refused() {
        let options = FsckOptions::strict();
        let mut report = Report::new(&options);
        assert!(!check_gitattributes(
            &ObjectId::NULL,
            b"*.c diff\n",
            &mut report
        ));
        let mut long = vec![b'a'; LINE_MAX - 1];
        long.push(b'\n');
        assert!(!check_gitattributes(&ObjectId::NULL, &long, &mut report));
        long.insert(0, b'a');
        assert!(check_gitattributes(&ObjectId::NULL, &long, &mut report));
        assert!(report.lines[0].contains("gitattributesLineLength"));
    }
}
