//! Directory/file conflicts: `refs/heads/a` and `refs/heads/a/b` cannot both exist (one would
//! be a file and a directory at once in loose form; git refuses them in packed form too). A
//! new ref is checked as git's `refs_verify_refname_available` checks it, with git's words:
//!
//! ```text
//! each leading directory D of the name:  a ref D exists         'D' exists; cannot create 'N'
//!                                        D is in the same batch cannot process 'N' and 'D' at the same time
//! refs under N/:                         the first existing one 'N/x' exists; cannot create 'N'
//!                                        the first of the batch cannot process 'N' and 'N/x' at the same time
//! ```
//! Existing refs are loose files (with valid ref names: `*.lock` files are not refs) and
//! packed-refs lines, whichever is first by name.

use crate::loose;
use packd_odb::packed_refs::PackedRefs;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::Path;

/// Why `name` cannot be created next to the refs under `common` (`packed` its parsed
/// packed-refs) and the refs of its batch, `batch` (it may hold `name` itself): git's text after
/// `cannot lock ref 'name': `.
pub(crate) fn check(
    common: &Path,
    name: &str,
    packed: Option<&PackedRefs>,
    batch: &BTreeSet<&str>,
) -> Result<(), String> {
    for (i, _) in name.match_indices('/') {
        let dir = &name[..i];
        let exists =
            loose::is_loose_file(common, dir) || packed.is_some_and(|p| p.find(dir).is_some());
        if exists {
            return Err(format!("'{dir}' exists; cannot create '{name}'"));
        }
        if batch.contains(dir) {
            return Err(format!(
                "cannot process '{name}' and '{dir}' at the same time"
            ));
        }
    }
    let prefix = format!("{name}/");
    let loose_below = first_loose_ref(common, name);
    let packed_below =
        packed.and_then(|p| p.entries(&prefix, &[]).into_iter().map(|(n, _, _)| n).min());
    let below = match (loose_below, packed_below) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(below) = below {
        return Err(format!("'{below}' exists; cannot create '{name}'"));
    }
    let below_in_batch =
        batch.range::<str, _>((Bound::Excluded(prefix.as_str()), Bound::Unbounded));
    if let Some(extra) = below_in_batch.take(1).find(|e| e.starts_with(&prefix)) {
        return Err(format!(
            "cannot process '{name}' and '{extra}' at the same time"
        ));
    }
    Ok(())
}

/// The first loose ref (by name) under the directory `<common>/<name>/`, if it is one.
fn first_loose_ref(common: &Path, name: &str) -> Option<String> {
    let dir = common.join(name);
    if !dir.is_dir() {
        return None;
    }
    let mut entries: Vec<(String, bool)> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            Some((n, e.file_type().ok()?.is_dir()))
        })
        .collect();
    entries.sort();
    for (entry, is_dir) in entries {
        let child = format!("{name}/{entry}");
        if is_dir {
            if let Some(found) = first_loose_ref(common, &child) {
                return Some(found);
            }
        } else if packd_odb::refs::check_ref_format(&child).is_ok() {
            return Some(child);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_named_as_git_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let a = "a".repeat(40);
        std::fs::create_dir_all(d.join("refs/heads/b/c")).unwrap();
        std::fs::write(d.join("refs/heads/main"), format!("{a}\n")).unwrap();
        std::fs::write(d.join("refs/heads/b/c/d"), format!("{a}\n")).unwrap();
        std::fs::write(d.join("refs/heads/b/c.lock"), "").unwrap();
        let packed = PackedRefs::from_text(format!(
            "# pack-refs with: peeled fully-peeled sorted \n{a} refs/tags/v1\n"
        ));
        let p = Some(&packed);
        let none = BTreeSet::new();
        let batch = |names: &[&'static str]| names.iter().copied().collect::<BTreeSet<&str>>();
        assert_eq!(
            check(d, "refs/heads/main/sub", p, &none).unwrap_err(),
            "'refs/heads/main' exists; cannot create 'refs/heads/main/sub'"
        );
        assert_eq!(
            check(d, "refs/heads/b", p, &none).unwrap_err(),
            "'refs/heads/b/c/d' exists; cannot create 'refs/heads/b'"
        );
        assert_eq!(
            check(d, "refs/tags/v1/x", p, &none).unwrap_err(),
            "'refs/tags/v1' exists; cannot create 'refs/tags/v1/x'"
        );
        assert_eq!(
            check(d, "refs/tags", p, &none).unwrap_err(),
            "'refs/tags/v1' exists; cannot create 'refs/tags'"
        );
        assert_eq!(
            check(
                d,
                "refs/heads/e",
                p,
                &batch(&["refs/heads/e", "refs/heads/e/f"])
            )
            .unwrap_err(),
            "cannot process 'refs/heads/e' and 'refs/heads/e/f' at the same time"
        );
        assert_eq!(
            check(
                d,
                "refs/heads/e/f",
                p,
                &batch(&["refs/heads/e", "refs/heads/e/f"])
            )
            .unwrap_err(),
            "cannot process 'refs/heads/e/f' and 'refs/heads/e' at the same time"
        );
        check(
            d,
            "refs/heads/new",
            p,
            &batch(&["refs/heads/new", "refs/heads/new-", "refs/heads/newer"]),
        )
        .unwrap();
        // Only lock files below: no ref there.
        std::fs::remove_file(d.join("refs/heads/b/c/d")).unwrap();
        check(d, "refs/heads/b", p, &none).unwrap();
    }
}
