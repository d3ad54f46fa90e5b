//! `packd upload-pack`: git's upload-pack on stdin/stdout, for ssh and `git clone
//! --upload-pack`. The protocol version comes from `GIT_PROTOCOL`, as git sets it.

use anyhow::{Context, Result};
use packd_odb::{Repository, RepositoryOptions};
use packd_pack::clone_cache::CloneCacheConfig;
use packd_pack::PackServer;
use packd_protocol::{Mode, ProtocolVersion, UploadPack, UploadPackOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `packd upload-pack`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Serve one request and exit (the HTTP transport's mode): no advertisement unless
    /// --advertise-refs is given too.
    #[arg(long)]
    stateless_rpc: bool,

    /// Only write the advertisement, then exit.
    #[arg(long, alias = "http-backend-info-refs")]
    advertise_refs: bool,

    /// Accepted for compatibility with git upload-pack (the directory is always taken as given).
    #[arg(long)]
    strict: bool,

    /// Give up when the client sends nothing (and reads nothing) for this many seconds.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,

    /// The repository: a bare repository, a git directory, or a work tree.
    #[arg(value_name = "DIR")]
    dir: PathBuf,

    /// Room for clone packs in the repository (k/m/g suffixes; 0 turns it off): see
    /// `packd serve --clone-cache-bytes`.
    #[arg(long, value_name = "BYTES", default_value = "1g", value_parser = crate::parse_size)]
    clone_cache_bytes: u64,
}

/// Opens the repository at `dir` as git upload-pack does: the directory itself, its `.git`,
/// or `DIR.git`; never a parent directory.
pub(crate) fn open_repository(dir: &Path) -> Result<Repository> {
    open_repository_with(dir, &RepositoryOptions::default())
}

/// [`open_repository`] with `options` (a server's delta base cache budget).
pub(crate) fn open_repository_with(dir: &Path, options: &RepositoryOptions) -> Result<Repository> {
    let mut tried = Vec::new();
    let mut with_git = dir.as_os_str().to_owned();
    with_git.push(".git");
    for candidate in [dir.to_path_buf(), dir.join(".git"), PathBuf::from(with_git)] {
        if !candidate.is_dir() {
            continue;
        }
        match Repository::open(&candidate, options) {
            Ok(repo) => return Ok(repo),
            Err(e) => tried.push(e),
        }
    }
    match tried.into_iter().next() {
        Some(packd_odb::Error::NotARepository(_)) | None => {
            anyhow::bail!("'{}' does not appear to be a git repository", dir.display())
        }
        Some(e) => Err(e).with_context(|| format!("cannot open {}", dir.display())),
    }
}

/// Notes when the client last made progress, for `--timeout`.
struct Activity {
    last_ms: AtomicU64,
    start: Instant,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// stdin, noting activity.
struct ActiveReader<'a, R> {
    inner: R,
    activity: &'a Activity,
}

impl<R: Read> Read for ActiveReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.activity.touch();
        Ok(n)
    }
}

/// stdout, noting activity.
struct ActiveWriter<'a, W> {
    inner: W,
    activity: &'a Activity,
}

impl<W: Write> Write for ActiveWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.activity.touch();
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()?;
        self.activity.touch();
        Ok(())
    }
}

/// A file range goes to stdout (a pipe or socket to the client) by the kernel (`sendfile`),
/// after what is buffered.
#[cfg(unix)]
impl packd_pack::PackSink for ActiveWriter<'_, std::io::BufWriter<std::io::StdoutLock<'_>>> {
    fn takes_file_ranges(&self) -> bool {
        packd_pack::FileRange::SENT_BY_KERNEL
    }

    fn send_file_range(&mut self, range: &packd_pack::FileRange) -> std::io::Result<()> {
        self.inner.flush()?;
        range.send_to(self.inner.get_mut())?;
        self.activity.touch();
        Ok(())
    }
}

#[cfg(not(unix))]
impl packd_pack::PackSink for ActiveWriter<'_, std::io::BufWriter<std::io::StdoutLock<'_>>> {}

/// Runs `packd upload-pack`; `workdir` is where a relative DIR starts.
pub fn run(workdir: &Path, args: &Args, options: &RepositoryOptions) -> Result<ExitCode> {
    let dir = workdir.join(&args.dir);
    let repo = Arc::new(open_repository_with(&dir, options)?);
    let cache = CloneCacheConfig::in_repository(&repo, args.clone_cache_bytes);
    let packs = Arc::new(
        PackServer::open(repo)
            .for_one_request()
            .with_clone_cache(cache),
    );
    let upload = UploadPack::new(packs, UploadPackOptions::default());
    let version = ProtocolVersion::from_git_protocol(std::env::var("GIT_PROTOCOL").ok().as_deref());
    let mode = if args.stateless_rpc {
        Mode::Stateless
    } else {
        Mode::Stateful
    };

    let activity = Arc::new(Activity {
        last_ms: AtomicU64::new(0),
        start: Instant::now(),
    });
    let cancel = Arc::new(AtomicBool::new(false));
    if let Some(secs) = args.timeout.filter(|s| *s > 0) {
        let activity = Arc::clone(&activity);
        let limit = Duration::from_secs(secs);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250).min(limit));
            if activity.idle() >= limit {
                crate::write_fatal(&format!("timeout: no activity for {secs} seconds"));
                std::process::exit(128);
            }
        });
    }

    let stdout = std::io::stdout();
    let mut out = ActiveWriter {
        inner: std::io::BufWriter::with_capacity(64 * 1024, stdout.lock()),
        activity: &activity,
    };
    let mut shown = packd_protocol::Advertised::default();
    if args.advertise_refs || !args.stateless_rpc {
        shown = upload
            .advertise(version, mode, &mut out)
            .context("cannot write the advertisement")?;
    }
    if args.advertise_refs {
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    let mut input = ActiveReader {
        inner: stdin.lock(),
        activity: &activity,
    };
    let stats = upload.serve(version, mode, &shown, &mut input, &mut out, &cancel)?;
    tracing::debug!(
        "{}: {} objects, {} bytes",
        stats.command,
        stats.objects,
        stats.bytes
    );
    Ok(ExitCode::SUCCESS)
}
