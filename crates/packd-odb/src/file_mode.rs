//! The modes of the files packd writes into `objects/pack`, as git gives them.
//!
//! git creates packs, their indexes (`.idx`), reverse indexes (`.rev`) and bitmaps
//! (`.bitmap`, a multi-pack-index's too) with mode 0444 less the umask (`odb_mkstemp`): a
//! finished pack is never written again, and a read-only mode keeps a stray writer (an editor,
//! a script) from damaging it. The `multi-pack-index` file itself goes through a lock file and
//! keeps 0666 less the umask. packd writes its files with the default mode (0666 less the
//! umask), then takes the write bits away once they are whole: the result is git's mode for
//! every umask, without reading the process's umask (which cannot be read without changing it).

use std::path::Path;

/// Takes the write bits from `path`, a file packd created with the default mode and has
/// finished writing: 0666 less the umask becomes 0444 less the umask, git's mode for packs,
/// indexes, reverse indexes and bitmaps.
#[cfg(unix)]
pub fn make_read_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o444))
}

/// Marks `path` read-only (where modes are not unix's).
#[cfg(not(unix))]
pub fn make_read_only(path: &Path) -> std::io::Result<()> {
    let mut perms = std::fs::metadata(path)?.permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(path, perms)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn takes_the_write_bits_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        for (before, after) in [
            (0o644, 0o444),
            (0o600, 0o400),
            (0o640, 0o440),
            (0o444, 0o444),
        ] {
            let path = dir.path().join(format!("f{before:o}"));
            std::fs::write(&path, b"x").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(before)).unwrap();
            make_read_only(&path).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, after, "from {before:o}");
        }
    }
}
