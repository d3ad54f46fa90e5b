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
//! Order of work (git's, hooks included, see [`crate::hooks`]): the pack is indexed into a
//! quarantine (thin bases from the repository), its objects checked ([`packd_fsck`]: git's
//! fsck checks, links, collisions), hidden refs refused, `pre-receive` run (the quarantine shown
//! to it), each command checked against the repository's rules, the objects migrated into
//! `objects/pack` (fsynced), `proc-receive` given its commands, and only then are refs moved,
//! each after its `update` hook, inside `reference-transaction` (all-or-nothing with
//! `atomic`). After the report, `post-receive` and `post-update`. A push that fails anywhere
//! before migration leaves nothing.
//!
//! Progress: when the client asked for `side-band-64k` and not for `quiet` (git asks for
//! `quiet` when its stderr is not a terminal and `--progress` was not given), the long phases
//! are reported on band 2 as git's receive-pack does, which git shows as `remote: ...` lines:
//! `Resolving deltas: 100% (n/n), done.` and `Checking connectivity: n, done.`. Each message is
//! flushed at once, so that a transport that streams its output shows it as it happens.

use crate::hooks::objdir::ExposedQuarantine;
use crate::hooks::proc_receive::{ProcOutcome, ProcReceiveRefs, RefReport};
use crate::hooks::{HookOptions, Hooks, Relay};
use crate::receive_progress::Progress;
use crate::receive_rules::{commits_among, Rules};
use crate::receive_store::{peeled_among, PushStore};
use crate::{agent, pkt_line, sideband, ProtocolError};
use packd_fsck::{check_incoming_with, EarlyChecks, EarlyFound, FsckOptions};
use packd_odb::hide_refs::HiddenRefs;
use packd_odb::pack::data::input::InputLimits;
use packd_odb::pack::ingest::IngestOptions;
use packd_odb::quarantine::Quarantine;
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use packd_refs::{HookState, RefUpdate, TransactionHook, TransactionOptions, ATOMIC_FAILED};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Limits on what one push may send.
#[derive(Debug, Clone)]
pub struct ReceivePackOptions {
    /// Most ref update commands in one push.
    pub max_commands: usize,
    /// Most push options.
    pub max_push_options: usize,
    /// Bounds on the pack.
    pub limits: InputLimits,
    /// The repository's hooks: whether they run, and for how long at most.
    pub hooks: HookOptions,
    /// Where the repository is when its files are not on this disk (a bucket): then it is
    /// opened, its objects stored and its refs moved through this (see
    /// [`crate::receive_store`]), and it runs no hooks.
    pub store: Option<Arc<dyn PushStore>>,
}

impl Default for ReceivePackOptions {
    fn default() -> Self {
        ReceivePackOptions {
            max_commands: 1_000_000,
            max_push_options: 1_000,
            limits: InputLimits::default(),
            hooks: HookOptions::default(),
            store: None,
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
    /// `report-status-v2`: the report may carry `option` lines (proc-receive's).
    report_v2: bool,
    side_band: bool,
    atomic: bool,
    push_options: bool,
    quiet: bool,
    /// The push options sent (when `push_options` was asked).
    options: Vec<String>,
}

/// Most bytes of push options in one push, all together: they reach hooks as environment
/// variables, which the system bounds (Linux: 128 KiB each, about 2 MiB in all).
const MAX_PUSH_OPTION_BYTES: usize = 256 * 1024;

/// Most bytes of ref names (plus 40 for each command's ids) in one push, whatever the
/// transport let through: the commands are held until the push ends. git has no limit; a
/// mirror push of git/git's 4,300 refs is about 300 KB of them. (Over `packd serve` the
/// transport stops a push's commands at 8 MiB already.)
const MAX_COMMAND_BYTES: usize = 8 << 20;

/// git's reason for the other refs of an atomic push when one was refused before the
/// transaction (by the repository's rules or a hook); [`ATOMIC_FAILED`] is its reason when the
/// transaction itself failed.
const ATOMIC_REFUSED: &str = "atomic push failure";

const CAPABILITIES: &str = "report-status report-status-v2 delete-refs side-band-64k quiet \
                            atomic ofs-delta push-options object-format=sha1";

/// git's `receive.keepAlive`: seconds of a hook's silence after which the client gets a
/// keepalive (default 5; 0 or less: never).
fn keepalive_of(config: &packd_odb::config::Config) -> Option<Duration> {
    let secs = config
        .get("receive.keepalive")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(5);
    (secs > 0).then(|| Duration::from_secs(secs as u64))
}

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
        if let Some(store) = &self.options.store {
            return Ok(store.open()?);
        }
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
        // A push killed inside its ref transaction is finished (or undone) before the refs
        // are shown: the client sees an atomic push's refs all old or all new.
        if self.options.store.is_none() {
            let timeout = TransactionOptions::from_config(repo.config()).packed_refs_timeout;
            packd_refs::recover(repo.common_dir(), timeout.unwrap_or(Duration::MAX));
        }
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
        let mut command_bytes = 0usize;
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
                        "report-status" => asked.report_status = true,
                        "report-status-v2" => {
                            asked.report_status = true;
                            asked.report_v2 = true;
                        }
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
            command_bytes += name.len() + 40;
            if command_bytes > MAX_COMMAND_BYTES {
                return Err(ProtocolError::Refused(format!(
                    "push commands larger than {MAX_COMMAND_BYTES} bytes in all"
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
            let mut bytes = 0;
            loop {
                match reader.read_line()? {
                    pkt_line::Line::Text(mut option) => {
                        count += 1;
                        bytes += option.len();
                        if bytes > MAX_PUSH_OPTION_BYTES {
                            return Err(ProtocolError::Refused(format!(
                                "push options larger than {MAX_PUSH_OPTION_BYTES} bytes in all"
                            )));
                        }
                        // As a C string, the way git passes it on: up to a NUL.
                        if let Some(nul) = option.find('\0') {
                            option.truncate(nul);
                        }
                        if count <= self.options.max_push_options {
                            asked.options.push(option);
                        }
                    }
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
        let (commands, mut asked) = {
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
        // A repository in a store runs no hooks: its config is not this server's to trust
        // with programs to run.
        let no_hooks = HookOptions {
            enabled: false,
            ..self.options.hooks.clone()
        };
        let mut hooks = Hooks::new(
            repo.git_dir(),
            repo.common_dir(),
            repo.config(),
            if self.options.store.is_some() {
                &no_hooks
            } else {
                &self.options.hooks
            },
        );
        hooks.set_push_options(std::mem::take(&mut asked.options));
        let wants_pack = commands.iter().any(|c| c.new.is_some());
        let keepalive = keepalive_of(repo.config());
        let mut progress = Progress::new(asked.side_band.then_some(&mut *out), asked.quiet)
            .with_keepalive(keepalive);
        let mut reports = vec![Vec::new(); commands.len()];
        let (unpack, results) = self.receive(
            &repo,
            &mut hooks,
            input,
            &commands,
            &asked,
            wants_pack,
            &mut stats,
            &mut progress,
            &mut reports,
        );
        drop(progress);
        stats.unpack_error = unpack.clone().err();
        stats.updated = results.iter().filter(|r| r.is_ok()).count();
        let reported = self.write_report(out, &asked, &unpack, &commands, &results, &reports);
        // As git's: post-receive and post-update run after the report, their output still on
        // the side band, which ends after them; and they run when the refs moved even if the
        // client is gone. post-receive is told what proc-receive reported it did instead of a
        // command.
        let mut told = Vec::new();
        let mut updated = Vec::new();
        for ((c, r), reported) in commands.iter().zip(&results).zip(&reports) {
            if r.is_err() {
                continue;
            }
            updated.push(c.name.clone());
            if reported.is_empty() {
                told.push(c.clone());
            }
            for report in reported {
                told.push(RefUpdate {
                    name: report.ref_name.clone().unwrap_or_else(|| c.name.clone()),
                    old: report.old.map_or(c.old, zero_to_none),
                    new: report.new.map_or(c.new, zero_to_none),
                });
            }
        }
        {
            let mut relay = Progress::new(
                (asked.side_band && reported.is_ok()).then_some(&mut *out),
                asked.quiet,
            )
            .with_keepalive(keepalive);
            hooks.post_receive(&told, &mut relay);
            hooks.post_update(&updated, &mut relay);
        }
        reported?;
        if asked.report_status && asked.side_band {
            pkt_line::write_flush(out)?;
        }
        out.flush()?;
        Ok(stats)
    }

    /// Writes the report (when the client asked for one): `unpack ...`, then `ok`/`ng` per
    /// command, inside band 1 with a side band (whose closing flush the caller writes).
    fn write_report(
        &self,
        out: &mut dyn Write,
        asked: &Asked,
        unpack: &Result<(), String>,
        commands: &[RefUpdate],
        results: &[Result<(), String>],
        reports: &[Vec<RefReport>],
    ) -> Result<(), ProtocolError> {
        if !asked.report_status {
            return Ok(());
        }
        let mut report = Vec::new();
        let status = match unpack {
            Ok(()) => "unpack ok\n".to_string(),
            // Paths inside the repository are named relative to it: the client has
            // no business knowing where the server keeps its repositories.
            Err(e) => format!("unpack {}\n", one_line(&self.relative(e))),
        };
        pkt_line::write_text(&mut report, &status)?;
        for ((c, r), reported) in commands.iter().zip(results).zip(reports) {
            let line = match r {
                Ok(()) => format!("ok {}\n", c.name),
                Err(why) => format!("ng {} {}\n", c.name, one_line(why)),
            };
            pkt_line::write_text(&mut report, &line)?;
            if r.is_ok() && asked.report_v2 {
                // report-status-v2: what proc-receive did instead, one "ok" per report.
                for (n, told) in reported.iter().enumerate() {
                    if n > 0 {
                        pkt_line::write_text(&mut report, &line)?;
                    }
                    if let Some(name) = &told.ref_name {
                        pkt_line::write_text(&mut report, &format!("option refname {name}\n"))?;
                    }
                    if let Some(id) = told.old {
                        let hex = id.to_hex();
                        pkt_line::write_text(&mut report, &format!("option old-oid {hex}\n"))?;
                    }
                    if let Some(id) = told.new {
                        let hex = id.to_hex();
                        pkt_line::write_text(&mut report, &format!("option new-oid {hex}\n"))?;
                    }
                    if told.forced_update {
                        pkt_line::write_text(&mut report, "option forced-update\n")?;
                    }
                }
            }
        }
        pkt_line::write_flush(&mut report)?;
        if asked.side_band {
            sideband::write_band(
                out,
                sideband::BAND_DATA,
                &report,
                sideband::Sideband::Large.max_payload(),
            )?;
        } else {
            out.write_all(&report)?;
        }
        out.flush()?;
        Ok(())
    }

    /// Takes the pack in, checks everything, runs the hooks, migrates and updates refs, in
    /// git's order: connectivity and hidden refs, `pre-receive` (on every command), migration,
    /// then per ref the repository's rules, `update`, and the update itself. Returns the unpack
    /// status and one result per command.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        repo: &Repository,
        hooks: &mut Hooks,
        input: &mut dyn Read,
        commands: &[RefUpdate],
        asked: &Asked,
        wants_pack: bool,
        stats: &mut PushStats,
        progress: &mut Progress<'_>,
        reports: &mut [Vec<RefReport>],
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
        // The prune lock, held from the moment the pushed objects may name the repository's
        // (the pack is received; with no pack, the commands name them) until the refs are
        // updated, and the repository opened again if a prune ran before (see
        // hold_prune_lock). Released on return.
        let prune_lock: Option<packd_maint::lock::Held>;
        let reopened: Option<Repository>;
        let incoming = if wants_pack {
            // Appended bases at the level git's index-pack would use for this repository.
            let thin_base_level = match packd_odb::pack::ingest::thin_base_level(repo.config()) {
                Ok(level) => level,
                Err(e) => return unpacker(e.to_string()),
            };
            // The per-object checks run as the deltas are resolved (see packd_fsck::early);
            // options git refuses are refused after the pack, by check_received.
            let fsck_options = FsckOptions::for_receive(repo).ok();
            let early = fsck_options.as_ref().map(EarlyChecks::new);
            let options = IngestOptions {
                fix_thin: true,
                limits: self.options.limits,
                thin_base_level,
                observer: early.as_ref().map(|e| e as _),
            };
            let sent = match quarantine.ingest(
                input,
                Some(repo.objects()),
                &options,
                &mut |stage, done, total| progress.update(stage, done, total),
            ) {
                Ok(ingested) => {
                    stats.objects = ingested.objects as u64;
                    u64::from(ingested.objects - ingested.appended)
                }
                Err(e) => return unpacker(e.to_string()),
            };
            match self.hold_prune_lock(repo) {
                Ok((held, fresh)) => (prune_lock, reopened) = (held, fresh),
                Err(e) => return unpacker(e),
            }
            let repo = reopened.as_ref().unwrap_or(repo);
            let incoming = match quarantine.objects() {
                Ok(db) => db,
                Err(e) => return unpacker(e.to_string()),
            };
            let tips: Vec<ObjectId> = commands.iter().filter_map(|c| c.new).collect();
            let early = early.and_then(EarlyChecks::finish);
            if let Err(status) = check_received(repo, &incoming, &tips, sent, early, progress) {
                return unpacker(status);
            }
            Some(incoming)
        } else {
            match self.hold_prune_lock(repo) {
                Ok((held, fresh)) => (prune_lock, reopened) = (held, fresh),
                Err(e) => return unpacker(e),
            }
            None
        };
        let _prune_lock = prune_lock;
        let repo = reopened.as_ref().unwrap_or(repo);

        // Hidden refs first: refused alone, also in an atomic push (git's
        // reject_updates_to_hidden), so that the rest may still go through.
        let hidden = HiddenRefs::from_config(repo.config(), "receive");
        let mut results: Vec<Result<(), String>> = commands
            .iter()
            .map(|c| match (hidden.is_hidden(&c.name), c.new) {
                (false, _) => Ok(()),
                (true, None) => Err("deny deleting a hidden ref".to_string()),
                (true, Some(_)) => Err("deny updating a hidden ref".to_string()),
            })
            .collect();
        if hooks.find("pre-receive").is_some() {
            // The hook reads the pushed objects from a quarantine git knows how to read,
            // gone when it has run, whatever it answered.
            let exposed = match ExposedQuarantine::create(&objects_dir, &quarantine) {
                Ok(exposed) => exposed,
                Err(e) => return unpacker(format!("cannot show the objects to the hooks: {e}")),
            };
            let env = exposed.as_ref().map(|q| q.env()).unwrap_or_default();
            let verdict = hooks.pre_receive(commands, &env, progress);
            drop(exposed);
            if let Err(why) = verdict {
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(why.clone());
                }
                return (Ok(()), results);
            }
        }

        // The commands for proc-receive skip the repository's rules, unless it hands them
        // back: their verdicts wait.
        let proc_refs = ProcReceiveRefs::from_config(repo.config());
        let for_proc: Vec<bool> = commands
            .iter()
            .zip(&results)
            .map(|(c, r)| r.is_ok() && !proc_refs.is_empty() && proc_refs.matches(c))
            .collect();
        let mut held_back: Vec<Option<Result<(), String>>> = vec![None; commands.len()];
        // What each accepted command will apply: the rules may drop a deletion's old value
        // that the repository lacks, as git does.
        let mut to_apply: Vec<RefUpdate> = commands.to_vec();
        let rules = Rules::read(repo);
        for i in 0..commands.len() {
            if results[i].is_err() {
                continue;
            }
            let checked = rules.check(&commands[i], incoming.as_ref(), repo);
            for message in &checked.messages {
                progress.relay(format!("{}\n", self.relative(message)).as_bytes());
            }
            let verdict = checked.outcome.map(|u| to_apply[i] = u);
            if for_proc[i] {
                held_back[i] = Some(verdict);
                continue;
            }
            if verdict.is_err() && asked.atomic {
                // git stops at the first refusal of an atomic push: the rest are neither
                // checked nor applied.
                results[i] = verdict;
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(ATOMIC_REFUSED.to_string());
                }
                return (Ok(()), results);
            }
            results[i] = verdict;
        }
        if results.iter().all(|r| r.is_err()) {
            return (Ok(()), results);
        }
        // The transaction refuses a non-commit under refs/heads/: which of the new branch tips
        // are commits, read while the quarantine is still open.
        let branch_tips: Vec<ObjectId> = to_apply
            .iter()
            .zip(&results)
            .filter(|(u, r)| r.is_ok() && u.name.starts_with("refs/heads/"))
            .filter_map(|(u, _)| u.new)
            .collect();
        let commits = commits_among(&branch_tips, incoming.as_ref(), repo.objects());
        // A store's refs record what a tag peels to.
        let peeled = match &self.options.store {
            Some(_) => {
                let new: Vec<ObjectId> = to_apply.iter().filter_map(|u| u.new).collect();
                peeled_among(&new, incoming.as_ref(), repo)
            }
            None => Default::default(),
        };
        drop(incoming);
        // Objects first, durable, then the refs that point at them.
        let migrated = match &self.options.store {
            Some(store) => quarantine.migrate_to(store.objects().as_ref()),
            None => quarantine.migrate(),
        };
        if let Err(e) = migrated {
            let n = commands.len();
            return (
                Err(format!("cannot store the objects: {e}")),
                vec![Err("unpacker error".to_string()); n],
            );
        }
        let handled = Self::proc_receive(
            hooks,
            commands,
            &for_proc,
            held_back,
            &mut results,
            asked,
            reports,
            progress,
        );
        let accepted: Vec<usize> = (0..commands.len())
            .filter(|i| results[*i].is_ok() && !handled[*i])
            .collect();
        let mut transaction = Transaction {
            receive: self,
            repo,
            commits: &commits,
            peeled: &peeled,
        };
        let per_ref = !asked.atomic
            && (hooks.find("update").is_some() || hooks.find("reference-transaction").is_some());
        if per_ref {
            // As git's: one ref at a time, each with its hooks, so that a hook sees the refs
            // updated before its own.
            for i in accepted {
                results[i] = hooks.update(&commands[i], progress).and_then(|()| {
                    transaction
                        .apply(hooks, &to_apply[i..=i], false, progress)
                        .remove(0)
                });
            }
            return (Ok(()), results);
        }
        // An atomic push fails as a whole for a refusal from here on, not for a hidden ref
        // (refused alone above, as git does).
        let fail_rest = |results: &mut [Result<(), String>], why: &str| {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(why.to_string());
            }
        };
        let mut updates = Vec::with_capacity(accepted.len());
        let mut applied_to = Vec::with_capacity(accepted.len());
        for &i in &accepted {
            if let Err(why) = hooks.update(&commands[i], progress) {
                results[i] = Err(why);
                if asked.atomic {
                    // git stops at the first refusal of an atomic push.
                    fail_rest(&mut results, ATOMIC_REFUSED);
                    return (Ok(()), results);
                }
                continue;
            }
            updates.push(to_apply[i].clone());
            applied_to.push(i);
        }
        let applied = transaction.apply(hooks, &updates, asked.atomic, progress);
        let mut failed = false;
        for (i, r) in applied_to.into_iter().zip(applied) {
            failed |= r.is_err();
            results[i] = r;
        }
        if asked.atomic && failed {
            fail_rest(&mut results, ATOMIC_FAILED);
        }
        (Ok(()), results)
    }

    /// Takes the prune lock shared for a push ([`packd_maint::lock::push_guard`]) and returns
    /// it with the repository to check the push against and update: `None` for `repo` itself,
    /// or `repo` opened again when a prune deleted one of the packs it had open.
    ///
    /// How this closes the race with a prune: maintenance deletes unreachable objects only
    /// while it holds the lock exclusively, after re-reading the refs
    /// (`packd_maint::cruft::prune`). Either it does so before this returns, and the checks
    /// that follow (connectivity, the rules) read the repository after the deletion, an
    /// object it dropped found missing and the push refused, rather than a ref pointing at
    /// nothing; an object found in a pack it deleted would be such a stale answer, hence the
    /// repository opened again. Or it waits until the push has updated its refs, and keeps
    /// what they reach.
    /// A repository in a store has no prune lock here: nothing on this server prunes it.
    fn hold_prune_lock(
        &self,
        repo: &Repository,
    ) -> Result<(Option<packd_maint::lock::Held>, Option<Repository>), String> {
        if self.options.store.is_some() {
            return Ok((None, None));
        }
        let objects_dir = repo.common_dir().join("objects");
        let held = packd_maint::lock::push_guard(&objects_dir).map_err(|e| e.to_string())?;
        let pruned = repo
            .objects()
            .packs_with_storage()
            .any(|(storage, pack)| !storage.exists(pack.name()));
        if !pruned {
            return Ok((Some(held), None));
        }
        tracing::debug!("packs deleted during the push: the repository opened again");
        let fresh = self.open().map_err(|e| e.to_string())?;
        Ok((Some(held), Some(fresh)))
    }

    /// Hands the commands `for_proc` marks that are still accepted to `proc-receive`, as git
    /// does: what it did for them goes to `reports`, a refusal to `results`, and a command it
    /// hands back gets its verdict from the rules (`held_back`). When the hook failed, the
    /// commands it did not answer (all others too, when atomic) are refused. Returns which
    /// commands it took care of (receive-pack then leaves their refs alone).
    #[allow(clippy::too_many_arguments)]
    fn proc_receive(
        hooks: &mut Hooks,
        commands: &[RefUpdate],
        for_proc: &[bool],
        mut held_back: Vec<Option<Result<(), String>>>,
        results: &mut [Result<(), String>],
        asked: &Asked,
        reports: &mut [Vec<RefReport>],
        progress: &mut Progress<'_>,
    ) -> Vec<bool> {
        let n = commands.len();
        let mut handled = vec![false; n];
        let taken: Vec<usize> = (0..n)
            .filter(|&i| for_proc[i] && results[i].is_ok())
            .collect();
        if taken.is_empty() {
            return handled;
        }
        let given: Vec<&RefUpdate> = taken.iter().map(|&i| &commands[i]).collect();
        let answer = hooks.proc_receive(&given, asked.atomic, asked.push_options, progress);
        let mut still_its = vec![false; n];
        for (&i, outcome) in taken.iter().zip(answer.outcomes) {
            match outcome {
                ProcOutcome::Done(told) => {
                    handled[i] = true;
                    reports[i] = told;
                }
                ProcOutcome::Refused(why) => results[i] = Err(why),
                ProcOutcome::FallThrough => {
                    if let Some(verdict) = held_back[i].take() {
                        results[i] = verdict;
                    }
                    continue;
                }
            }
            still_its[i] = true;
        }
        if answer.failed {
            for i in 0..n {
                if results[i].is_ok() && !handled[i] && (still_its[i] || asked.atomic) {
                    results[i] = Err("fail to run proc-receive hook".into());
                }
            }
        }
        handled
    }
}

/// The ref transactions of one push: [`packd_refs::apply`] on the repository's refs, with the
/// `reference-transaction` hook run at its `prepared`, `committed` and `aborted` points.
struct Transaction<'a> {
    receive: &'a ReceivePack,
    repo: &'a Repository,
    /// Which new branch tips are commits (the transaction refuses anything else there).
    commits: &'a HashSet<ObjectId>,
    /// What the new annotated tags peel to (for a store's refs).
    peeled: &'a std::collections::HashMap<ObjectId, ObjectId>,
}

/// The `reference-transaction` hook as the transaction calls it.
struct ReferenceTransactionHook<'h> {
    hooks: &'h mut Hooks,
}

impl TransactionHook for ReferenceTransactionHook<'_> {
    fn run(&mut self, state: HookState, updates: &[RefUpdate]) -> Result<(), String> {
        self.hooks.reference_transaction(state.as_str(), updates)
    }
}

impl Transaction<'_> {
    /// Moves the refs of `updates` in one transaction (atomic) or one each, and returns one
    /// result per update; git's `error:` line of each refusal goes to the client as it does
    /// from git's receive-pack. A `prepared` hook that fails refuses them (git 2.39's
    /// receive-pack dies there instead).
    fn apply(
        &mut self,
        hooks: &mut Hooks,
        updates: &[RefUpdate],
        atomic: bool,
        progress: &mut Progress<'_>,
    ) -> Vec<Result<(), String>> {
        if updates.is_empty() {
            return Vec::new();
        }
        let commits = self.commits;
        let is_commit = |id: &ObjectId| commits.contains(id);
        let options = TransactionOptions {
            is_commit: Some(&is_commit),
            ..TransactionOptions::from_config(self.repo.config())
        };
        let mut hook = ReferenceTransactionHook { hooks };
        let results = match &self.receive.options.store {
            Some(store) => store.apply(updates, atomic, &options, self.peeled),
            None => packd_refs::apply(self.repo.common_dir(), updates, atomic, &options, &mut hook),
        };
        results
            .into_iter()
            .map(|r| {
                r.map_err(|refusal| {
                    if let Some(e) = &refusal.error {
                        let line = format!("error: {e}\n");
                        progress.relay(self.receive.relative(&line).as_bytes());
                    }
                    refusal.reason
                })
            })
            .collect()
    }
}

/// The checks of a received pack ([`packd_fsck::check_incoming`] with the repository's
/// `receive.fsck*` configuration); their messages are relayed on side-band 2 as git's
/// receive-pack relays its unpacker's (also when the client asked for `quiet`). `Err` is the
/// unpack status.
fn check_received(
    repo: &Repository,
    incoming: &packd_odb::ObjectDb,
    tips: &[ObjectId],
    sent: u64,
    early: Option<EarlyFound>,
    progress: &mut Progress<'_>,
) -> Result<(), String> {
    let relay = |progress: &mut Progress<'_>, lines: &[String]| {
        for line in lines {
            progress.relay(format!("{line}\n").as_bytes());
        }
    };
    let options = FsckOptions::for_receive(repo).map_err(|e| {
        relay(progress, &[format!("fatal: {e}")]);
        e.to_string()
    })?;
    match check_incoming_with(incoming, repo.objects(), tips, &options, sent, early) {
        Ok(checked) => {
            relay(progress, &checked.messages);
            progress.finished("Checking connectivity", checked.objects);
            Ok(())
        }
        Err(e) => {
            relay(progress, &e.remote_lines());
            Err(e.unpack_status())
        }
    }
}
