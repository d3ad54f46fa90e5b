//! Protocol v2: the command loop and `fetch`.
//!
//! ```text
//! request:  "command=<ls-refs|fetch|object-info>\n" ("<capability>[=<value>]\n")* "0001" (<argument>\n)* "0000"
//!           a lone "0000" (or the end of input) ends the conversation
//! fetch arguments: "want <id>" "want-ref <ref>" "have <id>" "done" "thin-pack" "ofs-delta"
//!           "no-progress" "include-tag" "wait-for-done" "shallow <id>" "deepen <n>"
//!           "deepen-relative" "deepen-since <t>" "deepen-not <ref>" "filter <spec>"
//! response without done:   "acknowledgments\n" ("NAK\n" | "ACK <id>\n"...) ["ready\n"]
//!                          then "0000" (not ready: the client sends another round)
//!                          or "0001" and the sections below (ready)
//! response with the pack:  ["shallow-info\n" ("shallow <id>" | "unshallow <id>", no newline)... "0001"]
//!                          ["wanted-refs\n" "<id> <ref>\n"... "0001"]
//!                          "packfile\n" <side-band 1/2/3 packets> "0000"
//! ```

use crate::pack::SendOptions;
use crate::pkt_line::{self, show, Line, PktReader};
use crate::request::{parse_id, shallow_update_line, Negotiation, RequestBuilder};
use crate::sideband::Sideband;
use crate::{Mode, ProtocolError, Served, UploadPack};
use packd_odb::ObjectId;
use packd_pack::PackSink;
use std::sync::atomic::AtomicBool;

/// Most capability lines accepted in one request.
const MAX_CAPABILITY_LINES: usize = 1000;

/// The head of one v2 request: its command's name; its arguments are read after it, one line
/// at a time, by [`Args`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CommandHead {
    /// `ls-refs` or `fetch` (or whatever the client named).
    pub name: String,
    /// Whether a delimiter packet opened an argument section.
    pub has_args: bool,
}

/// The argument lines of one v2 command, handed out one at a time (newline removed) up to the
/// flush that ends them, so that a request's memory is what its command keeps of each line,
/// never the lines themselves: a flood of a million repeated `peel` lines costs one boolean.
pub(crate) struct Args<'r, 'i> {
    reader: &'r mut PktReader<'i>,
    command: &'r str,
    ended: bool,
}

impl<'r, 'i> Args<'r, 'i> {
    /// The arguments of `head`, read from `reader` (none when it had no delimiter).
    pub fn new(reader: &'r mut PktReader<'i>, head: &'r CommandHead) -> Args<'r, 'i> {
        Args {
            reader,
            command: &head.name,
            ended: !head.has_args,
        }
    }
}

impl Iterator for Args<'_, '_> {
    type Item = Result<String, ProtocolError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        match self.reader.read_line() {
            Ok(Line::Text(t)) => Some(Ok(t)),
            Ok(Line::Flush) => {
                self.ended = true;
                None
            }
            Ok(other) => {
                self.ended = true;
                Some(Err(ProtocolError::Invalid(format!(
                    "expected a flush after the arguments of '{}', got a {other:?} packet",
                    self.command
                ))))
            }
            Err(e) => {
                self.ended = true;
                Some(Err(e))
            }
        }
    }
}

impl UploadPack {
    /// Reads the head of one v2 request (its command and capabilities, up to the delimiter or
    /// flush); `Ok(None)` when the client ends the conversation.
    pub(crate) fn read_command(
        &self,
        reader: &mut PktReader<'_>,
    ) -> Result<Option<CommandHead>, ProtocolError> {
        let name = match reader.read_line()? {
            Line::Eof | Line::Flush => return Ok(None),
            Line::Text(t) => match t.strip_prefix("command=") {
                Some(n) => n.to_string(),
                None => {
                    return Err(ProtocolError::Invalid(format!(
                        "expected 'command=<name>', got '{}'",
                        show(t.as_bytes())
                    )))
                }
            },
            other => {
                return Err(ProtocolError::Invalid(format!(
                    "expected a command, got a {other:?} packet"
                )))
            }
        };
        let mut caps = 0;
        let has_args = loop {
            match reader.read_line()? {
                Line::Text(t) => {
                    caps += 1;
                    if caps > MAX_CAPABILITY_LINES {
                        return Err(ProtocolError::Invalid("too many capability lines".into()));
                    }
                    if let Some(format) = t.strip_prefix("object-format=") {
                        if format != "sha1" {
                            return Err(ProtocolError::Refused(format!(
                                "mismatched object format: the server uses sha1, the client asked for '{}'",
                                show(format.as_bytes())
                            )));
                        }
                    }
                }
                Line::Delim => break true,
                Line::Flush => break false,
                other => {
                    return Err(ProtocolError::Invalid(format!(
                        "unexpected {other:?} packet in the capabilities of '{name}'"
                    )))
                }
            }
        };
        Ok(Some(CommandHead { name, has_args }))
    }

    /// Serves v2 commands: all of them until the client ends ([`Mode::Stateful`]), or one.
    pub(crate) fn serve_v2(
        &self,
        mode: Mode,
        reader: &mut PktReader<'_>,
        out: &mut dyn PackSink,
        cancel: &AtomicBool,
        served: &mut Served,
    ) -> Result<(), ProtocolError> {
        loop {
            out.flush()?;
            let Some(head) = self.read_command(reader)? else {
                return Ok(());
            };
            let mut args = Args::new(reader, &head);
            match head.name.as_str() {
                "ls-refs" => {
                    served.stats.command = "ls-refs";
                    self.ls_refs(&mut args, out)?;
                }
                "object-info" => {
                    served.stats.command = "object-info";
                    self.object_info(&mut args, out)?;
                }
                "fetch" => {
                    served.stats.command = "fetch";
                    served.stats.objects +=
                        self.fetch(&mut args, out, cancel, &mut served.err_band)?;
                    // The pack is over: an error from here is an ERR packet again.
                    served.err_band = Sideband::None;
                }
                other => {
                    return Err(ProtocolError::Refused(format!(
                        "invalid command '{}'",
                        show(other.as_bytes())
                    )))
                }
            }
            if mode == Mode::Stateless {
                out.flush()?;
                return Ok(());
            }
        }
    }

    /// Serves one `fetch`; returns the number of objects sent.
    fn fetch(
        &self,
        args: &mut Args<'_, '_>,
        out: &mut dyn PackSink,
        cancel: &AtomicBool,
        err_band: &mut Sideband,
    ) -> Result<u64, ProtocolError> {
        let repo = self.packs.repository();
        let mut req = RequestBuilder::default();
        // Haves are looked up as they arrive: only the common ones are kept (once each).
        let mut neg = Negotiation::default();
        let mut wanted_refs = WantedRefs::default();
        let (mut done, mut wait_for_done, mut no_progress) = (false, false, false);
        for line in args {
            let line = line?;
            let line = &line;
            if let Some(hex) = line.strip_prefix("want ") {
                req.want(repo, parse_id(hex, line)?, self.options.max_wants)?;
            } else if let Some(name) = line.strip_prefix("want-ref ") {
                // A hidden ref, or a broken one, is as unknown as a missing one (as in git).
                let shown =
                    (name == "HEAD" || name.starts_with("refs/")) && !self.hidden.is_hidden(name);
                let id = if shown {
                    match repo.refs().resolve_full(name) {
                        Ok(id) => id,
                        // A broken ref is unknown; a failure to read is not the client's.
                        Err(e @ packd_odb::Error::Io { .. }) => return Err(e.into()),
                        Err(_) => None,
                    }
                } else {
                    None
                };
                let id = id.ok_or_else(|| ProtocolError::Refused(format!("unknown ref {name}")))?;
                wanted_refs.add(name, id)?;
                req.want(repo, id, self.options.max_wants)?;
            } else if let Some(hex) = line.strip_prefix("have ") {
                neg.have(repo, parse_id(hex, line)?, self.options.max_haves)?;
            } else if let Some(spec) = line.strip_prefix("filter ") {
                req.filter_line(self.options.allow_filter, spec)?;
            } else if req.shallow_line(repo, line)? {
            } else {
                match line.as_str() {
                    "thin-pack" => req.thin = true,
                    "ofs-delta" => req.ofs_delta = true,
                    "include-tag" => req.include_tag = true,
                    "no-progress" => no_progress = true,
                    "done" => done = true,
                    "wait-for-done" => wait_for_done = true,
                    "deepen-relative" => req.relative = true,
                    _ => {
                        return Err(ProtocolError::Invalid(format!(
                            "fetch: unexpected line: '{}'",
                            show(line.as_bytes())
                        )))
                    }
                }
            }
        }
        if req.wants.is_empty() && !wait_for_done {
            // Nothing wanted: nothing to say (as git).
            return Ok(0);
        }
        // git's protocol v2 fetch checks no want at all, whatever the settings; packd still
        // requires every want to be a ref's tip (hidden ones included) or reached by one.
        self.check_wants_against_refs(&req.wants, None, true, true, cancel)?;

        if neg.haves_read > 0 && !done {
            pkt_line::write_text(out, "acknowledgments\n")?;
            if neg.common.is_empty() {
                pkt_line::write_text(out, "NAK\n")?;
            }
            // Each common object once, in the order first named, as git's upload-pack does since
            // it takes haves as they arrive (2.39 kept every line and acknowledged a repeat
            // again; its client takes one acknowledgement as well as two).
            for id in &neg.common {
                pkt_line::write_text(out, &format!("ACK {id}\n"))?;
            }
            if !wait_for_done && !req.wants.is_empty() && neg.ready(repo, &req.wants) {
                pkt_line::write_text(out, "ready\n")?;
                pkt_line::write_delim(out)?;
            } else {
                pkt_line::write_flush(out)?;
                return Ok(0);
            }
        }
        if req.wants.is_empty() {
            // wait-for-done with only haves: acknowledged above; no pack to send.
            pkt_line::write_flush(out)?;
            return Ok(0);
        }

        let request = req.build(neg.common.clone())?;
        if req.deepens() || !req.client_shallow.is_empty() {
            let updates = self.packs.shallow(&request)?;
            pkt_line::write_text(out, "shallow-info\n")?;
            for update in updates {
                pkt_line::write_text(out, &shallow_update_line(&update))?;
            }
            pkt_line::write_delim(out)?;
        }
        if !wanted_refs.list.is_empty() {
            pkt_line::write_text(out, "wanted-refs\n")?;
            for (name, id) in &wanted_refs.list {
                pkt_line::write_text(out, &format!("{id} {name}\n"))?;
            }
            pkt_line::write_delim(out)?;
        }
        pkt_line::write_text(out, "packfile\n")?;
        let send = SendOptions {
            sideband: Sideband::Large,
            progress: self.options.progress && !no_progress,
        };
        *err_band = send.sideband;
        self.send_pack(&request, send, out, cancel)
    }
}

/// Most distinct `want-ref` lines in one fetch (git has no limit; git's client sends one per
/// ref its refspecs name, and a name is at most a pkt-line long): 100,000 of them, and 16 MiB
/// of names in all.
const MAX_WANTED_REFS: usize = 100_000;
const MAX_WANTED_REF_BYTES: usize = 16 << 20;

/// The refs a fetch named with `want-ref`, each once, in the order first named.
#[derive(Default)]
struct WantedRefs {
    list: Vec<(String, ObjectId)>,
    seen: std::collections::HashSet<String>,
    bytes: usize,
}

impl WantedRefs {
    /// Records `name` (resolved to `id`), refusing past the limits.
    fn add(&mut self, name: &str, id: ObjectId) -> Result<(), ProtocolError> {
        if self.seen.contains(name) {
            return Ok(());
        }
        self.bytes += name.len();
        if self.list.len() >= MAX_WANTED_REFS || self.bytes > MAX_WANTED_REF_BYTES {
            return Err(ProtocolError::Refused(format!(
                "upload-pack: too many want-ref lines (the limit is {MAX_WANTED_REFS} refs, \
                 {} MiB of names)",
                MAX_WANTED_REF_BYTES >> 20
            )));
        }
        self.seen.insert(name.to_string());
        self.list.push((name.to_string(), id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_layout() {
        // Parsing alone does not touch the repository: exercised through a reader.
        let input = b"0014command=ls-refs\n0015agent=git/2.39.5\n00010009peel\n0000";
        let mut slice: &[u8] = input;
        let mut reader = PktReader::new(&mut slice);
        let mut lines = Vec::new();
        loop {
            match reader.read_line().unwrap() {
                Line::Eof => break,
                l => lines.push(l),
            }
        }
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], Line::Text("command=ls-refs".into()));
        assert_eq!(lines[2], Line::Delim);
    }
}
