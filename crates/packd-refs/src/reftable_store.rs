//! Refs read from a reftable stack (`packd_reftable`): the [`packd_odb::refs::RefStore`] of a
//! repository in a bucket, so that advertisements, wants and revisions read its refs as they
//! read files.
//!
//! Each question takes a snapshot of the stack: `tables.list` read again (a conditional GET
//! on a bucket), the tables it names from the stack's cache of opened tables. A ref pushed
//! through another server is then seen by the next question asked after its list was swapped.
//! What the records say maps onto what `packed-refs` says: a peeled record is an annotated tag
//! and what it peels to, an object record is not a tag (packd writes every tag peeled, as git's
//! reftable writer does), a symbolic ref is followed within the same snapshot.

use packd_odb::packed_refs::Peeled;
use packd_odb::refs::{check_ref_format, ListedRef, RefStore, Resolution};
use packd_odb::{Error, ObjectId, Result};
use packd_reftable::{RefValue, ReftableError, Snapshot, Stack};

/// How deep a chain of symbolic refs is followed (git's limit).
const MAX_SYMREF_DEPTH: usize = 5;

/// The refs of a reftable stack.
#[derive(Debug)]
pub struct ReftableRefs {
    stack: Stack,
}

impl ReftableRefs {
    /// Reads refs from `stack` (a repository's `reftable/`).
    pub fn new(stack: Stack) -> ReftableRefs {
        ReftableRefs { stack }
    }

    /// The stack read.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.stack.snapshot().map_err(odb_error)
    }
}

/// A reftable error as the object database's: storage failures stay storage failures.
fn odb_error(e: ReftableError) -> Error {
    match e {
        ReftableError::Storage(s) => Error::Storage(s),
        ReftableError::Corrupt {
            table,
            offset,
            what,
        } => Error::Corrupt {
            file: table,
            offset,
            what,
        },
        other => Error::Unsupported(other.to_string()),
    }
}

/// What `name` resolves to in `snap`, following symbolic refs.
fn resolve_in(snap: &Snapshot, name: &str) -> Result<Option<Resolution>> {
    let mut name = name.to_string();
    for depth in 0..MAX_SYMREF_DEPTH {
        if check_ref_format(&name).is_err() {
            return Ok(None);
        }
        let target = (depth > 0).then(|| name.clone());
        let value = snap.read_ref(&name).map_err(odb_error)?.map(|r| r.value);
        let id = match value {
            Some(RefValue::Symref(next)) => {
                name = next;
                continue;
            }
            Some(RefValue::Object(id)) | Some(RefValue::Peeled { target: id, .. }) => {
                Some(ObjectId::from_bytes(&id).ok_or_else(|| bad_id(&name))?)
            }
            Some(RefValue::Deletion) | None => None,
        };
        return Ok(Some(Resolution { id, target }));
    }
    Err(Error::BadName(format!(
        "symbolic ref {name} nests too deep"
    )))
}

fn bad_id(name: &str) -> Error {
    Error::BadName(format!(
        "{name}: the reftable holds an id of the wrong length"
    ))
}

/// Whether `name` is `p` or below it, for each `p` of `skip`.
fn skipped(name: &str, skip: &[&str]) -> bool {
    skip.iter()
        .any(|p| name == *p || (name.starts_with(p) && name.as_bytes().get(p.len()) == Some(&b'/')))
}

impl RefStore for ReftableRefs {
    fn resolve_symbolic(&self, name: &str) -> Result<Option<Resolution>> {
        resolve_in(&self.snapshot()?, name)
    }

    fn list_refs(&self, prefix: &str, skip: &[&str]) -> Result<Vec<ListedRef>> {
        let snap = self.snapshot()?;
        let mut out = Vec::new();
        for record in snap.refs() {
            let record = record.map_err(odb_error)?;
            if !record.name.starts_with(prefix)
                || !record.name.starts_with("refs/")
                || skipped(&record.name, skip)
            {
                continue;
            }
            let id_of =
                |bytes: &[u8; 20]| ObjectId::from_bytes(bytes).ok_or_else(|| bad_id(&record.name));
            let listed = match &record.value {
                RefValue::Object(id) => Some(ListedRef {
                    name: record.name.clone(),
                    id: id_of(id)?,
                    peeled: Peeled::NotTag,
                    symref_target: None,
                }),
                RefValue::Peeled { target, peeled } => Some(ListedRef {
                    name: record.name.clone(),
                    id: id_of(target)?,
                    peeled: Peeled::Tag(id_of(peeled)?),
                    symref_target: None,
                }),
                // A symbolic ref is listed with what it resolves to, as a loose one is;
                // one that resolves to nothing is left out, as git leaves it out.
                RefValue::Symref(_) => resolve_in(&snap, &record.name)?.and_then(|r| {
                    Some(ListedRef {
                        name: record.name.clone(),
                        id: r.id.filter(|id| *id != ObjectId::NULL)?,
                        peeled: Peeled::Unknown,
                        symref_target: r.target,
                    })
                }),
                RefValue::Deletion => None,
            };
            out.extend(listed);
        }
        Ok(out)
    }
}
