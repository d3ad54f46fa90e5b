//! Protocol v2 `ls-refs`: the refs, filtered by prefix, with symbolic targets and peeled tags
//! on request.
//!
//! ```text
//! client: "command=ls-refs\n" <capabilities> "0001" ["symrefs\n"] ["peel\n"] ["unborn\n"]
//!         ("ref-prefix <prefix>\n")* "0000"
//! server: "<id> HEAD symref-target:refs/heads/main\n"      (HEAD first, when it matches)
//!         "unborn HEAD symref-target:refs/heads/main\n"    (unborn HEAD, with unborn + symrefs)
//!         "<id> refs/tags/v1 peeled:<id>\n"
//!         "0000"
//! ```

use crate::advertise::{peeled, peeled_ref, RefSnapshot};
use crate::pkt_line::{self, show};
use crate::{ProtocolError, UploadPack};
use packd_odb::ObjectId;
use std::io::Write;

/// More prefixes than this and git sends every ref (the filter is only an optimization).
const MAX_PREFIXES: usize = 65536;

/// The arguments of one `ls-refs`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LsRefsArgs {
    pub symrefs: bool,
    pub peel: bool,
    pub unborn: bool,
    /// Empty: every ref.
    pub prefixes: Vec<String>,
}

impl LsRefsArgs {
    /// Parses the argument lines.
    pub fn parse(args: &[String]) -> Result<LsRefsArgs, ProtocolError> {
        let mut parsed = LsRefsArgs::default();
        let mut too_many = false;
        for arg in args {
            match arg.as_str() {
                "symrefs" => parsed.symrefs = true,
                "peel" => parsed.peel = true,
                "unborn" => parsed.unborn = true,
                a => match a.strip_prefix("ref-prefix ") {
                    Some(p) if !too_many => {
                        if parsed.prefixes.len() >= MAX_PREFIXES {
                            too_many = true;
                            parsed.prefixes.clear();
                        } else {
                            parsed.prefixes.push(p.to_string());
                        }
                    }
                    Some(_) => {}
                    None => {
                        return Err(ProtocolError::Invalid(format!(
                            "ls-refs: unexpected line: '{}'",
                            show(a.as_bytes())
                        )))
                    }
                },
            }
        }
        Ok(parsed)
    }

    fn matches(&self, name: &str) -> bool {
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }
}

impl UploadPack {
    /// Serves `ls-refs`.
    pub(crate) fn ls_refs(
        &self,
        args: &[String],
        out: &mut dyn Write,
    ) -> Result<(), ProtocolError> {
        let args = LsRefsArgs::parse(args)?;
        let repo = self.packs.repository();
        let snapshot = RefSnapshot::read(repo, &self.hidden)?;
        // Each line is put together in one buffer: thousands of refs are common.
        let mut line: Vec<u8> = Vec::with_capacity(256);
        let mut send = |out: &mut dyn Write,
                        id: Option<&ObjectId>,
                        name: &str,
                        target: Option<&String>,
                        peeled: Option<ObjectId>| {
            line.clear();
            match id {
                Some(id) => id.extend_hex(&mut line),
                None => line.extend_from_slice(b"unborn"),
            }
            line.push(b' ');
            line.extend_from_slice(name.as_bytes());
            if let (true, Some(t)) = (args.symrefs, target) {
                line.extend_from_slice(b" symref-target:");
                line.extend_from_slice(t.as_bytes());
            }
            if let Some(p) = peeled {
                line.extend_from_slice(b" peeled:");
                p.extend_hex(&mut line);
            }
            line.push(b'\n');
            pkt_line::write_packet(out, &line)
        };
        if args.matches("HEAD") {
            match (&snapshot.head, &snapshot.head_target) {
                (Some(id), target) => {
                    let peeled = args.peel.then(|| peeled(repo, id)).flatten();
                    send(out, Some(id), "HEAD", target.as_ref(), peeled)?;
                }
                (None, Some(t)) if args.unborn && args.symrefs => {
                    send(out, None, "HEAD", Some(t), None)?;
                }
                _ => {}
            }
        }
        for r in &snapshot.refs {
            if args.matches(&r.name) {
                let peeled = args.peel.then(|| peeled_ref(repo, r)).flatten();
                send(out, Some(&r.id), &r.name, r.symref_target.as_ref(), peeled)?;
            }
        }
        pkt_line::write_flush(out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arguments() {
        let args: Vec<String> = [
            "peel",
            "symrefs",
            "ref-prefix HEAD",
            "ref-prefix refs/tags/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let parsed = LsRefsArgs::parse(&args).unwrap();
        assert!(parsed.peel && parsed.symrefs && !parsed.unborn);
        assert!(parsed.matches("HEAD"));
        assert!(parsed.matches("refs/tags/v1"));
        assert!(!parsed.matches("refs/heads/main"));
        let err = LsRefsArgs::parse(&["bogus".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("'bogus'"), "{err}");
        assert!(LsRefsArgs::parse(&[]).unwrap().matches("refs/anything"));
    }
}
