//! `packd index-pack`: take in a pack (from stdin into a repository, or a pack file in place),
//! resolve its deltas on all cores and write its index, as `git index-pack` does.

use anyhow::{bail, Context, Result};
use packd_odb::pack::data::input::InputLimits;
use packd_odb::pack::ingest::{index_pack, index_pack_file, thin_base_level, IngestOptions};
use packd_odb::{Repository, RepositoryOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `packd index-pack`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Read the pack from stdin and store it in the repository's objects/pack.
    #[arg(long)]
    stdin: bool,
    /// Complete a thin pack with the bases it lacks, from the repository.
    #[arg(long)]
    fix_thin: bool,
    /// Also write a reverse index (.rev) next to the index.
    #[arg(long)]
    rev_index: bool,
    /// Show progress on stderr.
    #[arg(short = 'v')]
    verbose: bool,
    /// Refuse packs declaring more objects than this.
    #[arg(long, value_name = "N")]
    max_objects: Option<u32>,
    /// A pack file to index in place (its .idx is written next to it).
    pack: Option<PathBuf>,
}

/// Runs `packd index-pack` from `dir`.
pub fn run(dir: &Path, args: &Args) -> Result<ExitCode> {
    let limits = InputLimits {
        max_objects: args.max_objects.unwrap_or(u32::MAX),
        ..InputLimits::default()
    };
    let mut options = IngestOptions {
        fix_thin: args.fix_thin,
        limits,
        thin_base_level: None,
        observer: None,
    };
    let verbose = args.verbose;
    let mut last = std::time::Instant::now();
    let mut progress = |stage: &str, done: u64, total: u64| {
        if verbose && (done == total || last.elapsed().as_millis() >= 200) {
            last = std::time::Instant::now();
            eprint!(
                "\r{stage}: {done}/{total}{}",
                if done == total { "\n" } else { "" }
            );
        }
    };
    let (ingested, repo_for_rev) = match (&args.pack, args.stdin) {
        (Some(_), true) => bail!("give either --stdin or a pack file, not both"),
        (None, false) => bail!("nothing to index: give --stdin or a pack file"),
        (None, true) => {
            let repo = Repository::discover(dir, &RepositoryOptions::default())?;
            options.thin_base_level = thin_base_level(repo.config())?;
            let pack_dir = repo.git_dir().join("objects").join("pack");
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let ingested = index_pack(
                &mut input,
                &pack_dir,
                Some(repo.objects()),
                &options,
                &mut progress,
            )?;
            (ingested, Some(repo))
        }
        (Some(pack), false) => {
            if args.fix_thin {
                bail!("--fix-thin needs --stdin");
            }
            let pack = dir.join(pack);
            if !pack.is_file() {
                bail!("cannot open {}: not a file", pack.display());
            }
            // Read and resolved where it is; the index goes next to it.
            let idx = pack.with_extension("idx");
            let ingested = index_pack_file(&pack, &idx, &options, &mut progress)?;
            println!("{}", ingested.hex);
            if args.rev_index {
                write_rev(
                    &pack.with_extension("rev"),
                    &ingested.pack_order,
                    &ingested.hex,
                )?;
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    if args.rev_index && !ingested.existed {
        write_rev(
            &ingested.pack_path.with_extension("rev"),
            &ingested.pack_order,
            &ingested.hex,
        )?;
    }
    drop(repo_for_rev);
    println!("pack\t{}", ingested.hex);
    Ok(ExitCode::SUCCESS)
}

fn write_rev(path: &Path, order: &[u32], hex: &str) -> Result<()> {
    let checksum: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect();
    let bytes = packd_reach::rev_index::encode(order, &checksum)?;
    let tmp = path.with_extension("rev.tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    // Read-only, as git writes a reverse index.
    packd_odb::file_mode::make_read_only(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
