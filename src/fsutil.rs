//! Writing files so that a crash leaves the old content or the new, never a torn one.

use std::io::Write as _;
use std::path::Path;

/// How far a write must get before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Atomic for any reader and against `kill -9`; durable against power loss only once a
    /// later sync has run. For the many saves inside one step.
    Replace,
    /// Also fsynced, file and directory: the new content survives a power loss.
    Durable,
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename,
/// creating the directory if needed.
pub(crate) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if durability == Durability::Durable {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if durability == Durability::Durable
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/file.json");
        write_atomic(&p, b"one", Durability::Durable).unwrap();
        write_atomic(&p, b"two", Durability::Replace).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("file.json")]);
    }
}
