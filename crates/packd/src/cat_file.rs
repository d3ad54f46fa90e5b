//! `packd cat-file`: git's cat-file, byte for byte, with batches decoded on all cores.
//!
//! In batch mode, names are read on a separate thread; whatever has arrived is answered as one
//! batch in parallel and written in input order. A script that sends one name and waits gets its
//! answer at once (a batch of one); a pipe full of names keeps every core busy.

use anyhow::{bail, Result};
use bytes::Bytes;
use packd_odb::parse::tree_entries;
use packd_odb::{IdOrder, NameMatch, ObjectId, ObjectKind, Repository};
use rayon::prelude::*;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::mpsc;

/// The most names answered as one parallel batch.
const MAX_BATCH: usize = 1024;

/// Arguments of `packd cat-file`, as git spells them.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the object's type.
    #[arg(short = 't', group = "mode")]
    show_type: bool,
    /// Print the object's size.
    #[arg(short = 's', group = "mode")]
    show_size: bool,
    /// Exit 0 if the object exists and 1 if not, printing nothing.
    #[arg(short = 'e', group = "mode")]
    exists: bool,
    /// Pretty-print the object (trees as `ls-tree` lists them).
    #[arg(short = 'p', group = "mode")]
    pretty: bool,
    /// For each name on stdin, print a line in FORMAT and the object's content.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "", group = "mode")]
    batch: Option<String>,
    /// For each name on stdin, print a line in FORMAT.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "", group = "mode")]
    batch_check: Option<String>,
    /// With --batch or --batch-check: every object of the repository instead of stdin.
    #[arg(long)]
    batch_all_objects: bool,
    /// With --batch-all-objects: in storage order (cheapest) instead of sorted by id.
    #[arg(long)]
    unordered: bool,
    /// Accepted for compatibility: output is always buffered within a batch.
    #[arg(long)]
    buffer: bool,
    /// `<type> <object>` or `<object>`.
    #[arg(value_name = "OBJECT")]
    args: Vec<String>,
}

/// Runs cat-file against `repo`.
pub fn run(repo: &Repository, args: &Args) -> Result<ExitCode> {
    if let Some(format) = args.batch.as_deref().or(args.batch_check.as_deref()) {
        if !args.args.is_empty() {
            return Ok(usage(Some("batch modes take no arguments")));
        }
        let format = Format::parse(format)?;
        let with_content = args.batch.is_some();
        return if args.batch_all_objects {
            all_objects(repo, &format, with_content, args.unordered)
        } else {
            batch_stdin(repo, &format, with_content)
        };
    }
    if args.batch_all_objects {
        return Ok(usage(Some(
            "--batch-all-objects needs --batch or --batch-check",
        )));
    }
    match args.args.as_slice() {
        [name] if args.show_type || args.show_size || args.exists || args.pretty => {
            single(repo, args, name)
        }
        [kind, name] if !(args.show_type || args.show_size || args.exists || args.pretty) => {
            typed(repo, kind, name)
        }
        _ => Ok(usage(None)),
    }
}

/// A usage error as git reports one: `fatal: <why>` (when there is more to say than the
/// usage), a blank line and the usage on stderr; exit code 129.
fn usage(why: Option<&str>) -> ExitCode {
    let mut text = String::new();
    if let Some(why) = why {
        text.push_str(&format!("fatal: {why}\n\n"));
    }
    text.push_str(
        "usage: packd cat-file (-t | -s | -e | -p) <object> | <type> <object>\n   \
         or: packd cat-file (--batch | --batch-check)[=<format>] [--batch-all-objects] [--unordered]\n",
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
    ExitCode::from(129)
}

fn resolve_or_die(repo: &Repository, name: &str) -> Result<ObjectId> {
    match repo.resolve_revision(name)? {
        NameMatch::Found(id) => Ok(id),
        NameMatch::Ambiguous => {
            bail!("short object ID {name} is ambiguous\nfatal: Not a valid object name {name}")
        }
        NameMatch::Missing => bail!("Not a valid object name {name}"),
    }
}

/// `-t`, `-s`, `-e`, `-p` on one object.
fn single(repo: &Repository, args: &Args, name: &str) -> Result<ExitCode> {
    let id = resolve_or_die(repo, name)?;
    let objects = repo.objects();
    let Some(loc) = objects.locate(&id)? else {
        if args.exists {
            return Ok(ExitCode::from(1));
        }
        bail!("git cat-file: could not get object info");
    };
    let mut out = std::io::stdout().lock();
    if args.exists {
        // Like git, -e also checks that the object can be read.
        objects.header_at(&id, &loc)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.show_type || args.show_size {
        let header = objects.header_at(&id, &loc)?;
        if args.show_type {
            writeln!(out, "{}", header.kind.name())?;
        } else {
            writeln!(out, "{}", header.size)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let object = objects.read_at(&id, &loc)?;
    if object.kind == ObjectKind::Tree {
        out.write_all(&format_tree(&object.data, &id)?)?;
    } else {
        out.write_all(&object.data)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `cat-file <type> <object>`: the raw content, when the object is of that type.
fn typed(repo: &Repository, kind: &str, name: &str) -> Result<ExitCode> {
    let Some(want) = ObjectKind::from_name(kind.as_bytes()) else {
        bail!("invalid object type \"{kind}\"");
    };
    let id = resolve_or_die(repo, name)?;
    // Like git, follow tags to their target and a commit to its tree to reach the asked type.
    let Some(peeled) = repo.peel_to(id, Some(want))? else {
        bail!("git cat-file {name}: bad file");
    };
    let Some(object) = repo.objects().read(&peeled)? else {
        bail!("git cat-file {name}: bad file");
    };
    if object.kind != want {
        bail!("git cat-file {name}: bad file");
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&object.data)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A tree as `git ls-tree` prints it: `<mode> <type> <id>\t<name>`.
fn format_tree(data: &[u8], id: &ObjectId) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 2);
    for entry in tree_entries(id, data) {
        let (mode, name, entry) = entry?;
        // ls-tree prints canonical modes, as git normalises them when reading a tree.
        let (mode, kind) = match mode & 0o170000 {
            0o100000 if mode & 0o111 != 0 => (0o100755, "blob"),
            0o100000 => (0o100644, "blob"),
            0o120000 => (0o120000, "blob"),
            0o040000 => (0o040000, "tree"),
            _ => (0o160000, "commit"),
        };
        write!(out, "{mode:06o} {kind} {entry}\t")?;
        quote_path(name, &mut out);
        out.push(b'\n');
    }
    Ok(out)
}

/// Quotes a path as git does with core.quotePath (its default): C-style, in double quotes, when
/// it has control characters, a quote, a backslash or non-ASCII bytes.
fn quote_path(name: &[u8], out: &mut Vec<u8>) {
    let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f;
    if !name.iter().any(|&b| needs(b)) {
        out.extend_from_slice(name);
        return;
    }
    out.push(b'"');
    for &b in name {
        match b {
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if needs(b) => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// One element of a batch format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Atom {
    Literal(String),
    Name,
    Type,
    Size,
    DiskSize,
    DeltaBase,
    Rest,
}

/// A parsed `--batch`/`--batch-check` format.
#[derive(Debug, Clone)]
struct Format {
    atoms: Vec<Atom>,
}

impl Format {
    fn parse(spec: &str) -> Result<Format> {
        let spec = if spec.is_empty() {
            "%(objectname) %(objecttype) %(objectsize)"
        } else {
            spec
        };
        let mut atoms = Vec::new();
        let mut literal = String::new();
        let mut rest = spec;
        while let Some(pos) = rest.find('%') {
            literal.push_str(&rest[..pos]);
            rest = &rest[pos..];
            if let Some(after) = rest.strip_prefix("%%") {
                literal.push('%');
                rest = after;
                continue;
            }
            let Some(end) = rest.strip_prefix("%(").and_then(|r| r.find(')')) else {
                literal.push('%');
                rest = &rest[1..];
                continue;
            };
            let name = &rest[2..2 + end];
            let atom = match name {
                "objectname" => Atom::Name,
                "objecttype" => Atom::Type,
                "objectsize" => Atom::Size,
                "objectsize:disk" => Atom::DiskSize,
                "deltabase" => Atom::DeltaBase,
                "rest" => Atom::Rest,
                _ => bail!("unknown format element: %({name})"),
            };
            if !literal.is_empty() {
                atoms.push(Atom::Literal(std::mem::take(&mut literal)));
            }
            atoms.push(atom);
            rest = &rest[2 + end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            atoms.push(Atom::Literal(literal));
        }
        Ok(Format { atoms })
    }

    fn splits_rest(&self) -> bool {
        self.atoms.contains(&Atom::Rest)
    }

    fn needs_header(&self) -> bool {
        self.atoms
            .iter()
            .any(|a| matches!(a, Atom::Type | Atom::Size))
    }
}

/// The answer to one name.
enum Answer {
    /// A line with no content after it (a missing object, or --batch-check).
    Line(Vec<u8>),
    /// A line, then the content and a newline (--batch).
    Content(Vec<u8>, Bytes),
}

/// Answers one request line. Names are bytes: git passes them through unchanged, so a name that
/// is not UTF-8 is simply missing and printed back as it came.
fn answer(repo: &Repository, format: &Format, with_content: bool, line: &[u8]) -> Result<Answer> {
    let (name, rest) = if format.splits_rest() {
        split_rest(line)
    } else {
        (line, &b""[..])
    };
    let not_found = |what: &[u8]| {
        let mut out = name.to_vec();
        out.extend_from_slice(what);
        Ok(Answer::Line(out))
    };
    let Ok(name_str) = std::str::from_utf8(name) else {
        return not_found(b" missing\n");
    };
    let id = match repo.resolve_revision(name_str)? {
        NameMatch::Found(id) => id,
        NameMatch::Ambiguous => return not_found(b" ambiguous\n"),
        NameMatch::Missing => return not_found(b" missing\n"),
    };
    answer_id(repo, format, with_content, &id, rest, name)
}

/// Splits a request line into the name (up to the first white space) and the rest, as git does
/// when the format uses `%(rest)`.
fn split_rest(line: &[u8]) -> (&[u8], &[u8]) {
    let skip_space = |s: &[u8]| {
        let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
        n
    };
    let line = &line[skip_space(line)..];
    match line.iter().position(|b| b.is_ascii_whitespace()) {
        Some(i) => {
            let after = &line[i..];
            (&line[..i], &after[skip_space(after)..])
        }
        None => (line, &b""[..]),
    }
}

/// Answers for a resolved id.
fn answer_id(
    repo: &Repository,
    format: &Format,
    with_content: bool,
    id: &ObjectId,
    rest: &[u8],
    name: &[u8],
) -> Result<Answer> {
    let objects = repo.objects();
    let Some(loc) = objects.locate(id)? else {
        let mut line = name.to_vec();
        line.extend_from_slice(b" missing\n");
        return Ok(Answer::Line(line));
    };
    let (kind, size, data) = if with_content {
        let object = objects.read_at(id, &loc)?;
        (object.kind, object.data.len() as u64, Some(object.data))
    } else if format.needs_header() {
        let header = objects.header_at(id, &loc)?;
        (header.kind, header.size, None)
    } else {
        (ObjectKind::Blob, 0, None)
    };
    let mut line = Vec::with_capacity(64);
    for atom in &format.atoms {
        match atom {
            Atom::Literal(s) => line.extend_from_slice(s.as_bytes()),
            Atom::Name => id.extend_hex(&mut line),
            Atom::Type => line.extend_from_slice(kind.name().as_bytes()),
            Atom::Size => line.extend_from_slice(size.to_string().as_bytes()),
            Atom::DiskSize => {
                line.extend_from_slice(objects.disk_size(id, &loc)?.to_string().as_bytes())
            }
            Atom::DeltaBase => {
                let base = objects.delta_base(&loc)?.unwrap_or(ObjectId::NULL);
                line.extend_from_slice(base.to_hex().as_bytes());
            }
            Atom::Rest => line.extend_from_slice(rest),
        }
    }
    line.push(b'\n');
    Ok(match data {
        Some(data) => Answer::Content(line, data),
        None => Answer::Line(line),
    })
}

fn write_answer(out: &mut impl Write, answer: &Answer) -> std::io::Result<()> {
    match answer {
        Answer::Line(line) => out.write_all(line),
        Answer::Content(line, data) => {
            out.write_all(line)?;
            out.write_all(data)?;
            out.write_all(b"\n")
        }
    }
}

/// Writes a batch's answers in order, stopping at the first error after writing what came
/// before it.
fn write_batch(out: &mut impl Write, answers: Vec<Result<Answer>>) -> Result<()> {
    for answer in answers {
        match answer {
            Ok(a) => write_answer(out, &a)?,
            Err(e) => {
                out.flush()?;
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Answers the names read on stdin, in order, a batch at a time.
fn batch_stdin(repo: &Repository, format: &Format, with_content: bool) -> Result<ExitCode> {
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(MAX_BATCH * 8);
    std::thread::spawn(move || {
        let stdin = std::io::stdin().lock();
        for line in stdin.split(b'\n') {
            let Ok(mut line) = line else { break };
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    while let Ok(first) = rx.recv() {
        let mut lines = vec![first];
        while lines.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(l) => lines.push(l),
                Err(_) => break,
            }
        }
        let answers: Vec<Result<Answer>> = lines
            .par_iter()
            .map(|l| answer(repo, format, with_content, l))
            .collect();
        write_batch(&mut out, answers)?;
        out.flush()?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Answers for every object in the repository.
fn all_objects(
    repo: &Repository,
    format: &Format,
    with_content: bool,
    unordered: bool,
) -> Result<ExitCode> {
    let order = if unordered {
        IdOrder::Storage
    } else {
        IdOrder::Sorted
    };
    let ids = repo.objects().all_ids(order)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    for chunk in ids.chunks(MAX_BATCH) {
        let answers: Vec<Result<Answer>> = chunk
            .par_iter()
            .map(|id| answer_id(repo, format, with_content, id, b"", b""))
            .collect();
        write_batch(&mut out, answers)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
