//! Protocol v0/v1 after the ref advertisement: the want list, the shallow boundary, have rounds,
//! then the pack.
//!
//! ```text
//! client: "want <id> <capabilities>\n" "want <id>\n"... ["shallow <id>\n"] ["deepen <n>\n"]
//!         ["filter <spec>\n"] "0000"
//! server: (deepen only) "shallow <id>" "unshallow <id>"... "0000" (no newlines, as git)
//! client: "have <id>\n"... "0000"          one round (stateless: one POST, ending the request)
//! server: multi_ack_detailed: "ACK <id> common\n" per common have, ["ACK <id> ready\n"], "NAK\n"
//!         multi_ack:          "ACK <id> continue\n" ... "NAK\n";  neither: "ACK <id>\n" (first) / "NAK\n"
//! client: ... "done\n"
//! server: "ACK <last common>\n" or "NAK\n", then the pack (side-band: band 1/2/3, then "0000")
//! no-done: after "ACK <id> ready\n" "NAK\n" the server sends "ACK <id>\n" and the pack at once.
//! ```

use crate::advertise::Advertised;
use crate::pack::SendOptions;
use crate::pkt_line::{self, show, Line, PktReader};
use crate::request::{parse_id, shallow_update_line, Negotiation, RequestBuilder};
use crate::sideband::Sideband;
use crate::{Mode, ProtocolError, Served, UploadPack};
use packd_odb::ObjectId;
use packd_pack::PackSink;
use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// The acknowledgement style a v0 client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MultiAck {
    /// One ACK for the first common have, NAK otherwise.
    None,
    /// `multi_ack`: `ACK <id> continue`.
    Plain,
    /// `multi_ack_detailed`: `ACK <id> common` / `ACK <id> ready`.
    Detailed,
}

/// The want list of a v0 request, read up to its flush.
#[derive(Debug, Default)]
pub(crate) struct WantList {
    /// Wants, shallow and deepen lines, filter.
    pub request: RequestBuilder,
    /// Capabilities named on want lines.
    pub features: HashSet<String>,
}

impl WantList {
    pub fn multi_ack(&self) -> MultiAck {
        if self.features.contains("multi_ack_detailed") {
            MultiAck::Detailed
        } else if self.features.contains("multi_ack") {
            MultiAck::Plain
        } else {
            MultiAck::None
        }
    }

    pub fn sideband(&self) -> Sideband {
        if self.features.contains("side-band-64k") {
            Sideband::Large
        } else if self.features.contains("side-band") {
            Sideband::Small
        } else {
            Sideband::None
        }
    }
}

impl UploadPack {
    /// Reads the want list (up to its flush). `Ok(None)` when the client ends the conversation
    /// instead (a flush or end of input before any want: `git ls-remote`).
    pub(crate) fn read_want_list(
        &self,
        reader: &mut PktReader<'_>,
    ) -> Result<Option<WantList>, ProtocolError> {
        let repo = self.packs.repository();
        let mut list = WantList::default();
        loop {
            let line = match reader.read_line()? {
                Line::Text(t) => t,
                Line::Flush => break,
                Line::Eof if list.request.wants.is_empty() => return Ok(None),
                Line::Eof => {
                    return Err(ProtocolError::Invalid(
                        "the input ended inside the want list".into(),
                    ))
                }
                other => {
                    return Err(ProtocolError::Invalid(format!(
                        "unexpected {other:?} packet in the want list"
                    )))
                }
            };
            if list.request.shallow_line(repo, &line)? {
                continue;
            }
            if let Some(spec) = line.strip_prefix("filter ") {
                let allowed = self.options.allow_filter && list.features.contains("filter");
                list.request.filter_line(allowed, spec)?;
                continue;
            }
            let Some(rest) = line.strip_prefix("want ") else {
                return Err(ProtocolError::Invalid(format!(
                    "expected to get object ID, not '{}'",
                    show(line.as_bytes())
                )));
            };
            let (hex, features) = rest.split_once(' ').unwrap_or((rest, ""));
            let id = parse_id(hex, &line)?;
            for f in features.split_ascii_whitespace() {
                if list.features.len() < 256 && f.len() < 256 {
                    list.features.insert(f.to_string());
                }
            }
            list.request.want(repo, id, self.options.max_wants)?;
        }
        if list.request.wants.is_empty() {
            return Ok(None);
        }
        let r = &mut list.request;
        r.relative = list.features.contains("deepen-relative");
        r.thin = list.features.contains("thin-pack");
        r.ofs_delta = list.features.contains("ofs-delta");
        r.include_tag = list.features.contains("include-tag");
        Ok(Some(list))
    }

    /// Serves one v0/v1 fetch after the advertisement (`advertised`, what it showed).
    pub(crate) fn serve_v0(
        &self,
        mode: Mode,
        advertised: &Advertised,
        reader: &mut PktReader<'_>,
        out: &mut dyn PackSink,
        cancel: &AtomicBool,
        served: &mut Served,
    ) -> Result<(), ProtocolError> {
        let Some(list) = self.read_want_list(reader)? else {
            return Ok(());
        };
        let allow = &self.options;
        let allow_hidden = allow.allow_tip_sha1_in_want || allow.allow_reachable_sha1_in_want;
        // Over HTTP the client chose from an advertisement another request made: refs may have
        // moved since, so an old tip still reachable from a ref is accepted (as git does).
        // Over one connection it chose from this conversation's advertisement, which is what
        // its wants are checked against (none is kept over HTTP).
        let reachable = allow.allow_reachable_sha1_in_want || mode == Mode::Stateless;
        let shown = advertised.tips.as_deref();
        self.check_wants_against_refs(&list.request.wants, shown, allow_hidden, reachable, cancel)?;

        if list.request.deepens() {
            let request = list.request.build(Vec::new())?;
            for update in self.packs.shallow(&request)? {
                pkt_line::write_text(out, &shallow_update_line(&update))?;
            }
            pkt_line::write_flush(out)?;
        }
        out.flush()?;
        if mode == Mode::Stateless && reader.peek()? == pkt_line::Packet::Eof {
            // A stateless client reads the shallow list before its first have round.
            return Ok(());
        }

        let Some(neg) = self.negotiate_v0(&list, mode, reader, out, cancel)? else {
            return Ok(());
        };
        let request = list.request.build(neg.common.clone())?;
        let send = SendOptions {
            sideband: list.sideband(),
            progress: self.options.progress && !list.features.contains("no-progress"),
        };
        served.err_band = send.sideband;
        served.stats.objects = self.send_pack(&request, send, out, cancel)?;
        Ok(())
    }

    /// The have rounds, up to `done` (or to `ready` with no-done). `Ok(None)` when a stateless
    /// request ends with its round.
    fn negotiate_v0(
        &self,
        list: &WantList,
        mode: Mode,
        reader: &mut PktReader<'_>,
        out: &mut dyn Write,
        cancel: &AtomicBool,
    ) -> Result<Option<Negotiation>, ProtocolError> {
        let repo = self.packs.repository();
        let wants = &list.request.wants;
        let multi_ack = list.multi_ack();
        let no_done = list.features.contains("no-done");
        let mut neg = Negotiation::default();
        let mut got_common = false;
        let mut got_other = false;
        let mut sent_ready = false;
        let mut last: Option<ObjectId> = None;
        // The readiness answer for a given number of common haves (it only changes with them).
        let mut ready_memo: Option<(usize, bool)> = None;
        let mut ready = |neg: &Negotiation| -> bool {
            match ready_memo {
                Some((n, r)) if n == neg.common.len() => r,
                _ => {
                    let r = neg.ready(repo, wants);
                    ready_memo = Some((neg.common.len(), r));
                    r
                }
            }
        };
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(ProtocolError::Io(std::io::Error::other("cancelled")));
            }
            let line = match reader.read_line()? {
                Line::Text(t) => t,
                Line::Flush => {
                    if multi_ack == MultiAck::Detailed && got_common && !got_other && ready(&neg) {
                        if let Some(id) = last {
                            sent_ready = true;
                            pkt_line::write_text(out, &format!("ACK {id} ready\n"))?;
                        }
                    }
                    if neg.common.is_empty() || multi_ack != MultiAck::None {
                        pkt_line::write_text(out, "NAK\n")?;
                    }
                    if no_done && sent_ready {
                        if let Some(id) = last {
                            pkt_line::write_text(out, &format!("ACK {id}\n"))?;
                        }
                        return Ok(Some(neg));
                    }
                    out.flush()?;
                    if mode == Mode::Stateless {
                        return Ok(None);
                    }
                    got_common = false;
                    got_other = false;
                    continue;
                }
                Line::Eof => {
                    return Err(ProtocolError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the client hung up during negotiation",
                    )))
                }
                other => {
                    return Err(ProtocolError::Invalid(format!(
                        "expected have or done, got a {other:?} packet"
                    )))
                }
            };
            if let Some(hex) = line.strip_prefix("have ") {
                let id = parse_id(hex, &line)?;
                if neg.have(repo, id, self.options.max_haves)? {
                    got_common = true;
                    last = Some(id);
                    match multi_ack {
                        MultiAck::Detailed => {
                            pkt_line::write_text(out, &format!("ACK {id} common\n"))?
                        }
                        MultiAck::Plain => {
                            pkt_line::write_text(out, &format!("ACK {id} continue\n"))?
                        }
                        MultiAck::None if neg.common.len() == 1 => {
                            pkt_line::write_text(out, &format!("ACK {id}\n"))?
                        }
                        MultiAck::None => {}
                    }
                } else {
                    got_other = true;
                    if multi_ack != MultiAck::None && ready(&neg) {
                        if multi_ack == MultiAck::Detailed {
                            sent_ready = true;
                            pkt_line::write_text(out, &format!("ACK {id} ready\n"))?;
                        } else {
                            pkt_line::write_text(out, &format!("ACK {id} continue\n"))?;
                        }
                    }
                }
                continue;
            }
            if line == "done" {
                match last {
                    Some(id) if !neg.common.is_empty() => {
                        if multi_ack != MultiAck::None {
                            pkt_line::write_text(out, &format!("ACK {id}\n"))?;
                        }
                    }
                    _ => pkt_line::write_text(out, "NAK\n")?,
                }
                return Ok(Some(neg));
            }
            return Err(ProtocolError::Invalid(format!(
                "expected have or done, got '{}'",
                show(line.as_bytes())
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ProtocolVersion, UploadPackOptions};
    use packd_odb::{Repository, RepositoryOptions};
    use packd_pack::PackServer;
    use std::sync::Arc;

    fn pkt(text: &str) -> Vec<u8> {
        let mut v = format!("{:04x}", text.len() + 4).into_bytes();
        v.extend_from_slice(text.as_bytes());
        v
    }

    /// A repository with two commits; returns (dir, upload-pack, tip, parent).
    fn fixture(options: UploadPackOptions) -> (tempfile::TempDir, UploadPack, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", dir.path())
                .env("GIT_AUTHOR_NAME", "A")
                .env("GIT_AUTHOR_EMAIL", "a@example.com")
                .env("GIT_COMMITTER_NAME", "C")
                .env("GIT_COMMITTER_EMAIL", "c@example.com")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        git(&["init", "-q", "--bare", "."]);
        let tree = git(&["hash-object", "-t", "tree", "-w", "/dev/null"]);
        let parent = git(&["commit-tree", &tree, "-m", "one"]);
        let tip = git(&["commit-tree", &tree, "-p", &parent, "-m", "two"]);
        git(&["update-ref", "refs/heads/main", &tip]);
        git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
        let repo = Repository::open(dir.path(), &RepositoryOptions::default()).unwrap();
        let packs = PackServer::open(Arc::new(repo));
        let up = UploadPack::new(Arc::new(packs), options);
        (dir, up, tip, parent)
    }

    fn want_list(up: &UploadPack, input: &[u8]) -> Result<Option<WantList>, ProtocolError> {
        let mut input = input;
        let mut reader = PktReader::new(&mut input);
        up.read_want_list(&mut reader)
    }

    #[test]
    fn want_lines_carry_capabilities_and_shallow_requests() {
        let (_dir, up, tip, parent) = fixture(UploadPackOptions::default());
        let mut input = pkt(&format!(
            "want {tip} multi_ack_detailed side-band-64k thin-pack ofs-delta include-tag filter\n"
        ));
        input.extend(pkt(&format!("want {parent}\n")));
        input.extend(pkt(&format!("want {tip}\n"))); // duplicates are dropped
        input.extend(pkt(&format!("shallow {parent}\n")));
        input.extend(pkt("deepen 2\n"));
        input.extend(pkt("filter blob:limit=1k\n"));
        input.extend_from_slice(b"0000");
        let list = want_list(&up, &input).unwrap().unwrap();
        assert_eq!(list.request.wants.len(), 2);
        assert_eq!(list.multi_ack(), MultiAck::Detailed);
        assert_eq!(list.sideband(), Sideband::Large);
        assert!(list.request.thin && list.request.ofs_delta && list.request.include_tag);
        assert_eq!(list.request.client_shallow.len(), 1);
        assert_eq!(list.request.depth, Some(2));
        assert_eq!(
            list.request.filter,
            Some(packd_pack::Filter::BlobLimit(1024))
        );
        // A flush (or nothing) instead of wants: the client is done (ls-remote).
        assert!(want_list(&up, b"0000").unwrap().is_none());
        assert!(want_list(&up, b"").unwrap().is_none());
    }

    #[test]
    fn bad_want_lists_are_refused_naming_the_line() {
        let (_dir, up, tip, parent) = fixture(UploadPackOptions {
            max_wants: 1,
            ..UploadPackOptions::default()
        });
        let cases: Vec<(Vec<u8>, &str)> = vec![
            ([pkt("have 1234\n"), b"0000".to_vec()].concat(), "have 1234"),
            ([pkt("want xyz\n"), b"0000".to_vec()].concat(), "want xyz"),
            ([pkt("deepen 0\n"), b"0000".to_vec()].concat(), "deepen 0"),
            (
                [
                    pkt(&format!("want {tip}\n")),
                    pkt("filter blob:none\n"),
                    b"0000".to_vec(),
                ]
                .concat(),
                "filtering capability not negotiated",
            ),
            (
                [
                    pkt(&format!("want {tip}\n")),
                    pkt(&format!("want {parent}\n")),
                    b"0000".to_vec(),
                ]
                .concat(),
                "too many wants",
            ),
            (
                // As git, a want of an object the repository lacks is refused as it arrives.
                [pkt(&format!("want {}\n", "1".repeat(40))), b"0000".to_vec()].concat(),
                "not our ref 1111111111111111111111111111111111111111",
            ),
            (pkt(&format!("want {tip}\n")), "ended inside the want list"),
        ];
        for (input, expected) in cases {
            let err = want_list(&up, &input).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn deepen_and_deepen_since_conflict() {
        let (_dir, up, tip, _) = fixture(UploadPackOptions::default());
        let mut input = pkt(&format!("want {tip}\n"));
        input.extend(pkt("deepen 1\n"));
        input.extend(pkt("deepen-since 1700000000\n"));
        input.extend_from_slice(b"0000");
        let list = want_list(&up, &input).unwrap().unwrap();
        let err = list.request.build(Vec::new()).unwrap_err().to_string();
        assert!(err.contains("cannot be used together"), "{err}");
    }

    #[test]
    fn stateful_rounds_acknowledge_then_send_the_pack() {
        let (_dir, up, tip, parent) = fixture(UploadPackOptions::default());
        let unknown = "2".repeat(40);
        let mut input = pkt(&format!("want {tip} multi_ack_detailed side-band-64k\n"));
        input.extend_from_slice(b"0000");
        input.extend(pkt(&format!("have {unknown}\n")));
        input.extend_from_slice(b"0000");
        input.extend(pkt(&format!("have {parent}\n")));
        input.extend_from_slice(b"0000");
        input.extend(pkt("done\n"));
        let mut out = Vec::new();
        let cancel = AtomicBool::new(false);
        let stats = up
            .serve(
                ProtocolVersion::V0,
                Mode::Stateful,
                &Advertised::default(),
                &mut input.as_slice(),
                &mut out,
                &cancel,
            )
            .unwrap();
        assert_eq!(stats.objects, 1, "only the tip commit is new");
        let text = String::from_utf8_lossy(&out);
        let expected = format!(
            "0008NAK\n0038ACK {parent} common\n0037ACK {parent} ready\n0008NAK\n0031ACK {parent}\n"
        );
        assert!(text.starts_with(&expected), "{text}");
        assert!(out.windows(5).any(|w| w == b"\x01PACK"));
        assert!(out.ends_with(b"0000"));
    }
}
