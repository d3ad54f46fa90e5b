//! `packd rev-list`: the objects reachable from some revisions and not from others, as
//! `git rev-list` lists them.

use anyhow::{bail, Result};
use packd_odb::{IdMap, NameMatch, ObjectId, ObjectKind, Repository};
use packd_reach::bitmap_walk::BitmapIndex;
use packd_reach::walk::{Query, Walker};
use std::io::Write;
use std::process::ExitCode;

/// Arguments of `packd rev-list`, parsed in order as git does (`--not` flips the sense of the
/// revisions after it, `^rev` excludes one).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `[--objects] [--count] [--use-bitmap-index] [--all] [--branches] [--tags] <rev>...
    /// [--not <rev>...]`
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// Runs rev-list against `repo`.
pub fn run(repo: &Repository, args: &Args) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let mut query = Query::default();
    let mut count = false;
    let mut use_bitmaps = false;
    let mut negate = false;
    let mut names: Vec<(ObjectId, String)> = Vec::new();
    // Annotated tags among the tips and what packed-refs says they peel to: the bitmap walk
    // can then skip reading them.
    let mut peeled: IdMap<ObjectId> = IdMap::default();
    let add = |query: &mut Query, id: ObjectId, exclude: bool| {
        if exclude {
            query.exclude.push(id);
        } else {
            query.include.push(id);
        }
    };
    for arg in &args.args {
        match arg.as_str() {
            "--objects" => query.objects = true,
            "--count" => count = true,
            "--use-bitmap-index" => use_bitmaps = true,
            "--not" => negate = !negate,
            "--all" | "--branches" | "--tags" => {
                let prefix = match arg.as_str() {
                    "--branches" => "refs/heads/",
                    "--tags" => "refs/tags/",
                    _ => "refs/",
                };
                for (name, id, target) in repo.refs().list_peeled(prefix)? {
                    names.push((id, short_ref_name(&name).to_string()));
                    add(&mut query, id, negate);
                    if let Some(target) = target {
                        peeled.insert(id, target);
                    }
                }
                if arg == "--all" {
                    if let Some(id) = repo.refs().resolve_full("HEAD")? {
                        add(&mut query, id, negate);
                    }
                }
            }
            flag if flag.starts_with("--") => bail!("rev-list: unsupported option {flag}"),
            rev => {
                let (exclude, rev) = match rev.strip_prefix('^') {
                    Some(r) => (!negate, r),
                    None => (negate, rev),
                };
                match repo.resolve_revision(rev)? {
                    NameMatch::Found(id) => {
                        names.push((id, rev.to_string()));
                        add(&mut query, id, exclude);
                    }
                    NameMatch::Ambiguous => bail!("ambiguous argument '{rev}'"),
                    NameMatch::Missing => bail!("bad revision '{rev}'"),
                }
            }
        }
    }
    // Git answers with the exact set difference when it uses bitmaps, and it uses them when
    // asked and a pack has one; so does packd. The bitmap cannot answer when the walk leaves its
    // pack; the plain walk then gives the same exact answer.
    tracing::debug!("arguments and refs read in {:?}", started.elapsed());
    let bitmaps = if use_bitmaps {
        // Tips of a command-line query seldom all have bitmaps: start the pack positions a
        // fill-in walk needs while the bitmap is read.
        BitmapIndex::open_warming(repo)?
    } else {
        None
    };
    query.exact = bitmaps.is_some();
    if let Some(index) = &bitmaps {
        if let Some(bits) =
            index.query_peeled(repo, &query.include, &query.exclude, query.objects, &peeled)?
        {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            if count {
                writeln!(out, "{}", bits.count_ones())?;
            } else {
                // Like git's bitmap walk, object names are not known here.
                for id in index.ids(&bits) {
                    writeln!(out, "{id}")?;
                }
            }
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let reached = Walker::new(repo).reachable(&query)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if count {
        writeln!(out, "{}", reached.len())?;
    } else {
        for r in &reached {
            match (&r.path, r.kind) {
                (_, ObjectKind::Commit) => writeln!(out, "{}", r.id)?,
                (Some(path), _) => {
                    write!(out, "{} ", r.id)?;
                    out.write_all(path)?;
                    out.write_all(b"\n")?;
                }
                (None, _) => match names.iter().find(|(id, _)| *id == r.id) {
                    Some((_, name)) => writeln!(out, "{} {name}", r.id)?,
                    None => writeln!(out, "{}", r.id)?,
                },
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A ref's name as git prints it for a tip given by `--all`, `--branches` or `--tags`: without
/// `refs/heads/`, `refs/tags/` or `refs/remotes/`, else without `refs/`.
fn short_ref_name(name: &str) -> &str {
    ["refs/heads/", "refs/tags/", "refs/remotes/", "refs/"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name)
}
