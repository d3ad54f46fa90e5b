//! `packd`: a git object store and pack server. This is the command line; the work is done by
//! the library crates (`packd-storage`, `packd-odb`).
//!
//! packd starts at its own C `main` (see `start.rs`) rather than std's: a push over ssh or
//! `git push --receive-pack` starts one process per push, and std's start-up is a measurable
//! part of a small push.

// Unit tests keep the test harness's own `main`.
#![cfg_attr(not(test), no_main)]

mod bucket;
mod cat_file;
mod commit_graph;
mod export;
mod import;
mod index_pack;
mod maintenance;
mod pack_objects;
mod receive_pack;
mod repack;
mod rev_list;
mod serve;
#[cfg(not(test))]
mod start;
mod upload_pack;
mod verify;
mod write_bitmap;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use packd_odb::{Repository, RepositoryOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// A git object store and pack server.
#[derive(Debug, Parser)]
#[command(name = "packd", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

/// The options every subcommand takes.
#[derive(Debug, clap::Args)]
struct GlobalArgs {
    /// Run as if started in DIR (repeatable, like git's -C).
    #[arg(short = 'C', value_name = "DIR", global = true)]
    chdir: Vec<PathBuf>,

    /// Delta base cache budget in bytes (k/m/g suffixes; 0 disables). Default: the repository's
    /// core.deltaBaseCacheLimit, else 96m (8m per repository for serve and upload-pack).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, global = true)]
    cache_size: Option<u64>,

    /// Print delta base cache hits, misses and evictions to stderr when done.
    #[arg(long, global = true)]
    stats: bool,
}

/// One subcommand's command line alone, `A` being its arguments. `packd receive-pack` is
/// started once per push (and `upload-pack` once per fetch over ssh), so these two are parsed
/// without building the whole command tree, every other subcommand's options included, which
/// costs about as much as reading the repository's refs.
#[derive(Debug, Parser)]
#[command(name = "packd")]
struct OneCommand<A: clap::Args> {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    args: A,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show objects, as `git cat-file` does.
    CatFile(cat_file::Args),
    /// Check a pack and its index, as `git verify-pack` does, on all cores.
    Verify(verify::Args),
    /// List the objects reachable from some revisions and not others, as `git rev-list` does.
    RevList(rev_list::Args),
    /// Write git's commit-graph for the commits the refs (or stdin) reach: `commit-graph write`.
    CommitGraph(commit_graph::Args),
    /// Pack the repository's objects, as `git repack` does (-a, -d, -f, -F, -b).
    Repack(repack::Args),
    /// Write reachability bitmaps (and a reverse index) for the repository's pack.
    WriteBitmap(write_bitmap::Args),
    /// Keep the repository fast: a geometric repack with a multi-pack-index and its bitmap
    /// (what `packd serve` runs after pushes), by hand.
    Maintenance(maintenance::Args),
    /// Take in a pack (stdin or a file), resolve its deltas on all cores and write its index.
    IndexPack(index_pack::Args),
    /// Write the pack a fetch would send for revisions read from stdin (`^rev` for haves).
    PackObjects(pack_objects::Args),
    /// Serve every repository under a directory to git clients over smart HTTP (and git://).
    Serve(Box<serve::Args>),
    /// Speak git's upload-pack protocol for one repository on stdin/stdout (for ssh).
    UploadPack(upload_pack::Args),
    /// Speak git's receive-pack protocol for one repository on stdin/stdout (for ssh and
    /// `git push --receive-pack`): take a pushed pack and update refs.
    ReceivePack(receive_pack::Args),
    /// Upload a repository to S3-compatible object storage (s3://BUCKET/PATH), its refs as
    /// a reftable stack, for `packd serve --store` to serve.
    Import(import::Args),
    /// Write a repository in object storage out as a bare repository stock git reads.
    Export(export::Args),
}

fn parse_size(s: &str) -> Result<u64, String> {
    packd_odb::config::parse_size(s)
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 96m, 512k, 0)"))
}

impl Cli {
    /// The command line, parsed by the one subcommand's parser when it is `receive-pack` or
    /// `upload-pack` followed by its own arguments (anything it refuses, `--help` included, goes
    /// to the full parser, so messages and behaviour stay the full parser's).
    fn parse_args() -> Cli {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        // The arguments after the subcommand's name, parsed by its own parser.
        fn alone<A: clap::Args + clap::FromArgMatches>(
            argv: &[std::ffi::OsString],
        ) -> Option<(GlobalArgs, A)> {
            let args = std::iter::once("packd".into()).chain(argv.iter().skip(2).cloned());
            let c = OneCommand::<A>::try_parse_from(args).ok()?;
            Some((c.global, c.args))
        }
        let one = match argv.get(1).and_then(|a| a.to_str()) {
            Some("receive-pack") => alone(&argv).map(|(g, a)| (g, Command::ReceivePack(a))),
            Some("upload-pack") => alone(&argv).map(|(g, a)| (g, Command::UploadPack(a))),
            _ => None,
        };
        match one {
            Some((global, command)) => Cli { global, command },
            None => Cli::try_parse_from(argv).unwrap_or_else(|e| exit_on_usage_error(e)),
        }
    }
}

/// Prints clap's message for a command line it could not take and exits with git's code for
/// the case: 0 for `--help` and `--version`, 1 for no command or an unknown one (git's "is not
/// a git command"), 129 for any other usage error (clap's own would be 2).
fn exit_on_usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let code = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
        ErrorKind::InvalidSubcommand
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 1,
        _ => 129,
    };
    let _ = e.print();
    std::process::exit(code)
}

impl GlobalArgs {
    fn workdir(&self) -> Result<PathBuf> {
        let mut dir = std::env::current_dir().context("cannot read the current directory")?;
        for c in &self.chdir {
            dir = dir.join(c);
        }
        Ok(dir)
    }

    /// How a server opens repositories: `--cache-size`, else each one's
    /// core.deltaBaseCacheLimit, else the serving default (smaller than git's 96m: a server
    /// keeps many repositories open).
    fn serving_options(&self) -> RepositoryOptions {
        RepositoryOptions {
            cache_budget: self.cache_size,
            default_cache_budget: Some(packd_odb::SERVING_CACHE_BUDGET),
            map_budget: Some(packd_odb::SERVING_MAP_BUDGET),
            keep_packed_refs: false,
        }
    }

    fn repository(&self) -> Result<Repository> {
        let dir = self.workdir()?;
        let options = RepositoryOptions {
            cache_budget: self.cache_size,
            ..RepositoryOptions::default()
        };
        Ok(Repository::discover(&dir, &options)?)
    }
}

/// Runs the command line; `start::main` calls it.
#[cfg_attr(test, allow(dead_code))]
fn run() -> ExitCode {
    let cli = Cli::parse_args();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PACKD_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if matches!(cli.command, Command::Serve(_)) {
                    "warn,packd_serve::access=info,packd_serve::lifecycle=info,packd_maint=info"
                } else {
                    "warn,packd_serve::access=info,packd_serve::lifecycle=info"
                })
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if matches!(cli.command, Command::Serve(_)) {
        // A server's log (the access log) needs times: RFC 3339, UTC.
        logs.with_timer(tracing_subscriber::fmt::time::SystemTime)
            .init();
    } else {
        logs.without_time().init();
    }
    let result = match &cli.command {
        Command::CatFile(args) => cli.global.repository().and_then(|repo| {
            let code = cat_file::run(&repo, args);
            if cli.global.stats {
                print_stats(&repo);
            }
            code
        }),
        Command::Verify(args) => cli.global.workdir().and_then(|dir| verify::run(&dir, args)),
        Command::RevList(args) => cli
            .global
            .repository()
            .and_then(|repo| rev_list::run(&repo, args)),
        Command::CommitGraph(args) => cli
            .global
            .repository()
            .and_then(|repo| commit_graph::run(&repo, args)),
        Command::Repack(args) => cli
            .global
            .repository()
            .and_then(|repo| repack::run(&repo, args)),
        Command::WriteBitmap(args) => cli
            .global
            .repository()
            .and_then(|repo| write_bitmap::run(&repo, args)),
        Command::Maintenance(args) => cli
            .global
            .repository()
            .and_then(|repo| maintenance::run(&repo, args)),
        Command::IndexPack(args) => cli
            .global
            .workdir()
            .and_then(|dir| index_pack::run(&dir, args)),
        Command::PackObjects(args) => cli
            .global
            .repository()
            .and_then(|repo| pack_objects::run(repo, args)),
        Command::Serve(args) => serve::run(
            args,
            RepositoryOptions {
                keep_packed_refs: true,
                ..cli.global.serving_options()
            },
        ),
        Command::UploadPack(args) => cli
            .global
            .workdir()
            .and_then(|dir| upload_pack::run(&dir, args, &cli.global.serving_options())),
        Command::ReceivePack(args) => cli
            .global
            .workdir()
            .and_then(|dir| receive_pack::run(&dir, args)),
        Command::Import(args) => cli.global.workdir().and_then(|dir| import::run(&dir, args)),
        Command::Export(args) => cli.global.workdir().and_then(|dir| export::run(&dir, args)),
    };
    match result {
        Ok(code) => code,
        Err(e) if writes_for_a_pipe(&cli.command) && is_broken_pipe(&e) => die_of_sigpipe(),
        Err(e) => {
            write_fatal(&one_line(&e));
            ExitCode::from(128)
        }
    }
}

/// Whether `command` prints output a pipe reads (`packd rev-list | head`), where the reader
/// going away ends the command as it ends git's: silently. The servers' peers hanging up is
/// an error they report, as git's upload-pack and receive-pack do.
fn writes_for_a_pipe(command: &Command) -> bool {
    !matches!(
        command,
        Command::Serve(_) | Command::UploadPack(_) | Command::ReceivePack(_)
    )
}

/// Whether `e` comes from writing to a pipe whose reader has gone.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Ends the process as git ends when its reader goes away: killed by SIGPIPE, without a word
/// (a shell sees 141). packd ignores SIGPIPE to see the error first (see start.rs); the
/// default action is put back and the signal raised. Should it not arrive, 141 all the same.
fn die_of_sigpipe() -> ExitCode {
    // SAFETY: restoring a signal's default disposition and raising it touch no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    ExitCode::from(141)
}

/// Writes `fatal: MESSAGE` to stderr in one write: stderr is unbuffered, and over ssh or
/// `--upload-pack` it is shared with the client, whose own lines must not land inside this one.
fn write_fatal(message: &str) {
    let line = format!("fatal: {message}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// git's `error:` line about each side of `a...b` that is no commit, before it refuses the
/// range ("Invalid symmetric difference expression").
fn not_commits(sides: &[(packd_odb::ObjectId, packd_odb::ObjectKind)]) {
    let mut text = String::new();
    for (id, kind) in sides {
        text.push_str(&format!(
            "error: object {id} is a {}, not a commit\n",
            kind.name()
        ));
    }
    let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
}

/// `e` and its causes on one line, each said once. The libraries' errors already end their
/// message with their cause's (`{path}: {source}`), so anyhow's `{:#}` would repeat it
/// ("x: No such file or directory: No such file or directory").
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn print_stats(repo: &Repository) {
    let s = repo.objects().cache_stats();
    eprintln!(
        "delta base cache: {} hits, {} misses, {} evictions, {} stored",
        s.hits, s.misses, s.evictions, s.inserts
    );
}
