//! `packd rev-list`: the objects reachable from some revisions and not from others, as
//! `git rev-list` lists them.

use anyhow::{bail, Result};
use packd_odb::revision_arg::{RevisionArgError, RevisionTip};
use packd_odb::{IdMap, ObjectId, ObjectKind, Repository};
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
    // Whether any revision (or --all, --branches, --tags) was given: git shows its usage
    // otherwise.
    let mut given = false;
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
                given = true;
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
            flag if flag.starts_with('-') && flag.len() > 1 => return Ok(usage()),
            rev => {
                given = true;
                for tip in resolve_arg(repo, rev)? {
                    if !tip.exclude && !negate {
                        names.push((tip.id, tip.name));
                    }
                    add(&mut query, tip.id, tip.exclude != negate);
                }
            }
        }
    }
    // (With --objects git lists nothing rather than show its usage.)
    if !given && !query.objects {
        return Ok(usage());
    }
    // Git answers with the exact set difference when it uses bitmaps, and it uses them when
    // asked and a pack has one (but see below); so does packd. When the bitmap cannot answer
    // (a pack that is not closed), the plain walk gives the same exact answer.
    tracing::debug!("arguments and refs read in {:?}", started.elapsed());
    let bitmaps = if use_bitmaps {
        // Tips of a command-line query seldom all have bitmaps: start the pack positions a
        // fill-in walk needs while the bitmap is read.
        BitmapIndex::open_warming(repo)?
    } else {
        None
    };
    // Git gives up its bitmaps when there are negative tips and none is in the bitmapped pack,
    // neither a tip nor a tag on its way nor what it peels to (`prepare_bitmap_walk`): its plain
    // walk then answers, which may list objects the negative tips reach. So does packd, to give
    // git's answer.
    let bitmaps = match bitmaps {
        Some(index) if !query.exclude.is_empty() => {
            let walker = Walker::new(repo);
            let mut any = false;
            for id in &query.exclude {
                let mut chain = Vec::new();
                let (peeled, _) = walker.peel(*id, &mut chain)?;
                chain.push(*id);
                chain.push(peeled);
                if chain.iter().any(|c| index.contains(c)) {
                    any = true;
                    break;
                }
            }
            any.then_some(index)
        }
        other => other,
    };
    query.exact = bitmaps.is_some();
    if let Some(index) = &bitmaps {
        // (Nothing cancels a command-line walk.)
        let never = std::sync::atomic::AtomicBool::new(false);
        // Objects outside the bitmapped pack (pushed since the last repack) are walked until
        // the walk enters it, as git's extended index does.
        if let Some(mut answer) =
            index.difference_with_outside(repo, &query.include, &query.exclude, &peeled, &never)?
        {
            let mut bits = answer.wanted;
            if !query.objects {
                bits.and_assign(index.type_bitmap(ObjectKind::Commit));
                answer
                    .outside
                    .retain(|(_, kind)| *kind == ObjectKind::Commit);
            }
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            if count {
                writeln!(out, "{}", bits.count_ones() + answer.outside.len() as u64)?;
            } else {
                // Like git's bitmap walk, object names are not known here.
                for id in index.ids(&bits) {
                    writeln!(out, "{id}")?;
                }
                for (id, _) in &answer.outside {
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

/// What packd rev-list takes, shown (as git shows its own) when no revision is given or an
/// option is unknown.
const USAGE: &str = "usage: packd rev-list [<options>] <commit>... [--not <commit>...]

  limiting output:
    --all
    --branches
    --tags
    --not
  formatting output:
    --objects
    --count
    --use-bitmap-index
";

/// Prints [`USAGE`] on stderr; the exit code git gives a usage error (129).
fn usage() -> ExitCode {
    let _ = std::io::stderr().write_all(USAGE.as_bytes());
    ExitCode::from(129)
}

/// The tips of one revision argument, or git rev-list's error for one that names nothing.
fn resolve_arg(repo: &Repository, rev: &str) -> Result<Vec<RevisionTip>> {
    match repo.revision_arg(rev)? {
        Ok(tips) => Ok(tips),
        Err(_) if rev.starts_with('^') => bail!("bad revision '{rev}'"),
        Err(RevisionArgError::NotCommits(sides)) => {
            crate::not_commits(&sides);
            bail!("Invalid symmetric difference expression {rev}")
        }
        Err(_) => bail!(
            "ambiguous argument '{rev}': unknown revision or path not in the working tree.\n\
             Use '--' to separate paths from revisions, like this:\n\
             'git <command> [<revision>...] -- [<file>...]'"
        ),
    }
}

/// A ref's name as git prints it for a tip given by `--all`, `--branches` or `--tags`: without
/// `refs/heads/`, `refs/tags/` or `refs/remotes/`, else without `refs/`.
fn short_ref_name(name: &str) -> &str {
    ["refs/heads/", "refs/tags/", "refs/remotes/", "refs/"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name)
}
