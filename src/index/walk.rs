//! Which files are indexed: the blobs of a commit's tree or the files of a work tree, minus
//! vendored, generated-by-name and binary-by-name paths. Content-based skips (binary, minified,
//! generated headers) are decided by `lang::skip_reason`.

use std::path::Path;

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::error::{Result, git_err, io_err};

/// Directory names whose contents are someone else's code or build output.
const VENDORED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".tox",
    ".venv",
    "__pycache__",
    "bower_components",
    "jspm_packages",
    "node_modules",
    "site-packages",
    "third-party",
    "third_party",
    "thirdparty",
    "vendor",
    "vendored",
    "venv",
];

/// Extensions of files that are never text worth indexing.
const BINARY_EXTS: &[&str] = &[
    "7z", "a", "avi", "bin", "bmp", "class", "dll", "dylib", "eot", "exe", "gif", "gz", "ico",
    "jar", "jpeg", "jpg", "lib", "mo", "mov", "mp3", "mp4", "o", "obj", "otf", "pdf", "pickle",
    "pkl", "png", "pyc", "pyo", "so", "svgz", "tar", "tgz", "ttf", "wasm", "wav", "webm", "webp",
    "whl", "woff", "woff2", "xz", "zip", "zst", "npy", "npz", "nc", "h5", "parquet", "sqlite",
    "db",
];

/// File names that are generated or lock files.
fn generated_name(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "package-lock.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "Cargo.lock",
        "poetry.lock",
        "Gemfile.lock",
        "go.sum",
        "composer.lock",
        "Pipfile.lock",
        "uv.lock",
    ];
    EXACT.contains(&name)
        || versioned_asset(name)
        || name.ends_with(".min.js")
        || name.ends_with(".min.css")
        || name.ends_with(".js.map")
        || name.ends_with(".css.map")
        || name.ends_with(".pb.go")
        || name.ends_with("_pb2.py")
        || name.ends_with("_pb2_grpc.py")
        || name.contains(".generated.")
}

/// A copied-in library asset such as `jquery-3.5.1.js`: a script or style sheet whose name
/// carries a version number is someone else's release, not the project's code.
fn versioned_asset(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    let stem = stem.trim_end_matches(".min");
    matches!(ext, "js" | "css")
        && stem.split(['-', '_']).skip(1).any(|part| {
            part.starts_with(|c: char| c.is_ascii_digit())
                && part.contains('.')
                && part.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
}

/// Whether a repository-relative path is left out of the index by its name alone.
pub fn skip_path(path: &str) -> bool {
    let mut segments = path.split('/').peekable();
    while let Some(seg) = segments.next() {
        if segments.peek().is_none() {
            let ext = seg.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
            return generated_name(seg) || ext.is_some_and(|e| BINARY_EXTS.contains(&e.as_str()));
        }
        if VENDORED_DIRS.contains(&seg) {
            return true;
        }
    }
    false
}

/// A file to index: its path and blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// The blob id of its content.
    pub blob: ObjectId,
}

/// A change between two trees: `blob` is `None` when the path was removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Repository-relative path.
    pub path: String,
    /// The new blob, or `None` for a deletion.
    pub blob: Option<ObjectId>,
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// The tree of a commit.
pub fn commit_tree(repo: &gix::Repository, commit: ObjectId) -> Result<ObjectId> {
    let c = repo
        .find_commit(commit)
        .map_err(git_err(|| format!("reading commit {commit}")))?;
    c.tree_id()
        .map(|id| id.detach())
        .map_err(git_err(|| format!("reading the tree of {commit}")))
}

fn decode_tree(
    repo: &gix::Repository,
    id: ObjectId,
) -> Result<Vec<(String, gix::object::tree::EntryMode, ObjectId)>> {
    let tree = repo
        .find_tree(id)
        .map_err(git_err(|| format!("reading tree {id}")))?;
    let decoded = tree
        .decode()
        .map_err(git_err(|| format!("decoding tree {id}")))?;
    Ok(decoded
        .entries
        .iter()
        .map(|e| {
            (
                e.filename.to_str_lossy().into_owned(),
                e.mode,
                e.oid.to_owned(),
            )
        })
        .collect())
}

/// Every indexable blob of `tree`, sorted by path.
pub fn tree_entries(repo: &gix::Repository, tree: ObjectId) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), tree)];
    while let Some((prefix, id)) = stack.pop() {
        for (name, mode, oid) in decode_tree(repo, id)? {
            let path = join(&prefix, &name);
            if mode.is_tree() {
                if !VENDORED_DIRS.contains(&name.as_str()) {
                    stack.push((path, oid));
                }
            } else if mode.is_blob() && !skip_path(&path) {
                out.push(Entry { path, blob: oid });
            }
        }
    }
    out.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The indexable changes from tree `old` to tree `new`, descending only into subtrees whose
/// ids differ, so a one-file change costs a handful of tree reads however large the tree.
pub fn diff_trees(repo: &gix::Repository, old: ObjectId, new: ObjectId) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    diff_into(repo, String::new(), Some(old), Some(new), &mut out)?;
    Ok(out)
}

fn diff_into(
    repo: &gix::Repository,
    prefix: String,
    old: Option<ObjectId>,
    new: Option<ObjectId>,
    out: &mut Vec<Change>,
) -> Result<()> {
    if old == new {
        return Ok(());
    }
    let old_entries = match old {
        Some(id) => decode_tree(repo, id)?,
        None => Vec::new(),
    };
    let new_entries = match new {
        Some(id) => decode_tree(repo, id)?,
        None => Vec::new(),
    };
    let find = |v: &[(String, gix::object::tree::EntryMode, ObjectId)], name: &str| {
        v.iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, m, o)| (*m, *o))
    };
    let mut names: Vec<&String> = old_entries
        .iter()
        .chain(new_entries.iter())
        .map(|(n, _, _)| n)
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let path = join(&prefix, name);
        let o = find(&old_entries, name);
        let n = find(&new_entries, name);
        if o == n {
            continue;
        }
        let tree_of = |e: Option<(gix::object::tree::EntryMode, ObjectId)>| {
            e.filter(|(m, _)| m.is_tree()).map(|(_, id)| id)
        };
        let blob_of = |e: Option<(gix::object::tree::EntryMode, ObjectId)>| {
            e.filter(|(m, _)| m.is_blob()).map(|(_, id)| id)
        };
        let (ot, nt) = (tree_of(o), tree_of(n));
        if (ot.is_some() || nt.is_some()) && !VENDORED_DIRS.contains(&name.as_str()) {
            diff_into(repo, path.clone(), ot, nt, out)?;
        }
        let (ob, nb) = (blob_of(o), blob_of(n));
        if (ob.is_some() || nb.is_some()) && ob != nb && !skip_path(&path) {
            out.push(Change { path, blob: nb });
        }
    }
    Ok(())
}

/// Every indexable file of a work tree (ignore rules respected), with the blob id its content
/// would have, sorted by path.
pub fn worktree_entries(root: &Path) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .parents(false)
        .filter_entry(|e| !(e.depth() > 0 && e.file_name() == ".git"))
        .build();
    for item in walker {
        let Ok(item) = item else { continue };
        if !item.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(rel) = item.path().strip_prefix(root) else {
            continue;
        };
        let path = rel.to_string_lossy().replace('\\', "/");
        if skip_path(&path) {
            continue;
        }
        let data = std::fs::read(item.path()).map_err(io_err("reading", item.path()))?;
        let blob = blob_id(&data)?;
        out.push(Entry { path, blob });
    }
    out.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The git blob id (SHA-1) of `data`.
pub fn blob_id(data: &[u8]) -> Result<ObjectId> {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, data)
        .map_err(git_err(|| "hashing a work-tree file".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_vendored_generated_and_binary_names() {
        assert!(skip_path("node_modules/x/index.js"));
        assert!(skip_path("a/vendor/lib.go"));
        assert!(skip_path("static/app.min.js"));
        assert!(skip_path("img/logo.PNG"));
        assert!(skip_path("api/v1/types.pb.go"));
        assert!(skip_path("sphinx/themes/basic/static/jquery-3.5.1.js"));
        assert!(skip_path("static/underscore-1.13.1.css"));
        assert!(!skip_path("src/app-v2.js"));
        assert!(!skip_path("src/vendors.rs"));
        assert!(!skip_path("src/lib.rs"));
        assert!(!skip_path("README"));
    }
}
