//! Applying a push's ref updates to a reftable stack (a repository in a bucket) with the rules
//! and the words of the files backend ([`crate::apply`]): each update compares its old value
//! and refuses a non-commit under `refs/heads/` and a directory/file conflict; atomic pushes
//! go as one table, others one table per ref, in the push's order (git 2.39's receive-pack
//! runs one transaction per ref).
//!
//! ```text
//! check against a snapshot    old value (is at X but expected Y, reference already exists,
//!                             unable to resolve reference), non-commit, refs/a vs refs/a/b
//! Stack::apply                a table of the updates, tables.list swapped by compare-and-swap;
//!                             a lost race is retried while every ref still holds what it
//!                             expected, so pushes to other refs never fail this one
//! ```
//!
//! The snapshot's check gives git's messages; the stack's own comparison, made again against
//! the list it swaps, is what decides, so a push that raced another to the same ref fails
//! with the same words, never overwriting it. An annotated tag is written with what it peels
//! to (`peeled`), as [`crate::ReftableRefs`] lists it.

use crate::{RefResult, RefUpdate, Refusal, TransactionOptions, ATOMIC_FAILED, UPDATE_FAILED};
use packd_odb::ObjectId;
use packd_reftable::{
    Expected, RefUpdate as TableUpdate, RefValue, ReftableError, Snapshot, Stack,
};
use std::collections::HashMap;

/// Applies `updates` to `stack`: all or none when `atomic`, else each on its own; one result
/// per update. `peeled` gives, for each new value that is an annotated tag, what it peels to.
pub fn apply_to_stack(
    stack: &Stack,
    updates: &[RefUpdate],
    atomic: bool,
    options: &TransactionOptions<'_>,
    peeled: &HashMap<ObjectId, ObjectId>,
) -> Vec<RefResult> {
    if updates.is_empty() {
        return Vec::new();
    }
    if atomic {
        return apply_together(stack, updates, options, peeled, ATOMIC_FAILED);
    }
    updates
        .iter()
        .map(|u| {
            apply_together(
                stack,
                std::slice::from_ref(u),
                options,
                peeled,
                UPDATE_FAILED,
            )
            .pop()
            .unwrap_or(Ok(()))
        })
        .collect()
}

/// One table of all of `updates`, or none of them, each refused with `reason`.
fn apply_together(
    stack: &Stack,
    updates: &[RefUpdate],
    options: &TransactionOptions<'_>,
    peeled: &HashMap<ObjectId, ObjectId>,
    reason: &str,
) -> Vec<RefResult> {
    let all_fail = |failed: usize, error: String| -> Vec<RefResult> {
        (0..updates.len())
            .map(|i| {
                Err(match i == failed {
                    true => Refusal::with_error(reason, error.clone()),
                    false => Refusal::reason(reason),
                })
            })
            .collect()
    };
    let snapshot = match stack.snapshot() {
        Ok(s) => s,
        Err(e) => return all_fail(0, format!("cannot read the refs: {e}")),
    };
    for (i, u) in updates.iter().enumerate() {
        if let Err(error) = check(&snapshot, updates, u, options) {
            return all_fail(i, error);
        }
    }
    let table: Vec<TableUpdate> = updates.iter().map(|u| table_update(u, peeled)).collect();
    match stack.apply(&table) {
        Ok(_) => vec![Ok(()); updates.len()],
        Err(ReftableError::OldValueMismatch { refname, .. }) => {
            // Another push moved the ref after the snapshot: the words of the check, made
            // against what the stack holds now.
            let i = updates.iter().position(|u| u.name == refname).unwrap_or(0);
            let error = stack
                .snapshot()
                .ok()
                .and_then(|now| check(&now, updates, &updates[i], options).err())
                .unwrap_or_else(|| format!("cannot lock ref '{refname}': it changed meanwhile"));
            all_fail(i, error)
        }
        Err(e) => all_fail(0, format!("cannot update the refs: {e}")),
    }
}

/// The stack's update for `u`.
fn table_update(u: &RefUpdate, peeled: &HashMap<ObjectId, ObjectId>) -> TableUpdate {
    let expected = match (u.old, u.new) {
        (Some(old), _) => Expected::Value(RefValue::Object(*old.as_bytes())),
        (None, Some(_)) => Expected::Absent,
        (None, None) => Expected::Any,
    };
    let new = match u.new {
        None => RefValue::Deletion,
        Some(id) => match peeled.get(&id) {
            Some(p) => RefValue::Peeled {
                target: *id.as_bytes(),
                peeled: *p.as_bytes(),
            },
            None => RefValue::Object(*id.as_bytes()),
        },
    };
    TableUpdate {
        name: u.name.clone(),
        expected,
        new,
        reflog: None,
    }
}

/// What `snapshot` says of `u`, as git's error line when it is refused.
fn check(
    snapshot: &Snapshot,
    updates: &[RefUpdate],
    u: &RefUpdate,
    options: &TransactionOptions<'_>,
) -> Result<(), String> {
    let name = &u.name;
    let cannot = |why: String| format!("cannot lock ref '{name}': {why}");
    let current = snapshot
        .read_ref(name)
        .map_err(|e| cannot(e.to_string()))?
        .and_then(|r| match r.value {
            RefValue::Object(id) | RefValue::Peeled { target: id, .. } => Some(id),
            RefValue::Symref(_) | RefValue::Deletion => None,
        })
        .and_then(|id| ObjectId::from_bytes(&id));
    crate::transaction::check_values(u, current, options)?;
    if u.new.is_some() && current.is_none() {
        conflict(snapshot, updates, name).map_err(cannot)?;
    }
    Ok(())
}

/// Whether a new ref `name` meets an existing one as a directory meets a file: `refs/a`
/// beside `refs/a/b` (in the stack, or created by the same push), git's words if so.
fn conflict(snapshot: &Snapshot, updates: &[RefUpdate], name: &str) -> Result<(), String> {
    let deleted = |other: &str| updates.iter().any(|u| u.name == other && u.new.is_none());
    let mut parent = name;
    while let Some((dir, _)) = parent.rsplit_once('/') {
        if dir == "refs" {
            break;
        }
        let exists = snapshot.read_ref(dir).ok().flatten().is_some() && !deleted(dir);
        if exists {
            return Err(format!("'{dir}' exists; cannot create '{name}'"));
        }
        parent = dir;
    }
    let below = format!("{name}/");
    for record in snapshot.refs() {
        let Ok(record) = record else { continue };
        if record.name.starts_with(&below) && !deleted(&record.name) {
            return Err(format!("'{}' exists; cannot create '{name}'", record.name));
        }
    }
    for other in updates {
        if other.new.is_some() && other.name.starts_with(&below) {
            return Err(format!(
                "cannot process '{name}' and '{}' at the same time",
                other.name
            ));
        }
    }
    Ok(())
}
