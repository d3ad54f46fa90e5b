//! `packd verify PACK`: every check `git verify-pack` makes, using all cores.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use packd_odb::pack::Pack;
use packd_odb::HashKind;
use packd_storage::LocalStorage;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Arguments of `packd verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// The packs to check, each named by its .pack or .idx file.
    #[arg(required = true, value_name = "PACK")]
    packs: Vec<PathBuf>,
}

/// Checks each pack; stops at the first bad one.
pub fn run(workdir: &Path, args: &Args) -> Result<ExitCode> {
    let mut pool = rayon::ThreadPoolBuilder::new().stack_size(64 << 20);
    if let Some(n) = args.threads {
        pool = pool.num_threads(n.max(1));
    }
    let pool = pool.build().context("cannot start worker threads")?;
    for path in &args.packs {
        let path = workdir.join(path);
        let report = pool.install(|| verify_one(&path))?;
        println!(
            "{}: ok, {} objects ({} deltas, longest chain {})",
            path.display(),
            report.objects,
            report.deltas,
            report.max_chain
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn verify_one(path: &Path) -> Result<packd_odb::pack::verify::VerifyReport> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: not a file name", path.display()))?;
    let stem = match name.rsplit_once('.') {
        Some((stem, "pack" | "idx")) => stem,
        _ => bail!("{}: name a .pack or .idx file", path.display()),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let storage = LocalStorage::new(dir);
    let pack = Pack::open(&storage, &format!("{stem}.idx"), 0, HashKind::Sha1)?;
    let done = AtomicU64::new(0);
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(pack.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} objects ({per_sec}, {eta})")
                .expect("valid template"),
        );
        bar.set_message("Verifying");
        bar
    });
    let report = std::thread::scope(|s| {
        let worker = s.spawn(|| pack.verify(&done));
        while !worker.is_finished() {
            if let Some(bar) = &bar {
                bar.set_position(done.load(Ordering::Relaxed));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        worker.join().expect("the verifier does not panic")
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(report?)
}
