//! Protocol v2 `object-info`: the sizes of objects named by id, without their content
//! (git advertises it by default since 2.36; a partial clone's client asks it before fetching
//! a blob).
//!
//! ```text
//! client: "command=object-info\n" <capabilities> "0001" ["size\n"] ("oid <id>\n")* "0000"
//! server: ["size"]                      (when asked for sizes and some id was given)
//!         ("<id> <size>" | "<id> ")...  (one per id, in order; a missing object's size is empty;
//!                                        without "size", the id alone)
//!         "0000"
//! ```
//!
//! Lines are written byte for byte as git 2.39's `cap_object_info` writes them: no trailing
//! newline. As in git, any object in the repository may be asked for, reachable or not: only
//! its size is told, never its content.

use crate::fetch_v2::Args;
use crate::pkt_line::{self, show};
use crate::request::parse_id;
use crate::{ProtocolError, UploadPack};
use packd_odb::ObjectId;
use std::io::Write;

/// Most `oid` lines in one `object-info` (git has no limit, and keeps repeats; its client asks
/// about the few objects one command needs): 100,000 ids, 2 MB.
const MAX_OBJECT_INFO_IDS: usize = 100_000;

/// The arguments of one `object-info`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ObjectInfoArgs {
    /// Whether the client asked for each object's size.
    pub size: bool,
    /// The objects asked about, in the client's order (repeats kept, as git keeps them).
    pub ids: Vec<ObjectId>,
}

impl ObjectInfoArgs {
    /// Parses the argument lines; a line git does not know, or an id that is not 40 hex
    /// digits, is refused with git's message for it.
    pub fn parse(
        args: impl Iterator<Item = Result<String, ProtocolError>>,
    ) -> Result<ObjectInfoArgs, ProtocolError> {
        let mut parsed = ObjectInfoArgs::default();
        for arg in args {
            let arg = &arg?;
            if arg == "size" {
                parsed.size = true;
            } else if let Some(hex) = arg.strip_prefix("oid ") {
                let id = parse_id(hex, arg).map_err(|_| {
                    ProtocolError::Refused(format!(
                        "object-info: protocol error, expected to get oid, not '{}'",
                        show(hex.as_bytes())
                    ))
                })?;
                if parsed.ids.len() >= MAX_OBJECT_INFO_IDS {
                    return Err(ProtocolError::Refused(format!(
                        "object-info: too many oid lines (the limit is {MAX_OBJECT_INFO_IDS})"
                    )));
                }
                parsed.ids.push(id);
            } else {
                return Err(ProtocolError::Refused(format!(
                    "object-info: unexpected line: '{}'",
                    show(arg.as_bytes())
                )));
            }
        }
        Ok(parsed)
    }
}

impl UploadPack {
    /// Serves one `object-info`: each id's size (when asked) in the client's order, then a
    /// flush.
    pub(crate) fn object_info(
        &self,
        args: &mut Args<'_, '_>,
        out: &mut dyn Write,
    ) -> Result<(), ProtocolError> {
        let args = ObjectInfoArgs::parse(args)?;
        if !args.ids.is_empty() {
            let objects = self.packs.repository().objects();
            if args.size {
                pkt_line::write_text(out, "size")?;
            }
            let mut line = String::with_capacity(64);
            for id in &args.ids {
                line.clear();
                line.push_str(&id.to_string());
                if args.size {
                    line.push(' ');
                    if let Some(header) = objects.header(id)? {
                        line.push_str(&header.size.to_string());
                    }
                }
                pkt_line::write_text(out, &line)?;
            }
        }
        pkt_line::write_flush(out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(lines: &'a [&str]) -> impl Iterator<Item = Result<String, ProtocolError>> + 'a {
        lines.iter().map(|l| Ok(l.to_string()))
    }

    #[test]
    fn parses_size_and_ids_in_order() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let parsed =
            ObjectInfoArgs::parse(args(&[&format!("oid {b}"), "size", &format!("oid {a}")]))
                .unwrap();
        assert!(parsed.size);
        let hex: Vec<String> = parsed.ids.iter().map(|i| i.to_string()).collect();
        assert_eq!(hex, [b, a]);
    }

    #[test]
    fn refuses_what_git_refuses_with_its_words() {
        let e = ObjectInfoArgs::parse(args(&["type"])).unwrap_err();
        assert_eq!(e.to_string(), "object-info: unexpected line: 'type'");
        let e = ObjectInfoArgs::parse(args(&["oid 1234"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "object-info: protocol error, expected to get oid, not '1234'"
        );
    }
}
