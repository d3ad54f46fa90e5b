//! Deleting refs from `packed-refs`: the file rewritten without them (a ref's peeled `^` line
//! goes with it), staged in a temp file, fsynced and renamed over `packed-refs` while
//! `packed-refs.lock` is held, so that readers see the old file or the new, never a part.
//!
//! ```text
//! # pack-refs with: peeled fully-peeled sorted
//! <hex> refs/heads/main
//! <hex> refs/tags/v1
//! ^<peeled hex>
//! ```

use std::io::Write;
use std::path::Path;

/// Rewrites `<common>/packed-refs` without `names`; `temp` is where the new file is staged.
/// Returns whether anything changed. The caller holds `packed-refs.lock` and the refs' locks.
pub(crate) fn remove_refs(common: &Path, names: &[&str], temp: &Path) -> std::io::Result<bool> {
    let path = common.join("packed-refs");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let (out, changed) = without(&text, names);
    if !changed {
        return Ok(false);
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)?;
    let written = file
        .write_all(out.as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(temp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written.map(|()| true)
}

/// `text` without the lines of `names`; whether any was there.
fn without(text: &str, names: &[&str]) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    let mut changed = false;
    for line in text.lines() {
        if line.starts_with('^') && skipping {
            continue;
        }
        skipping = !line.starts_with('#')
            && line
                .split_once(' ')
                .is_some_and(|(_, refname)| names.contains(&refname));
        if skipping {
            changed = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    (out, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_ref_takes_its_peeled_line_with_it() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{a} refs/heads/main\n{a} refs/tags/v1\n^{b}\n{b} refs/tags/v2\n"
        );
        let (out, changed) = without(&text, &["refs/tags/v1"]);
        assert!(changed);
        assert_eq!(
            out,
            format!("# pack-refs with: peeled fully-peeled sorted \n{a} refs/heads/main\n{b} refs/tags/v2\n")
        );
        assert!(!without(&text, &["refs/heads/other"]).1);
    }
}
