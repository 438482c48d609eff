//! Writing output files without losing data. Every file xlate writes (traces, JSON, CSV, hint
//! files) goes to a temporary file beside its destination and is renamed over it only once it
//! is complete, so an error, a Ctrl-C or a crash half-way leaves the old file (or none), never a
//! truncated one; and an output that names an input is refused before anything is opened.

use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// An output file being written under a temporary name; [`PendingFile::commit`] renames it to
/// its destination, dropping it uncommitted removes it.
#[derive(Debug)]
pub struct PendingFile {
    tmp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Creates the temporary file for `dest` (same directory, so the rename is atomic).
    pub fn create(dest: &Path) -> Result<(PendingFile, File)> {
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dest.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let file = File::create(&tmp).map_err(|e| Error::io(dest.display().to_string(), e))?;
        Ok((PendingFile { tmp, dest: dest.to_path_buf(), committed: false }, file))
    }

    /// Renames the finished file to its destination.
    pub fn commit(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| Error::io(self.dest.display().to_string(), e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` through a temporary file.
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    let (pending, mut file) = PendingFile::create(dest)?;
    std::io::Write::write_all(&mut file, bytes).map_err(|e| Error::io(dest.display().to_string(), e))?;
    drop(file);
    pending.commit()
}

/// Whether `a` and `b` name the same existing file (through links or different spellings).
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
        false
    }
    #[cfg(not(unix))]
    {
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_appears_only_when_committed() {
        let dir = std::env::temp_dir().join(format!("xlate-fsutil-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("out.json");
        std::fs::write(&dest, "old").unwrap();
        {
            let (p, mut f) = PendingFile::create(&dest).unwrap();
            std::io::Write::write_all(&mut f, b"half").unwrap();
            drop(p); // an error before commit
        }
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "old", "the old file survives");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left behind");
        write_atomic(&dest, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert!(same_file(&dest, &dir.join(".").join("out.json")));
        assert!(!same_file(&dest, &dir.join("missing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
