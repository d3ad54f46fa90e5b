//! `packd export s3://BUCKET/PATH DIR`: writes a bucket repository (see `bucket.rs`) out as a
//! bare repository that stock git reads: its object files as they are, its refs (read from
//! the reftable stack) as `packed-refs`, `HEAD` and loose symbolic refs, its `config` without
//! the reftable marker an import added.
//!
//! The refs are read first, as one snapshot of the stack, and the objects listed after: every
//! file a ref needs was put before the list that names the ref (see `import.rs`, and a push
//! through `packd serve`). Everything is written into a directory beside DIR, through the
//! storage layer's writes (each file synced, git's 0444 for object files), and renamed to DIR
//! when complete: an export that fails or is killed leaves no DIR, only that directory
//! (`.NAME.packd-export-PID`), which a later export of the same DIR removes.

use crate::bucket::{self, CONFIG_MARKER};
use anyhow::{bail, Context, Result};
use packd_reftable::{hex, RefValue, Stack};
use packd_storage::{LocalStorage, Storage};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `packd export` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The repository in the bucket: `s3://BUCKET/PATH`, as `packd import` was given it.
    pub url: String,
    /// The bare repository to write; must not exist, or be an empty directory.
    pub dir: PathBuf,
    /// Files downloaded at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub jobs: usize,
}

/// The config an export writes when the bucket holds none: git's for a bare repository.
const BARE_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n";

/// Runs `packd export`.
pub fn run(cwd: &Path, args: &Args) -> Result<ExitCode> {
    let dir = cwd.join(&args.dir);
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!("{}: exists and is not empty", dir.display());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| dir.display().to_string()),
    }
    let source = bucket::open_s3(&args.url)?;
    let stack = Stack::new(std::sync::Arc::new(source.at("reftable")));
    let snapshot = stack
        .snapshot()
        .with_context(|| format!("reading the refs of {}", args.url))?;
    if snapshot.names().is_empty() {
        bail!(
            "{}: no repository there ({} is missing)",
            args.url,
            source.at("reftable").describe(packd_reftable::TABLES_LIST)
        );
    }
    let mut head = None;
    let mut packed = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    let mut symrefs = Vec::new();
    let mut count = 0;
    for record in snapshot.refs() {
        let record = record.with_context(|| format!("reading the refs of {}", args.url))?;
        if record.name == "HEAD" {
            head = Some(record.value);
            continue;
        }
        packd_refs::check_ref_name(&record.name)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.url))?;
        count += 1;
        match record.value {
            RefValue::Object(id) => {
                let _ = writeln!(packed, "{} {}", hex(&id), record.name);
            }
            RefValue::Peeled { target, peeled } => {
                let _ = writeln!(
                    packed,
                    "{} {}\n^{}",
                    hex(&target),
                    record.name,
                    hex(&peeled)
                );
            }
            RefValue::Symref(target) => symrefs.push((record.name, target)),
            RefValue::Deletion => count -= 1,
        }
    }
    let head = match head {
        Some(RefValue::Symref(target)) => {
            packd_refs::check_ref_name(&target)
                .map_err(|e| anyhow::anyhow!("{}: HEAD: {e}", args.url))?;
            format!("ref: {target}\n")
        }
        Some(RefValue::Object(id)) | Some(RefValue::Peeled { target: id, .. }) => {
            format!("{}\n", hex(&id))
        }
        Some(RefValue::Deletion) | None => bail!("{}: the refs have no HEAD", args.url),
    };

    let tmp = temporary_beside(&dir)?;
    let written = write_repository(args, &source, &tmp, &head, &packed, &symrefs);
    match written.and_then(|files| {
        std::fs::rename(&tmp, &dir)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))?;
        Ok(files)
    }) {
        Ok((files, bytes)) => {
            println!(
                "exported {} into {}: {files} files ({bytes} bytes), {count} refs",
                args.url,
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// The directory an export of `dir` is written into before it is renamed: beside `dir`, so
/// that the rename stays on one filesystem. One left by a killed export is removed first.
fn temporary_beside(dir: &Path) -> Result<PathBuf> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: not a directory name", dir.display()))?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = format!(".{name}.packd-export-");
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.flatten() {
            let stale = entry.file_name().to_str().and_then(|n| {
                let pid: u32 = n.strip_prefix(&prefix)?.parse().ok()?;
                // Another export of the same directory still running keeps its own.
                (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
            });
            if stale.is_some() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let tmp = parent.join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    Ok(tmp)
}

/// Writes the repository into `tmp`: objects, then config, shallow, refs and HEAD. Returns
/// the object files and their bytes.
fn write_repository(
    args: &Args,
    source: &packd_storage::S3Storage,
    tmp: &Path,
    head: &str,
    packed: &str,
    symrefs: &[(String, String)],
) -> Result<(u64, u64)> {
    let objects = source.at("objects");
    let names = bucket::list_object_files(&objects)?;
    let local_objects = LocalStorage::new(tmp.join("objects"));
    let bar = bucket::bytes_bar(0, "Downloading objects");
    let copied = bucket::copy_groups(&objects, &local_objects, &names, args.jobs, &bar)?;
    bar.finish_and_clear();
    for dir in ["objects/pack", "objects/info", "refs/heads", "refs/tags"] {
        std::fs::create_dir_all(tmp.join(dir))
            .with_context(|| format!("creating {}", tmp.join(dir).display()))?;
    }

    let top = LocalStorage::new(tmp);
    let config = match source.read_versioned("config")? {
        Some((bytes, _)) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match text.strip_suffix(CONFIG_MARKER) {
                Some(original) if !original.is_empty() => original.to_string(),
                Some(_) => BARE_CONFIG.to_string(),
                None => text,
            }
        }
        None => BARE_CONFIG.to_string(),
    };
    top.replace("config", None, config.as_bytes())?;
    if let Some((bytes, _)) = source.read_versioned("shallow")? {
        top.replace("shallow", None, &bytes)?;
    }
    top.replace("packed-refs", None, packed.as_bytes())?;
    for (name, target) in symrefs {
        packd_refs::check_ref_name(target)
            .map_err(|e| anyhow::anyhow!("{}: {name}: {e}", args.url))?;
        top.replace(name, None, format!("ref: {target}\n").as_bytes())?;
    }
    top.replace("HEAD", None, head.as_bytes())?;
    Ok(copied)
}
