//! The project index against real repositories: cache invalidation by blob id, ranking
//! behaviour, work-tree walking and the `map`/`locate` commands.

use std::path::Path;
use std::process::Command;

use super::common::git;
use git_agent::index::{CacheLocation, Index, IndexOptions, RankOptions, TokenCounter};
use git_agent::workspace::Repo;

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn commit_all(dir: &Path, msg: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", msg]);
}

/// A small Python project: a parser, a renderer that uses it, their tests and docs.
fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q", "-b", "main"]);
    write(
        dir,
        "pkg/dates.py",
        "\"\"\"Parsing of calendar dates.\"\"\"\n\ndef parse_date(text):\n    \"\"\"Parse an ISO date.\"\"\"\n    year, month, day = text.split('-')\n    return (int(year), int(month), int(day))\n",
    );
    write(
        dir,
        "pkg/render.py",
        "from .dates import parse_date\n\nclass Calendar:\n    def draw(self, text):\n        return str(parse_date(text))\n",
    );
    write(dir, "pkg/__init__.py", "");
    write(
        dir,
        "tests/test_dates.py",
        "from pkg.dates import parse_date\n\ndef test_parse_date():\n    assert parse_date('2024-01-02') == (2024, 1, 2)\n\ndef test_parse_date_week():\n    parse_date('2024-W01-1')\n",
    );
    write(
        dir,
        "docs/usage.md",
        "# Usage\n\nCall the calendar to draw dates.\n",
    );
    write(
        dir,
        "src/lib.rs",
        "pub fn checksum(data: &[u8]) -> u32 { data.len() as u32 }\n",
    );
    commit_all(dir, "initial");
    tmp
}

fn opts(cache: &Path) -> IndexOptions {
    IndexOptions {
        threads: 2,
        cache: CacheLocation::Dir(cache.to_path_buf()),
    }
}

/// A changed blob is re-parsed; unchanged ones come from the cache, across commits and
/// across processes (a fresh `Index` reading the same cache directory).
#[test]
fn cache_reparses_only_changed_blobs() {
    let tmp = project();
    let dir = tmp.path();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(dir).unwrap();

    let first = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    assert_eq!(first.stats().files, 6);
    assert_eq!(first.stats().parsed, 6);
    assert_eq!(first.stats().cached, 0);

    let again = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    assert_eq!((again.stats().parsed, again.stats().cached), (0, 6));
    assert_eq!(
        again.file("pkg/dates.py").unwrap().summary,
        first.file("pkg/dates.py").unwrap().summary
    );

    write(
        dir,
        "pkg/dates.py",
        "def parse_date(text):\n    return text\n\ndef parse_week(text):\n    return text\n",
    );
    commit_all(dir, "weeks");
    let second = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    assert_eq!((second.stats().parsed, second.stats().cached), (1, 5));
    let names: Vec<&str> = second
        .file("pkg/dates.py")
        .unwrap()
        .summary
        .defs
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["parse_date", "parse_week"]);

    // Updating the first index in place reads only the changed subtree and finds the new
    // blob in the cache the second build filled.
    let mut updated = first;
    let stats = updated.update_to_commit(&repo, "HEAD").unwrap();
    assert_eq!((stats.parsed, stats.cached), (0, 1));
    assert_eq!(updated.file("pkg/dates.py").unwrap().summary.defs.len(), 2);

    // Without a cache, everything is parsed again.
    let uncached = Index::at_commit(
        &repo,
        "HEAD",
        &IndexOptions {
            threads: 1,
            cache: CacheLocation::Off,
        },
    )
    .unwrap();
    assert_eq!(uncached.stats().parsed, 6);
}

/// Deleting and adding files through `update_to_commit` keeps the file list exact.
#[test]
fn update_to_commit_tracks_deletions_and_additions() {
    let tmp = project();
    let dir = tmp.path();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(dir).unwrap();
    let mut index = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    std::fs::remove_file(dir.join("docs/usage.md")).unwrap();
    write(dir, "pkg/deep/week.py", "class Week:\n    pass\n");
    commit_all(dir, "move");
    let stats = index.update_to_commit(&repo, "HEAD").unwrap();
    assert_eq!(stats.parsed, 1);
    let paths: Vec<&str> = index.files().iter().map(|f| f.path.as_str()).collect();
    assert!(!paths.contains(&"docs/usage.md"));
    assert!(paths.contains(&"pkg/deep/week.py"));
    let rebuilt = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    let rebuilt_paths: Vec<&str> = rebuilt.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, rebuilt_paths);
}

/// Two builds racing on one cache directory both succeed and leave a cache that serves a
/// third build entirely.
#[test]
fn concurrent_builds_share_the_cache_safely() {
    let tmp = project();
    let cache = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (dir, cache) = (dir.clone(), cache.path().to_path_buf());
            std::thread::spawn(move || {
                let repo = Repo::open(&dir).unwrap();
                Index::at_commit(&repo, "HEAD", &opts(&cache))
                    .unwrap()
                    .stats()
                    .files
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 6);
    }
    let repo = Repo::open(&dir).unwrap();
    let third = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    assert_eq!((third.stats().parsed, third.stats().cached), (0, 6));
    assert!(
        std::fs::read_dir(cache.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".tmp"))
    );
}

#[test]
fn ranking_prefers_the_defining_source_over_tests_and_docs() {
    let tmp = project();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(tmp.path()).unwrap();
    let index = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();

    let top = index.locate("parse_date fails on ISO week dates like 2024-W01-1", 3);
    assert_eq!(top[0].path, "pkg/dates.py", "{top:?}");
    assert!(top.iter().all(|f| f.path != "docs/usage.md"));

    // A stack frame names the file and function where it broke.
    let trace = "Traceback (most recent call last):\n  File \"/venv/lib/site-packages/pkg/render.py\", line 5, in draw\nValueError: not enough values to unpack";
    assert_eq!(index.locate(trace, 1)[0].path, "pkg/render.py");

    // A dotted module path.
    assert_eq!(
        index.locate("problem in pkg.render.Calendar", 1)[0].path,
        "pkg/render.py"
    );

    // Tests rank lower unless the query is about tests.
    let plain = index.rank("parse_date week", &RankOptions::default());
    let pos =
        |r: &[git_agent::index::RankedFile], p: &str| r.iter().position(|f| f.path == p).unwrap();
    assert!(pos(&plain, "pkg/dates.py") < pos(&plain, "tests/test_dates.py"));
    let about_tests = index.rank(
        "add a regression test: test_parse_date_week in tests/test_dates.py is flaky",
        &RankOptions::default(),
    );
    assert_eq!(about_tests[0].path, "tests/test_dates.py");
    // A bare test file name is the reporter's own test, not a query about ours.
    let bare = index.rank(
        "parse_date fails when I run my test_dates.py",
        &RankOptions::default(),
    );
    assert!(pos(&bare, "pkg/dates.py") < pos(&bare, "tests/test_dates.py"));

    // Scores are sorted, best first.
    assert!(plain.windows(2).all(|w| w[0].score >= w[1].score));
}

/// The work tree walk respects ignore rules and skips vendored and binary files; an edit is
/// picked up by `update_paths` with one parse.
#[test]
fn worktree_index_respects_ignores_and_updates_paths() {
    let tmp = project();
    let dir = tmp.path();
    write(dir, ".gitignore", "build/\n");
    write(dir, "build/out.py", "def generated_thing():\n    pass\n");
    write(dir, "node_modules/lib/index.js", "function vendored() {}\n");
    std::fs::write(dir.join("pkg/blob.dat"), [0u8, 1, 2, 3, 0, 5]).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(dir).unwrap();
    let mut index = Index::at_worktree(&repo, &opts(cache.path())).unwrap();
    let paths: Vec<&str> = index.files().iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"pkg/dates.py"));
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("build/") || p.starts_with("node_modules/")),
        "{paths:?}"
    );
    let blob = index.file("pkg/blob.dat").unwrap();
    assert_eq!(blob.summary.skip, Some(git_agent::index::Skip::Binary));

    write(
        dir,
        "pkg/render.py",
        "class Renderer:\n    def paint(self):\n        pass\n",
    );
    let stats = index
        .update_paths(&repo, &["pkg/render.py", "pkg/dates.py"])
        .unwrap();
    assert_eq!((stats.parsed, stats.cached), (1, 1));
    assert_eq!(
        index.file("pkg/render.py").unwrap().summary.defs[0].name,
        "Renderer"
    );
}

#[test]
fn repo_map_fits_the_token_budget() {
    let tmp = project();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(tmp.path()).unwrap();
    let index = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    let counter = TokenCounter::new().unwrap();
    let full = index.repo_map(
        &counter,
        Some("calendar draw"),
        10_000,
        &RankOptions::default(),
    );
    assert!(full.starts_with("pkg/render.py\n"), "{full}");
    assert!(
        full.contains("  class Calendar:\n    def draw(self, text):\n"),
        "{full}"
    );
    assert!(full.contains("def parse_date(text):"));
    for budget in [10, 40] {
        let small = index.repo_map(&counter, None, budget, &RankOptions::default());
        assert!(counter.count(&small) <= budget);
        assert!(small.len() < full.len());
    }
}

fn agent(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_git-agent"))
        .args(args)
        .current_dir(dir)
        .env("XDG_CONFIG_HOME", dir.join("no-such-config"))
        .output()
        .unwrap()
}

#[test]
fn locate_json_has_the_documented_shape() {
    let tmp = project();
    let out = agent(
        tmp.path(),
        &[
            "locate",
            "Calendar.draw crashes in parse_date",
            "--json",
            "--top",
            "3",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["files"]);
    let files = obj["files"].as_array().unwrap();
    assert!(!files.is_empty() && files.len() <= 3);
    let mut last = f64::INFINITY;
    for f in files {
        let f = f.as_object().unwrap();
        let mut keys: Vec<&String> = f.keys().collect();
        keys.sort();
        assert_eq!(keys, ["path", "score"]);
        let score = f["score"].as_f64().unwrap();
        assert!(score <= last);
        last = score;
    }
    assert!(files.iter().any(|f| f["path"] == "pkg/render.py"));
    // The cache lives in the repository's common dir.
    assert!(tmp.path().join(".git/agent/index").is_dir());

    let out = agent(
        tmp.path(),
        &["map", "--tokens", "60", "--query", "parse_date"],
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("pkg/dates.py\n"), "{text}");
    assert!(TokenCounter::new().unwrap().count(&text) <= 60);
}

/// A committed repository holding `files`, indexed at HEAD.
fn indexed(files: &[(&str, String)]) -> (tempfile::TempDir, tempfile::TempDir, Index) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q", "-b", "main"]);
    for (p, text) in files {
        write(dir, p, text);
    }
    commit_all(dir, "fixture");
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(dir).unwrap();
    let index = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    (tmp, cache, index)
}

fn first(index: &Index, query: &str, o: &RankOptions) -> String {
    index.rank(query, o)[0].path.clone()
}

/// The title (first line) of an issue weighs more than its body.
#[test]
fn ranking_title_terms_weigh_more() {
    let (_t, _c, index) = indexed(&[
        ("src/alpha.py", "def run():\n    return gadget\n".into()),
        ("src/beta.py", "def run():\n    return widget\n".into()),
    ]);
    let query = "widget is slow\n\nIt happens after the gadget and the gadget again.";
    assert_eq!(first(&index, query, &RankOptions::default()), "src/beta.py");
    let flat = RankOptions {
        title_weight: 1.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &flat), "src/alpha.py");
}

/// Words inside a fenced block (logs, package lists) weigh less than prose.
#[test]
fn ranking_fenced_output_weighs_less_than_prose() {
    let (_t, _c, index) = indexed(&[
        ("src/alpha.py", "def run():\n    return widget\n".into()),
        ("src/beta.py", "def run():\n    return gadget\n".into()),
    ]);
    let query = "Report\n\n```\nwidget\n```\nThe gadget broke.";
    assert_eq!(first(&index, query, &RankOptions::default()), "src/beta.py");
    let flat = RankOptions {
        code_block_weight: 1.0,
        ..RankOptions::default()
    };
    // Equal weights tie, and ties go by path.
    assert_eq!(first(&index, query, &flat), "src/alpha.py");
    // A <details> fold (environment dumps) counts as output too.
    let folded = "Report\n\n<details>\nwidget\n</details>\nThe gadget broke.";
    assert_eq!(
        first(&index, folded, &RankOptions::default()),
        "src/beta.py"
    );
    assert_eq!(first(&index, folded, &flat), "src/alpha.py");
}

/// A file whose own name is a query term is boosted, more so when the name is rare.
#[test]
fn ranking_file_named_by_a_query_term_is_boosted() {
    let (_t, _c, index) = indexed(&[
        (
            "pkg/builders/html.py",
            "# linkcheck linkcheck linkcheck linkcheck linkcheck linkcheck linkcheck\ndef build():\n    pass\n".into(),
        ),
        (
            "pkg/builders/linkcheck.py",
            "def build():\n    return follow(url)\n".into(),
        ),
    ]);
    let query = "linkcheck hangs forever";
    let off = RankOptions {
        stem_mention: 0.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &off), "pkg/builders/html.py");
    let on = RankOptions {
        stem_mention: 3.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &on), "pkg/builders/linkcheck.py");
}

/// Two adjacent query words also match the identifier that writes them as one.
#[test]
fn ranking_joins_adjacent_words() {
    let (_t, _c, index) = indexed(&[
        ("src/alpha.py", "link = None\n".into()),
        ("src/beta.py", "linkcheck = None\n".into()),
        ("src/gamma.py", "link = 1\n".into()),
    ]);
    let query = "the link check is slow";
    let off = RankOptions {
        join_weight: 0.0,
        ..RankOptions::default()
    };
    assert!(
        index
            .rank(query, &off)
            .iter()
            .all(|f| f.path != "src/beta.py")
    );
    let on = RankOptions {
        join_weight: 1.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &on), "src/beta.py");
}

/// A term found in most files of a large enough project finds nothing.
#[test]
fn ranking_drops_terms_in_most_files() {
    let mut files: Vec<(String, String)> = (0..25)
        .map(|i| (format!("src/m{i}.py"), format!("frame = {i}\n")))
        .collect();
    files.push(("src/zebra.py".into(), "stripes = 2\n".into()));
    let refs: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let (_t, _c, index) = indexed(&refs);
    assert!(index.rank("frame", &RankOptions::default()).is_empty());
    let keep = RankOptions {
        max_df: 1.0,
        ..RankOptions::default()
    };
    assert_eq!(index.rank("frame", &keep).len(), 25);
}

/// A docs file the query names by path is not damped for being docs.
#[test]
fn ranking_named_docs_file_is_not_damped() {
    let tmp = project();
    let cache = tempfile::tempdir().unwrap();
    let repo = Repo::open(tmp.path()).unwrap();
    let index = Index::at_commit(&repo, "HEAD", &opts(cache.path())).unwrap();
    let top = index.locate("typo in docs/usage.md about the calendar and dates", 1);
    assert_eq!(top[0].path, "docs/usage.md", "{top:?}");
    // A bare file name is usually the reporter's own file: still damped.
    let top = index.locate("typo in usage.md about the calendar and dates", 1);
    assert_ne!(top[0].path, "docs/usage.md", "{top:?}");
}

/// A file whose one definition holds every query term outranks a shorter file that has them
/// spread over different definitions, once the best-definition score counts.
#[test]
fn ranking_best_definition_span_decides() {
    let mut long = String::from("def draw():\n    return legend + marker\n");
    for i in 0..40 {
        long.push_str(&format!(
            "\ndef f{i}():\n    return alpha{i} + beta{i} + gamma{i} + delta{i} + omega{i}\n"
        ));
    }
    let (_t, _c, index) = indexed(&[
        ("src/alpha.py", long),
        (
            "src/beta.py",
            "def a():\n    return legend\n\ndef b():\n    return marker\n".into(),
        ),
    ]);
    let query = "legend marker";
    let off = RankOptions {
        def_lexical: 0.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &off), "src/beta.py");
    let on = RankOptions {
        def_lexical: 3.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &on), "src/alpha.py");
}

/// The package names of a `show_versions()` dump do not pull in the module that prints them.
#[test]
fn ranking_version_dump_does_not_pull_in_the_version_printer() {
    let (_t, _c, index) = indexed(&[
        (
            "pkg/util/print_versions.py",
            "def show_versions():\n    for m in ['netcdf4', 'pydap', 'h5netcdf', 'cfgrib', 'zarr', 'cftime']:\n        print(m)\n".into(),
        ),
        (
            "pkg/core/dataset.py",
            "def swap_dims(self, dims):\n    return self.rename(dims)\n".into(),
        ),
    ]);
    let query = "swap_dims modifies the original\n\nCalling swap_dims changes it.\n\n<details>\n\
                 INSTALLED VERSIONS\n------------------\ncommit: None\npython: 3.8.13\n\
                 netCDF4: 1.5.8\npydap: None\nh5netcdf: None\ncfgrib: None\nzarr: 2.13.3\n\
                 cftime: 1.6.1\n</details>\n";
    let ranked = index.rank(query, &RankOptions::default());
    assert_eq!(ranked[0].path, "pkg/core/dataset.py");
    assert!(
        ranked
            .iter()
            .all(|f| f.path != "pkg/util/print_versions.py"),
        "{ranked:?}"
    );
    let keep = RankOptions {
        strip_env_dumps: false,
        ..RankOptions::default()
    };
    assert!(
        index
            .rank(query, &keep)
            .iter()
            .any(|f| f.path == "pkg/util/print_versions.py")
    );
}

/// Code in a language the project barely uses (a Python project's bundled JavaScript) ranks
/// below the main language unless the query names that language.
#[test]
fn ranking_damps_minority_language_code() {
    let mut files: Vec<(String, String)> = (0..8)
        .map(|i| {
            (
                format!("pkg/m{i}.py"),
                format!("def f{i}():\n    return {i}\n"),
            )
        })
        .collect();
    files.push((
        "pkg/themes/static/queries.js".into(),
        "function mediaQuery(width) { return width; }\n// media query width media query\n".into(),
    ));
    files.push((
        "pkg/writers/html.py".into(),
        "def visit_media(node):\n    return node.query\n".into(),
    ));
    let refs: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let (_t, _c, index) = indexed(&refs);
    let query = "media query is wrong";
    let off = RankOptions {
        minority_lang_factor: 1.0,
        ..RankOptions::default()
    };
    assert_eq!(first(&index, query, &off), "pkg/themes/static/queries.js");
    assert_eq!(
        first(&index, query, &RankOptions::default()),
        "pkg/writers/html.py"
    );
    assert_eq!(
        first(
            &index,
            "javascript media query is wrong",
            &RankOptions::default()
        ),
        "pkg/themes/static/queries.js"
    );
}

/// A relevant file next to a strong match (the rest of a change that spans a package) moves
/// up past an equally relevant file elsewhere.
#[test]
fn ranking_sibling_of_a_strong_match_moves_up() {
    let (_t, _c, index) = indexed(&[
        (
            "pkg/config/manager.py",
            "def parse_option_regex(value):\n    return compile_option(value)\n".into(),
        ),
        (
            "pkg/config/argument.py",
            "def transform(value):\n    return regex(value)\n".into(),
        ),
        (
            "pkg/checks/alpha.py",
            "def transform(value):\n    return regex(value)\n".into(),
        ),
    ]);
    let query = "option regex fails to parse";
    let off = RankOptions {
        sibling: 0.0,
        ..RankOptions::default()
    };
    let rank_of = |o: &RankOptions, p: &str| {
        index
            .rank(query, o)
            .iter()
            .position(|f| f.path == p)
            .unwrap()
    };
    assert!(rank_of(&off, "pkg/checks/alpha.py") < rank_of(&off, "pkg/config/argument.py"));
    let on = RankOptions::default();
    assert!(on.sibling > 0.0);
    assert!(rank_of(&on, "pkg/config/argument.py") < rank_of(&on, "pkg/checks/alpha.py"));
}
