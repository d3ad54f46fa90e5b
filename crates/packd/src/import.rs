//! `packd import DIR s3://BUCKET/PATH`: uploads a repository to a bucket, in the layout
//! `bucket.rs` describes, through the storage layer's writes (every file put only if absent).
//!
//! The objects go first (packs before their indexes, indexes before a multi-pack-index, then
//! the loose objects as one pack of their own: in a bucket a loose object would cost a request
//! per lookup), then `config`, `shallow`, `HEAD` and the `refs/heads` note, and last the refs
//! as one reftable, whose `tables.list` makes the repository exist. An import that fails or is
//! killed leaves no list, so nothing reads it as a repository, and running it again puts what
//! is missing (files already there with their length are taken as they are: they are named by
//! their content). Reflogs, hooks and `info/` are not imported: a bucket's hooks are the
//! server's configuration, and reflogs in the stack are written by pushes from then on.

use crate::bucket::{self, CONFIG_MARKER, REFTABLE_HEAD, REFTABLE_REFS_HEADS};
use anyhow::{bail, Context, Result};
use packd_odb::packed_refs::Peeled;
use packd_odb::{Repository, RepositoryOptions};
use packd_reftable::{Expected, RefUpdate, RefValue, Stack, TABLES_LIST};
use packd_storage::{LocalStorage, Storage};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// `packd import` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The repository to upload (a bare repository, or a work tree's `.git`).
    pub dir: PathBuf,
    /// Where it goes: `s3://BUCKET/PATH` (the repository's own prefix, e.g.
    /// `s3://git/repos/linux.git`); endpoint, region and credentials come from the usual AWS
    /// environment variables.
    pub url: String,
    /// Files uploaded at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub jobs: usize,
}

/// Runs `packd import`.
pub fn run(cwd: &Path, args: &Args) -> Result<ExitCode> {
    let dir = cwd.join(&args.dir);
    let repo = Repository::open(&dir, &RepositoryOptions::default())
        .or_else(|_| Repository::open(&dir.join(".git"), &RepositoryOptions::default()))
        .with_context(|| format!("{}: not a git repository", args.dir.display()))?;
    let common = repo.common_dir().to_path_buf();
    let alternates = common.join("objects/info/alternates");
    if std::fs::metadata(&alternates).is_ok_and(|m| m.len() > 0) {
        bail!(
            "{}: the repository borrows objects from others (objects/info/alternates); \
             run `git repack -a` in it first so that its objects are its own",
            args.dir.display()
        );
    }
    if repo
        .config()
        .get("extensions.refStorage")
        .is_some_and(|v| !v.eq_ignore_ascii_case("files"))
    {
        bail!(
            "{}: its refs are not in files (extensions.refStorage); packd imports repositories \
             whose refs are loose files and packed-refs",
            args.dir.display()
        );
    }
    let bucket = bucket::open_s3(&args.url)?;
    let reftable: Arc<dyn Storage> = Arc::new(bucket.at("reftable"));
    if reftable.exists(TABLES_LIST) {
        bail!(
            "{}: a repository is there already ({} exists)",
            args.url,
            reftable.describe(TABLES_LIST)
        );
    }

    // The refs are read before the objects are listed: every object they name is then in
    // the files uploaded (a push into the source meanwhile adds files, never removes them,
    // short of a repack, which git does not run under a reader it cannot see).
    let updates = ref_updates(&repo)?;

    let source = LocalStorage::new(common.join("objects"));
    let objects = bucket.at("objects");
    // Loose objects go as one pack of their own: in a bucket each loose object would cost a
    // request per lookup (a HEAD for each object not found in a pack).
    let (loose, names): (Vec<_>, Vec<_>) = bucket::list_object_files(&source)?
        .into_iter()
        .partition(|(group, _)| *group == bucket::LOOSE_GROUP);
    let mut total = 0;
    for (_, name) in &names {
        total += source.open(name)?.len();
    }
    let bar = bucket::bytes_bar(total, "Uploading objects");
    let (files, bytes) = bucket::copy_groups(&source, &objects, &names, args.jobs, &bar)?;
    bar.finish_and_clear();
    let loose_packed = pack_loose(&repo, &loose, Arc::new(objects.clone()))?;

    let top = LocalStorage::new(&common);
    let mut config = match std::fs::read(common.join("config")) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("{}/config", common.display())),
    };
    if !config.is_empty() && !config.ends_with(b"\n") {
        config.push(b'\n');
    }
    config.extend_from_slice(CONFIG_MARKER.as_bytes());
    put_small(&bucket, "config", &config)?;
    if top.exists("shallow") {
        put_small(&bucket, "shallow", &top.open("shallow")?.read_all()?)?;
    }
    put_small(&bucket, "HEAD", REFTABLE_HEAD)?;
    put_small(&bucket, "refs/heads", REFTABLE_REFS_HEADS)?;

    let stack = Stack::new(reftable);
    stack
        .apply(&updates)
        .with_context(|| format!("writing the refs of {}", args.url))?;
    println!(
        "imported {} into {}: {files} files ({bytes} bytes), {} loose objects as one pack, \
         {} refs",
        args.dir.display(),
        args.url,
        loose_packed,
        updates.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the loose objects `loose` (their names under `objects/`) of `repo` as one pack into
/// `objects` (the bucket's), each whole, in id order; returns how many. The pack, its `.rev`
/// and its `.idx` are put in that order, as any pack packd writes.
fn pack_loose(
    repo: &Repository,
    loose: &[(u8, String)],
    objects: Arc<dyn Storage>,
) -> Result<usize> {
    let mut ids: Vec<packd_odb::ObjectId> = loose
        .iter()
        .filter_map(|(_, name)| packd_odb::ObjectId::from_hex(&name.replace('/', "")))
        .collect();
    ids.sort();
    if ids.is_empty() {
        return Ok(0);
    }
    let count = u32::try_from(ids.len()).context("more than 2^32 loose objects")?;
    let level = ["pack.compression", "core.compression"]
        .iter()
        .find_map(|k| repo.config().get(k).and_then(packd_odb::config::parse_int))
        .unwrap_or(-1);
    let mut writer = packd_maint::pack_file::PackFileWriter::new(
        objects,
        repo.objects().hash_kind(),
        count,
        packd_maint::pack_file::compression_level(i64::from(level)),
    )?;
    for id in &ids {
        let object = repo
            .objects()
            .read(id)?
            .with_context(|| format!("loose object {id} vanished while importing"))?;
        writer.whole(*id, object.kind, &object.data)?;
    }
    writer.finish()?;
    Ok(ids.len())
}

/// Writes the small blob `name` whatever it holds now: before `tables.list` exists no reader
/// takes the prefix for a repository, so a run after a failed one may overwrite what that left.
fn put_small(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<()> {
    let current = storage.read_versioned(name)?.map(|(_, v)| v);
    storage.replace(name, current.as_ref(), bytes)?;
    Ok(())
}

/// Every ref of `repo` (loose and packed, symbolic ones as symbolic refs) and its `HEAD`, as
/// updates that create them, tags with the object they peel to as reftable records them.
fn ref_updates(repo: &Repository) -> Result<Vec<RefUpdate>> {
    let refs = repo.refs();
    let mut updates = Vec::new();
    let head = match refs.symref_target("HEAD")? {
        Some(target) => Some(RefValue::Symref(target)),
        None => refs
            .resolve_full("HEAD")?
            .map(|id| RefValue::Object(*id.as_bytes())),
    };
    if let Some(value) = head {
        updates.push(create("HEAD", value));
    }
    for r in refs.list_refs("refs/", &[])? {
        let value = if let Some(target) = r.symref_target {
            RefValue::Symref(target)
        } else {
            let peeled = match r.peeled {
                Peeled::Tag(p) => Some(p),
                Peeled::NotTag => None,
                Peeled::Unknown => repo.peel_to(r.id, None)?.filter(|p| *p != r.id),
            };
            match peeled {
                Some(p) => RefValue::Peeled {
                    target: *r.id.as_bytes(),
                    peeled: *p.as_bytes(),
                },
                None => RefValue::Object(*r.id.as_bytes()),
            }
        };
        updates.push(create(&r.name, value));
    }
    Ok(updates)
}

/// An update creating `name` with `value`.
fn create(name: &str, value: RefValue) -> RefUpdate {
    RefUpdate {
        name: name.to_string(),
        expected: Expected::Absent,
        new: value,
        reflog: None,
    }
}
