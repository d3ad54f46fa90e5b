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
use crate::fetch_v2::Args;
use crate::pkt_line::{self, show};
use crate::{ProtocolError, UploadPack};
use packd_odb::ObjectId;
use std::io::Write;

/// More prefixes than this and git sends every ref (the filter is only an optimization: git's
/// client filters what it gets again), as git 2.39's `ls-refs` (its TOO_MANY_PREFIXES).
const MAX_PREFIXES: usize = 65536;

/// More bytes of prefixes than this and packd sends every ref too, as past [`MAX_PREFIXES`]:
/// git bounds only their number, so 65,536 prefixes of a pkt-line each would cost 4 GiB.
/// git's client sends a few short ones (a refspec's source each).
const MAX_PREFIX_BYTES: usize = 1 << 20;

/// The arguments of one `ls-refs`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LsRefsArgs {
    pub symrefs: bool,
    pub peel: bool,
    pub unborn: bool,
    /// The prefixes, one after another (empty: every ref).
    prefix_bytes: String,
    /// Where each prefix ends in `prefix_bytes`.
    prefix_ends: Vec<u32>,
}

impl LsRefsArgs {
    /// Parses the argument lines as they arrive: flags however often repeated cost a boolean,
    /// prefixes at most [`MAX_PREFIX_BYTES`] and [`MAX_PREFIXES`] (past either, none: every
    /// ref is sent).
    pub fn parse(
        args: impl Iterator<Item = Result<String, ProtocolError>>,
    ) -> Result<LsRefsArgs, ProtocolError> {
        let mut parsed = LsRefsArgs::default();
        let mut too_many = false;
        for arg in args {
            let arg = arg?;
            match arg.as_str() {
                "symrefs" => parsed.symrefs = true,
                "peel" => parsed.peel = true,
                "unborn" => parsed.unborn = true,
                a => match a.strip_prefix("ref-prefix ") {
                    Some(p) if !too_many => {
                        if parsed.prefix_ends.len() >= MAX_PREFIXES
                            || parsed.prefix_bytes.len() + p.len() > MAX_PREFIX_BYTES
                        {
                            too_many = true;
                            parsed.prefix_bytes = String::new();
                            parsed.prefix_ends = Vec::new();
                        } else {
                            parsed.prefix_bytes.push_str(p);
                            parsed.prefix_ends.push(parsed.prefix_bytes.len() as u32);
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

    /// The prefixes, in the client's order.
    fn prefixes(&self) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.prefix_ends.iter().map(move |&end| {
            let p = &self.prefix_bytes[start..end as usize];
            start = end as usize;
            p
        })
    }

    fn matches(&self, name: &str) -> bool {
        self.prefix_ends.is_empty() || self.prefixes().any(|p| name.starts_with(p))
    }
}

impl UploadPack {
    /// Serves `ls-refs`.
    pub(crate) fn ls_refs(
        &self,
        args: &mut Args<'_, '_>,
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
        let parsed = LsRefsArgs::parse(args.into_iter().map(Ok)).unwrap();
        assert!(parsed.peel && parsed.symrefs && !parsed.unborn);
        assert!(parsed.matches("HEAD"));
        assert!(parsed.matches("refs/tags/v1"));
        assert!(!parsed.matches("refs/heads/main"));
        let err = LsRefsArgs::parse(std::iter::once(Ok("bogus".to_string())))
            .unwrap_err()
            .to_string();
        assert!(err.contains("'bogus'"), "{err}");
        assert!(LsRefsArgs::parse(std::iter::empty())
            .unwrap()
            .matches("refs/anything"));
    }

    #[test]
    fn too_many_prefixes_mean_every_ref() {
        let prefixes = |n: usize, len: usize| {
            (0..n).map(move |i| Ok(format!("ref-prefix refs/heads/{i:0len$}")))
        };
        // git's limit: 65,536 prefixes are kept, one more and every ref is sent.
        let kept = LsRefsArgs::parse(prefixes(MAX_PREFIXES, 5)).unwrap();
        assert!(!kept.matches("refs/tags/v1"));
        assert!(kept.matches("refs/heads/00007"));
        let past = LsRefsArgs::parse(prefixes(MAX_PREFIXES + 1, 5)).unwrap();
        assert!(past.matches("refs/tags/v1"));
        // packd's: a megabyte of them.
        let long = LsRefsArgs::parse(prefixes(1000, 2000)).unwrap();
        assert!(long.matches("refs/tags/v1"));
        assert!(long.prefix_bytes.capacity() == 0);
    }
}
