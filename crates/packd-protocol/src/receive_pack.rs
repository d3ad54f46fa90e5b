//! receive-pack, protocol v0 (the version git push speaks to receive-pack): take a pushed pack
//! and update refs.
//!
//! ```text
//! server:  "<id> refs/heads/main\0report-status report-status-v2 delete-refs side-band-64k
//!           quiet atomic ofs-delta push-options object-format=sha1 agent=packd/0.1.0\n"
//!          "<id> refs/tags/v1\n" ... "0000"
//!   empty: "0000000000000000000000000000000000000000 capabilities^{}\0<capabilities>\n" "0000"
//! client:  "<old> <new> refs/heads/main\0report-status side-band-64k atomic ...\n"
//!          "<old> <new> refs/heads/other\n" ... "0000"      (zero old: create; zero new: delete)
//!          ["<push option>\n" ... "0000"]                   (when push-options was asked)
//!          PACK...                                          (absent when every command deletes)
//! server:  report-status, inside band 1 packets when side-band-64k was asked, then "0000":
//!          "unpack ok\n" | "unpack <why>\n"
//!          "ok refs/heads/main\n" | "ng refs/heads/other <why>\n" ... "0000"
//! ```
//!
//! Order of work: the pack is indexed into a quarantine (thin bases from the repository), its
//! objects checked ([`packd_odb::connectivity`]), each command checked against the repository's
//! rules, the objects migrated into `objects/pack` (fsynced), and only then are refs moved
//! (all-or-nothing with `atomic`). A push that fails anywhere before migration leaves nothing.
//!
//! Progress: when the client asked for `side-band-64k` and not for `quiet` (git asks for
//! `quiet` when its stderr is not a terminal and `--progress` was not given), the long phases
//! are reported on band 2 as git's receive-pack does, which git shows as `remote: ...` lines:
//! `Resolving deltas: 100% (n/n), done.` and `Checking connectivity: n, done.`. Each message is
//! flushed at once, so that a transport that streams its output shows it as it happens.

use crate::receive_rules::Rules;
use crate::{agent, pkt_line, sideband, ProtocolError};
use packd_odb::connectivity::check_incoming;
use packd_odb::hide_refs::HiddenRefs;
use packd_odb::pack::data::input::InputLimits;
use packd_odb::pack::ingest::IngestOptions;
use packd_odb::quarantine::Quarantine;
use packd_odb::refs_update::{apply, RefUpdate, ATOMIC_FAILED};
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Limits on what one push may send.
#[derive(Debug, Clone)]
pub struct ReceivePackOptions {
    /// Most ref update commands in one push.
    pub max_commands: usize,
    /// Most push options.
    pub max_push_options: usize,
    /// Bounds on the pack.
    pub limits: InputLimits,
}

impl Default for ReceivePackOptions {
    fn default() -> Self {
        ReceivePackOptions {
            max_commands: 1_000_000,
            max_push_options: 1_000,
            limits: InputLimits::default(),
        }
    }
}

/// What one push did, for logs.
#[derive(Debug, Clone, Default)]
pub struct PushStats {
    /// Commands received.
    pub commands: usize,
    /// Of those, refs updated.
    pub updated: usize,
    /// Objects received (appended thin bases included).
    pub objects: u64,
    /// `None` when the objects were accepted, else why not.
    pub unpack_error: Option<String>,
}

/// receive-pack for one repository. The repository is opened afresh for each push, so that a
/// push sees the packs and refs of the pushes before it.
#[derive(Debug, Clone)]
pub struct ReceivePack {
    git_dir: PathBuf,
    options: ReceivePackOptions,
}

/// The capabilities the client asked for that change what the server does.
#[derive(Debug, Default)]
struct Asked {
    report_status: bool,
    side_band: bool,
    atomic: bool,
    push_options: bool,
    quiet: bool,
}

/// Progress messages on side-band 2, shaped like git's progress meter: `stage:  p% (d/t)\r`
/// at most once a second while a stage runs, `stage: 100% (t/t), done.\n` when it ends.
/// Silent when the client did not ask for a side band or asked for `quiet`; a failed write
/// (the client hung up) silences it too, the report's write then says what went wrong.
struct Progress<'w> {
    out: Option<&'w mut dyn Write>,
    stage: String,
    last: Option<Instant>,
    ended: bool,
}

/// Least time between two progress messages of one stage.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl<'w> Progress<'w> {
    fn new(out: Option<&'w mut dyn Write>) -> Progress<'w> {
        Progress {
            out,
            stage: String::new(),
            last: None,
            ended: false,
        }
    }

    fn send(&mut self, message: &str) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let max = sideband::Sideband::Large.max_payload();
        let sent = sideband::write_band(*out, sideband::BAND_PROGRESS, message.as_bytes(), max)
            .and_then(|()| out.flush());
        if sent.is_err() {
            self.out = None;
        }
    }

    /// `done` of `total` items of `stage` are done (index-pack's progress callback).
    fn update(&mut self, stage: &str, done: u64, total: u64) {
        // The client shows its own "Writing objects" for the transfer, as with git.
        if self.out.is_none() || stage == "Receiving objects" || total == 0 {
            return;
        }
        if stage != self.stage {
            self.stage = stage.to_string();
            self.last = None;
            self.ended = false;
        }
        if self.ended {
            return;
        }
        let done = done.min(total);
        let end = done == total;
        let now = Instant::now();
        if !end
            && self
                .last
                .is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY)
        {
            return;
        }
        self.last = Some(now);
        self.ended = end;
        let percent = done.saturating_mul(100) / total;
        let tail = if end { ", done.\n" } else { "\r" };
        self.send(&format!("{stage}: {percent:3}% ({done}/{total}){tail}"));
    }

    /// A stage without a known total has ended after `count` items.
    fn finished(&mut self, stage: &str, count: u64) {
        self.send(&format!("{stage}: {count}, done.\n"));
    }
}

const CAPABILITIES: &str = "report-status report-status-v2 delete-refs side-band-64k quiet \
                            atomic ofs-delta push-options object-format=sha1";

fn zero_to_none(id: ObjectId) -> Option<ObjectId> {
    (id != ObjectId::NULL).then_some(id)
}

/// One line of a report, made safe for a pkt-line.
fn one_line(text: &str) -> String {
    let mut s: String = text.replace('\n', " ");
    if s.len() > 60_000 {
        let mut end = 60_000;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Writes the advertisement of `refs` (the capabilities on the first line, or on a
/// `capabilities^{}` line when there are none) and its flush.
fn write_advertisement(
    refs: &[(String, ObjectId)],
    out: &mut dyn Write,
) -> Result<(), ProtocolError> {
    let caps = format!("{CAPABILITIES} agent={}", agent());
    if refs.is_empty() {
        pkt_line::write_text(
            out,
            &format!("{} capabilities^{{}}\0{caps}\n", ObjectId::NULL.to_hex()),
        )?;
    }
    for (i, (name, id)) in refs.iter().enumerate() {
        let line = if i == 0 {
            format!("{} {name}\0{caps}\n", id.to_hex())
        } else {
            format!("{} {name}\n", id.to_hex())
        };
        pkt_line::write_text(out, &line)?;
    }
    pkt_line::write_flush(out)?;
    out.flush()?;
    Ok(())
}

impl ReceivePack {
    /// receive-pack for the repository whose git directory is `git_dir`.
    pub fn new(git_dir: &Path, options: ReceivePackOptions) -> ReceivePack {
        ReceivePack {
            git_dir: git_dir.to_path_buf(),
            options,
        }
    }

    fn open(&self) -> Result<Repository, ProtocolError> {
        Ok(Repository::open(
            &self.git_dir,
            &RepositoryOptions::default(),
        )?)
    }

    /// Writes the ref advertisement. Over HTTP the transport writes the
    /// `# service=git-receive-pack` line and flush before this.
    pub fn advertise(&self, out: &mut dyn Write) -> Result<(), ProtocolError> {
        self.advertise_repository(&self.open()?, out)
    }

    /// [`ReceivePack::advertise`] for a repository already open (the one at this receiver's
    /// git directory): a process that serves one push opens it once for both phases.
    pub fn advertise_repository(
        &self,
        repo: &Repository,
        out: &mut dyn Write,
    ) -> Result<(), ProtocolError> {
        let hidden = HiddenRefs::from_config(repo.config(), "receive");
        let refs: Vec<(String, ObjectId)> = repo
            .refs()
            .list_shown("refs/", &hidden)?
            .into_iter()
            .map(|r| (r.name, r.id))
            .collect();
        write_advertisement(&refs, out)
    }

    /// The advertisement of a repository that does not exist yet, for a server that creates
    /// it on the first push (`packd serve --create-on-push`): no refs, as an empty
    /// repository's, so that git goes on to send its push.
    pub fn advertise_empty(out: &mut dyn Write) -> Result<(), ProtocolError> {
        write_advertisement(&[], out)
    }

    /// Reads the command list (and push options).
    fn read_commands(
        &self,
        reader: &mut pkt_line::PktReader<'_>,
    ) -> Result<(Vec<RefUpdate>, Asked), ProtocolError> {
        let mut commands = Vec::new();
        let mut asked = Asked::default();
        loop {
            let line = match reader.read_line()? {
                pkt_line::Line::Text(t) => t,
                pkt_line::Line::Flush | pkt_line::Line::Eof => break,
                other => {
                    return Err(ProtocolError::Invalid(format!(
                        "unexpected {other:?} in the command list"
                    )))
                }
            };
            let (command, caps) = match line.split_once('\0') {
                Some((c, caps)) if commands.is_empty() => (c, Some(caps)),
                Some(_) => {
                    return Err(ProtocolError::Invalid(
                        "capabilities after the first command".into(),
                    ))
                }
                None => (line.as_str(), None),
            };
            if let Some(caps) = caps {
                for cap in caps.split(' ') {
                    match cap {
                        "report-status" | "report-status-v2" => asked.report_status = true,
                        "side-band-64k" => asked.side_band = true,
                        "atomic" => asked.atomic = true,
                        "push-options" => asked.push_options = true,
                        "quiet" => asked.quiet = true,
                        c if c.starts_with("object-format=") && c != "object-format=sha1" => {
                            return Err(ProtocolError::Refused(format!(
                                "unsupported {c}: this repository uses sha1"
                            )))
                        }
                        _ => {}
                    }
                }
            }
            let mut parts = command.splitn(3, ' ');
            let (old, new, name) = match (parts.next(), parts.next(), parts.next()) {
                (Some(o), Some(n), Some(r)) => (ObjectId::from_hex(o), ObjectId::from_hex(n), r),
                _ => (None, None, ""),
            };
            let (Some(old), Some(new)) = (old, new) else {
                return Err(ProtocolError::Invalid(format!(
                    "bad command '{}' (expected '<old> <new> <ref>')",
                    pkt_line::show(command.as_bytes())
                )));
            };
            if commands.len() >= self.options.max_commands {
                return Err(ProtocolError::Refused(format!(
                    "too many ref updates in one push (at most {})",
                    self.options.max_commands
                )));
            }
            commands.push(RefUpdate {
                name: name.to_string(),
                old: zero_to_none(old),
                new: zero_to_none(new),
            });
        }
        if asked.push_options && !commands.is_empty() {
            let mut count = 0;
            loop {
                match reader.read_line()? {
                    pkt_line::Line::Text(_) => count += 1,
                    pkt_line::Line::Flush | pkt_line::Line::Eof => break,
                    other => {
                        return Err(ProtocolError::Invalid(format!(
                            "unexpected {other:?} in the push options"
                        )))
                    }
                }
                if count > self.options.max_push_options {
                    return Err(ProtocolError::Refused(format!(
                        "too many push options (at most {})",
                        self.options.max_push_options
                    )));
                }
            }
        }
        Ok((commands, asked))
    }

    /// `text` as the client is told it (see [`crate::told_to_client`]).
    fn relative(&self, text: &str) -> String {
        crate::told_to_client(text.to_string(), &[&self.git_dir])
    }

    /// Serves one push after the advertisement: commands, pack, checks, ref updates, report.
    pub fn serve(
        &self,
        input: &mut dyn Read,
        out: &mut dyn Write,
    ) -> Result<PushStats, ProtocolError> {
        self.serve_with(&mut || self.open().map(Arc::new), input, out)
    }

    /// [`ReceivePack::serve`] with `repo` opening the repository (the one at this receiver's
    /// git directory) once the commands are read, for a caller that already has it open. It
    /// must show the objects and refs as they are now: a push is checked against them. A
    /// caller that keeps a clone decides when the repository is closed (a process that exits
    /// next need not unmap its packs one by one).
    pub fn serve_with(
        &self,
        repo: &mut dyn FnMut() -> Result<Arc<Repository>, ProtocolError>,
        input: &mut dyn Read,
        out: &mut dyn Write,
    ) -> Result<PushStats, ProtocolError> {
        let (commands, asked) = {
            let mut reader = pkt_line::PktReader::new(input);
            self.read_commands(&mut reader)?
        };
        let mut stats = PushStats {
            commands: commands.len(),
            ..PushStats::default()
        };
        if commands.is_empty() {
            return Ok(stats);
        }
        let repo = repo()?;
        let wants_pack = commands.iter().any(|c| c.new.is_some());
        let mut progress = Progress::new((asked.side_band && !asked.quiet).then_some(&mut *out));
        let (unpack, results) = self.receive(
            &repo,
            input,
            &commands,
            &asked,
            wants_pack,
            &mut stats,
            &mut progress,
        );
        drop(progress);
        stats.unpack_error = unpack.clone().err();
        stats.updated = results.iter().filter(|r| r.is_ok()).count();
        if asked.report_status {
            let mut report = Vec::new();
            let status = match &unpack {
                Ok(()) => "unpack ok\n".to_string(),
                // Paths inside the repository are named relative to it: the client has
                // no business knowing where the server keeps its repositories.
                Err(e) => format!("unpack {}\n", one_line(&self.relative(e))),
            };
            pkt_line::write_text(&mut report, &status)?;
            for (c, r) in commands.iter().zip(&results) {
                let line = match r {
                    Ok(()) => format!("ok {}\n", c.name),
                    Err(why) => format!("ng {} {}\n", c.name, one_line(why)),
                };
                pkt_line::write_text(&mut report, &line)?;
            }
            pkt_line::write_flush(&mut report)?;
            if asked.side_band {
                sideband::write_band(
                    out,
                    sideband::BAND_DATA,
                    &report,
                    sideband::Sideband::Large.max_payload(),
                )?;
                pkt_line::write_flush(out)?;
            } else {
                out.write_all(&report)?;
            }
        }
        out.flush()?;
        Ok(stats)
    }

    /// Takes the pack in, checks everything, migrates and updates refs. Returns the unpack
    /// status and one result per command.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        repo: &Repository,
        input: &mut dyn Read,
        commands: &[RefUpdate],
        asked: &Asked,
        wants_pack: bool,
        stats: &mut PushStats,
        progress: &mut Progress<'_>,
    ) -> (Result<(), String>, Vec<Result<(), String>>) {
        let unpacker = |e: String| {
            let n = commands.len();
            (Err(e), vec![Err("unpacker error".to_string()); n])
        };
        let objects_dir = repo.common_dir().join("objects");
        let mut quarantine = match Quarantine::create(&objects_dir) {
            Ok(q) => q,
            Err(e) => return unpacker(e.to_string()),
        };
        let incoming = if wants_pack {
            // Appended bases at the level git's index-pack would use for this repository.
            let thin_base_level = match packd_odb::pack::ingest::thin_base_level(repo.config()) {
                Ok(level) => level,
                Err(e) => return unpacker(e.to_string()),
            };
            let options = IngestOptions {
                fix_thin: true,
                limits: self.options.limits,
                thin_base_level,
            };
            match quarantine.ingest(
                input,
                Some(repo.objects()),
                &options,
                &mut |stage, done, total| progress.update(stage, done, total),
            ) {
                Ok(ingested) => stats.objects = ingested.objects as u64,
                Err(e) => return unpacker(e.to_string()),
            }
            let incoming = match quarantine.objects() {
                Ok(db) => db,
                Err(e) => return unpacker(e.to_string()),
            };
            let tips: Vec<ObjectId> = commands.iter().filter_map(|c| c.new).collect();
            match check_incoming(&incoming, repo.objects(), &tips) {
                Ok(checked) => progress.finished("Checking connectivity", checked),
                Err(e) => return unpacker(e.to_string()),
            }
            Some(incoming)
        } else {
            None
        };

        let rules = Rules::read(repo);
        let hidden = HiddenRefs::from_config(repo.config(), "receive");
        let mut results: Vec<Result<(), String>> = commands
            .iter()
            .map(|c| {
                if hidden.is_hidden(&c.name) {
                    return Err("deny updating a hidden ref".to_string());
                }
                rules.check(c, incoming.as_ref(), repo.objects())
            })
            .collect();
        if asked.atomic && results.iter().any(|r| r.is_err()) {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(ATOMIC_FAILED.to_string());
            }
        }
        let accepted: Vec<(usize, RefUpdate)> = commands
            .iter()
            .enumerate()
            .filter(|(i, _)| results[*i].is_ok())
            .map(|(i, c)| (i, c.clone()))
            .collect();
        if accepted.is_empty() {
            return (Ok(()), results);
        }
        drop(incoming);
        // Objects first, durable, then the refs that point at them.
        if let Err(e) = quarantine.migrate() {
            let n = commands.len();
            return (
                Err(format!("cannot store the objects: {e}")),
                vec![Err("unpacker error".to_string()); n],
            );
        }
        let updates: Vec<RefUpdate> = accepted.iter().map(|(_, u)| u.clone()).collect();
        let applied = apply(repo.common_dir(), &updates, asked.atomic);
        for ((i, _), r) in accepted.iter().zip(applied) {
            results[*i] = r;
        }
        if asked.atomic && results.iter().any(|r| r.is_err()) {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(ATOMIC_FAILED.to_string());
            }
        }
        (Ok(()), results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bands(out: &[u8]) -> Vec<String> {
        let mut rest = out;
        let mut messages = Vec::new();
        while rest.len() >= 5 {
            let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
            assert_eq!(rest[4], sideband::BAND_PROGRESS);
            messages.push(String::from_utf8(rest[5..len].to_vec()).unwrap());
            rest = &rest[len..];
        }
        assert!(rest.is_empty());
        messages
    }

    #[test]
    fn progress_like_git() {
        let mut out = Vec::new();
        let mut p = Progress::new(Some(&mut out));
        p.update("Receiving objects", 1, 10);
        p.update("Resolving deltas", 0, 10);
        p.update("Resolving deltas", 5, 10); // within a second of the last: skipped
        p.update("Resolving deltas", 10, 10);
        p.update("Resolving deltas", 10, 10); // ended already
        p.finished("Checking connectivity", 10);
        drop(p);
        assert_eq!(
            bands(&out),
            [
                "Resolving deltas:   0% (0/10)\r",
                "Resolving deltas: 100% (10/10), done.\n",
                "Checking connectivity: 10, done.\n",
            ]
        );
        let mut quiet = Progress::new(None);
        quiet.update("Resolving deltas", 10, 10);
        quiet.finished("Checking connectivity", 10);
    }
}
