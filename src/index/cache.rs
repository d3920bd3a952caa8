//! The persistent summary cache under `<git-common-dir>/agent/index/`, keyed by blob id and
//! language, shared by every run on the repository.
//!
//! Each indexing pass that parses something writes one new *pack*: the encoded summaries, then
//! a table of `(blob id, language, offset, length)`, then a footer. A pack is written to a
//! temporary file in the same directory and renamed into place, so readers only ever see
//! complete packs and concurrent writers never touch each other's files (a blob written twice
//! is harmless). Small packs are merged once there are many of them; a pack that disappears
//! under a reader is simply a cache miss.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;

use gix::ObjectId;

use super::error::{Result, io_err};
use super::summary::{FORMAT_VERSION, FileSummary};

const MAGIC: &[u8; 4] = b"GAIX";
const FOOTER: usize = 8 + 4 + 4 + 4;
/// Packs smaller than this are merged together once there are [`MERGE_AT`] of them.
const SMALL_PACK: u64 = 8 << 20;
const MERGE_AT: usize = 8;

/// Cache key: the blob and the language it was parsed as (0 for text).
pub type Key = (ObjectId, u8);

#[derive(Debug, Clone, Copy)]
struct Loc {
    pack: u32,
    offset: u64,
    len: u32,
}

/// An open view of the cache directory.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    packs: Vec<(PathBuf, File, u64)>,
    entries: HashMap<Key, Loc>,
}

/// A pack's table rows: key, offset, length.
type Table = Vec<(Key, u64, u32)>;

/// The format version in a pack's footer, if it has one.
fn pack_version(file: &File) -> Option<u32> {
    let size = file.metadata().ok()?.len();
    if size < FOOTER as u64 {
        return None;
    }
    let mut footer = [0u8; FOOTER];
    file.read_exact_at(&mut footer, size - FOOTER as u64).ok()?;
    if &footer[12..16] != MAGIC {
        return None;
    }
    Some(u32::from_le_bytes(footer[16..20].try_into().ok()?))
}

fn read_table(file: &mut File) -> Option<(Table, u64)> {
    let size = file.metadata().ok()?.len();
    if size < FOOTER as u64 {
        return None;
    }
    let mut footer = [0u8; FOOTER];
    file.read_exact_at(&mut footer, size - FOOTER as u64).ok()?;
    let table_at = u64::from_le_bytes(footer[0..8].try_into().ok()?);
    let count = u32::from_le_bytes(footer[8..12].try_into().ok()?) as usize;
    if &footer[12..16] != MAGIC
        || u32::from_le_bytes(footer[16..20].try_into().ok()?) != FORMAT_VERSION
        || table_at > size
    {
        return None;
    }
    let mut table = vec![0u8; (size - FOOTER as u64 - table_at) as usize];
    file.seek(SeekFrom::Start(table_at)).ok()?;
    file.read_exact(&mut table).ok()?;
    let mut out = Vec::with_capacity(count);
    let mut t = &table[..];
    for _ in 0..count {
        let (&n, rest) = t.split_first()?;
        let n = usize::from(n);
        if rest.len() < n + 1 + 12 {
            return None;
        }
        let oid = ObjectId::try_from(&rest[..n]).ok()?;
        let lang = rest[n];
        let offset = u64::from_le_bytes(rest[n + 1..n + 9].try_into().ok()?);
        let len = u32::from_le_bytes(rest[n + 9..n + 13].try_into().ok()?);
        if offset + u64::from(len) > table_at {
            return None;
        }
        out.push(((oid, lang), offset, len));
        t = &rest[n + 13..];
    }
    Some((out, size))
}

impl Cache {
    /// Open (creating if needed) the cache in `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io_err("creating the index cache", &dir))?;
        let mut cache = Cache {
            dir,
            packs: Vec::new(),
            entries: HashMap::new(),
        };
        let mut names: Vec<PathBuf> = std::fs::read_dir(&cache.dir)
            .map_err(io_err("listing the index cache", &cache.dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
            .collect();
        names.sort();
        for path in names {
            cache.add_pack(path);
        }
        Ok(cache)
    }

    fn add_pack(&mut self, path: PathBuf) {
        let Ok(mut file) = File::open(&path) else {
            return; // removed by a concurrent merge
        };
        if pack_version(&file).is_some_and(|v| v < FORMAT_VERSION) {
            // Written by an older format: nothing in it can be read again, so it would only
            // take space and warn on every open.
            tracing::debug!(path = %path.display(), "removing an index cache pack of an older format");
            let _ = std::fs::remove_file(&path);
            return;
        }
        let Some((table, size)) = read_table(&mut file) else {
            tracing::warn!(path = %path.display(), "ignoring an unreadable index cache pack");
            return;
        };
        let pack = self.packs.len() as u32;
        for (key, offset, len) in table {
            self.entries.insert(key, Loc { pack, offset, len });
        }
        self.packs.push((path, file, size));
    }

    /// Number of cached summaries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached summary for `key`, if any and readable.
    pub fn get(&self, key: &Key) -> Option<FileSummary> {
        let loc = self.entries.get(key)?;
        let (_, file, _) = self.packs.get(loc.pack as usize)?;
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset).ok()?;
        FileSummary::decode(&buf)
    }

    /// Start a new pack.
    pub fn writer(&self) -> Result<PackWriter> {
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .suffix(".pack")
            .tempfile_in(&self.dir)
            .map_err(io_err("creating a pack in", &self.dir))?;
        Ok(PackWriter {
            out: BufWriter::new(tmp),
            table: Vec::new(),
            offset: 0,
            dir: self.dir.clone(),
        })
    }

    /// Make a finished pack visible to this view, then merge small packs if there are many.
    pub fn adopt(&mut self, path: PathBuf) -> Result<()> {
        self.add_pack(path);
        let small: Vec<usize> = (0..self.packs.len())
            .filter(|&i| self.packs[i].2 < SMALL_PACK)
            .collect();
        if small.len() >= MERGE_AT {
            self.merge(&small)?;
        }
        Ok(())
    }

    fn merge(&mut self, packs: &[usize]) -> Result<()> {
        let mut w = self.writer()?;
        let mut buf = Vec::new();
        for (key, loc) in &self.entries {
            if !packs.contains(&(loc.pack as usize)) {
                continue;
            }
            let (_, file, _) = &self.packs[loc.pack as usize];
            buf.resize(loc.len as usize, 0);
            if file.read_exact_at(&mut buf, loc.offset).is_ok() {
                w.add_encoded(*key, &buf)?;
            }
        }
        let merged = w.finish()?;
        for &i in packs {
            // Another process may have merged it already; a missing file is fine.
            let _ = std::fs::remove_file(&self.packs[i].0);
        }
        tracing::debug!(packs = packs.len(), "merged small index cache packs");
        *self = Cache::open(self.dir.clone())?;
        if let Some(p) = merged {
            debug_assert!(p.exists());
        }
        Ok(())
    }
}

/// Writes one pack; dropped without [`PackWriter::finish`], it leaves nothing behind.
pub struct PackWriter {
    out: BufWriter<tempfile::NamedTempFile>,
    table: Table,
    offset: u64,
    dir: PathBuf,
}

impl PackWriter {
    /// Append a summary.
    pub fn add(&mut self, key: Key, summary: &FileSummary) -> Result<()> {
        let mut buf = Vec::with_capacity(1024);
        summary.encode(&mut buf);
        self.add_encoded(key, &buf)
    }

    /// Append an already encoded summary.
    pub fn add_encoded(&mut self, key: Key, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(io_err("writing a pack in", &self.dir))?;
        self.table.push((key, self.offset, bytes.len() as u32));
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Write the table and footer and rename the pack into place; `None` when it was empty.
    pub fn finish(mut self) -> Result<Option<PathBuf>> {
        if self.table.is_empty() {
            return Ok(None);
        }
        let mut table = Vec::with_capacity(self.table.len() * 34);
        for ((oid, lang), offset, len) in &self.table {
            let bytes = oid.as_bytes();
            table.push(bytes.len() as u8);
            table.extend_from_slice(bytes);
            table.push(*lang);
            table.extend_from_slice(&offset.to_le_bytes());
            table.extend_from_slice(&len.to_le_bytes());
        }
        table.extend_from_slice(&self.offset.to_le_bytes());
        table.extend_from_slice(&(self.table.len() as u32).to_le_bytes());
        table.extend_from_slice(MAGIC);
        table.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let err = io_err("writing a pack in", &self.dir);
        self.out.write_all(&table).map_err(err)?;
        let tmp = self
            .out
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(io_err("flushing a pack in", &self.dir))?;
        let path = self.dir.join(format!("{}.pack", ulid::Ulid::generate()));
        tmp.persist(&path)
            .map_err(|e| e.error)
            .map_err(io_err("renaming a pack to", &path))?;
        Ok(Some(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> Key {
        (ObjectId::from_bytes_or_panic(&[n; 20]), 2)
    }

    #[test]
    fn packs_round_trip_and_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = Cache::open(dir.path()).unwrap();
        for n in 0..MERGE_AT as u8 {
            let mut w = cache.writer().unwrap();
            let s = FileSummary {
                lines: u32::from(n),
                ..FileSummary::default()
            };
            w.add(key(n), &s).unwrap();
            let path = w.finish().unwrap().unwrap();
            cache.adopt(path).unwrap();
        }
        // The eighth small pack triggered a merge into one.
        let packs = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(packs, 1);
        let reopened = Cache::open(dir.path()).unwrap();
        assert_eq!(reopened.len(), MERGE_AT);
        assert_eq!(reopened.get(&key(3)).unwrap().lines, 3);
        assert!(reopened.get(&(key(3).0, 9)).is_none());
    }

    #[test]
    fn an_unfinished_pack_is_invisible_and_a_corrupt_one_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut w = cache.writer().unwrap();
        w.add(key(1), &FileSummary::default()).unwrap();
        drop(w);
        std::fs::write(
            dir.path().join("junk.pack"),
            b"not a pack at all, no footer",
        )
        .unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(cache.is_empty());
        assert!(dir.path().join("junk.pack").exists());
    }

    /// A pack of an older format version is removed on open (it can never be read again); a
    /// pack of the current version stays and is read.
    #[test]
    fn a_pack_of_an_older_format_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut w = cache.writer().unwrap();
        w.add(key(1), &FileSummary::default()).unwrap();
        let current = w.finish().unwrap().unwrap();
        let mut bytes = std::fs::read(&current).unwrap();
        let at = bytes.len() - 4;
        bytes[at..].copy_from_slice(&(FORMAT_VERSION - 1).to_le_bytes());
        let old = dir.path().join("old.pack");
        std::fs::write(&old, &bytes).unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert_eq!(cache.len(), 1);
        assert!(!old.exists());
        assert!(current.exists());
    }
}
