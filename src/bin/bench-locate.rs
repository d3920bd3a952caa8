//! bench-locate: file-level localization on SWE-bench issues, against a plain BM25 baseline
//! over the `.py` files computed in the same run.
//!
//! Each line of the data file is `{"instance_id","repo","base_commit","problem_statement",
//! "gold_files"}`; repositories are bare git directories under `--mirrors` named
//! `owner+name/repo`. A hit at k needs every gold file in the top k. The index is built once per
//! instance to fill the cache (cold), then the measured pass builds it again from the cache and
//! ranks (warm), as a run would.
//!
//! The data has no dev/test split of its own, so the bench makes one: an instance is in the
//! `tune` half when the FNV-1a hash of its id is even, else in the `held-out` half. Weights are
//! tuned on the tune half only; both halves and the total are reported.
//!
//! `cargo run --release --features bench --bin bench-locate -- [--data F] [--mirrors DIR] [--cache DIR]
//! [--opts JSON] [--no-baseline] [--misses] [--sweep FILE]`
//!
//! `--sweep FILE` reads one `RankOptions` JSON object a line and prints Acc@k of each on both
//! halves (tuning aid; no baseline, no timing).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use git_agent::index::{CacheLocation, Index, IndexOptions, RankOptions, Ranker, skip_path, text};
use git_agent::workspace::Repo;
use gix::bstr::ByteSlice as _;

#[derive(serde::Deserialize)]
struct Instance {
    instance_id: String,
    repo: String,
    base_commit: String,
    problem_statement: String,
    gold_files: Vec<String>,
}

const KS: [usize; 4] = [1, 3, 5, 10];

/// The half an instance belongs to: `true` for the tune half (even FNV-1a hash of its id).
fn tune_half(id: &str) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(2)
}

#[derive(Default)]
struct Tally {
    hits: [usize; 4],
    n: usize,
    secs: f64,
}

impl Tally {
    fn add(&mut self, ranked: &[String], gold: &[String], secs: f64) {
        self.n += 1;
        self.secs += secs;
        for (h, k) in self.hits.iter_mut().zip(KS) {
            let top = &ranked[..ranked.len().min(k)];
            if gold.iter().all(|g| top.contains(g)) {
                *h += 1;
            }
        }
    }
    fn row(&self, name: &str) -> String {
        let pct = |h: usize| 100.0 * h as f64 / self.n.max(1) as f64;
        format!(
            "| {name} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.3} s |",
            pct(self.hits[0]),
            pct(self.hits[1]),
            pct(self.hits[2]),
            pct(self.hits[3]),
            self.secs / self.n.max(1) as f64
        )
    }
}

/// Plain BM25 (k1 1.2, b 0.75) over the `.py` files of a commit, lowercase words, no
/// identifier splitting, no path terms.
fn bm25_baseline(repo: &Repo, commit: &str, query: &str) -> Result<Vec<String>> {
    let gix = repo.gix();
    let id = repo.resolve(commit)?;
    let tree = gix.find_commit(id)?.tree()?;
    let mut rec = gix::traverse::tree::Recorder::default();
    tree.traverse().breadthfirst(&mut rec)?;
    let mut docs: Vec<(String, HashMap<String, u32>, u32)> = Vec::new();
    for e in rec.records {
        let path = e.filepath.to_str_lossy().into_owned();
        if !e.mode.is_blob() || !path.ends_with(".py") {
            continue;
        }
        let data = gix.find_object(e.oid)?.detach().data;
        let text = String::from_utf8_lossy(&data);
        let mut tf: HashMap<String, u32> = HashMap::new();
        let mut len = 0;
        text::plain_words(&text, |w| {
            *tf.entry(w.to_string()).or_default() += 1;
            len += 1;
        });
        docs.push((path, tf, len));
    }
    let n = docs.len() as f64;
    let avg = docs.iter().map(|d| f64::from(d.2)).sum::<f64>() / n.max(1.0);
    let mut df: HashMap<&str, u32> = HashMap::new();
    for (_, tf, _) in &docs {
        for t in tf.keys() {
            *df.entry(t.as_str()).or_default() += 1;
        }
    }
    let mut q: HashMap<String, u32> = HashMap::new();
    text::plain_words(query, |w| *q.entry(w.to_string()).or_default() += 1);
    let (k1, b) = (1.2, 0.75);
    let mut scored: Vec<(f64, &str)> = docs
        .iter()
        .map(|(path, tf, len)| {
            let mut s = 0.0;
            for (t, &qtf) in &q {
                let Some(&f) = tf.get(t) else { continue };
                let d = f64::from(df[t.as_str()]);
                let idf = ((n - d + 0.5) / (d + 0.5) + 1.0).ln();
                let f = f64::from(f);
                s += f64::from(qtf) * idf * f * (k1 + 1.0)
                    / (f + k1 * (1.0 - b + b * f64::from(*len) / avg));
            }
            (s, path.as_str())
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    Ok(scored
        .into_iter()
        .take(10)
        .map(|(_, p)| p.to_string())
        .collect())
}

fn main() -> Result<()> {
    let mut data = PathBuf::from("/work/shared/bench/localization/dev.jsonl");
    let mut mirrors = PathBuf::from("/work/.mirror");
    let mut cache_root = std::env::temp_dir().join("git-agent-bench-locate-cache");
    let mut opts = RankOptions::default();
    let mut baseline = true;
    let mut misses = false;
    let mut sweep: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--data" => data = args.next().context("--data needs a path")?.into(),
            "--mirrors" => mirrors = args.next().context("--mirrors needs a path")?.into(),
            "--cache" => cache_root = args.next().context("--cache needs a path")?.into(),
            "--opts" => {
                opts = serde_json::from_str(&args.next().context("--opts needs JSON")?)?;
            }
            "--no-baseline" => baseline = false,
            "--misses" => misses = true,
            "--sweep" => sweep = Some(args.next().context("--sweep needs a path")?.into()),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let text = std::fs::read_to_string(&data).with_context(|| format!("reading {data:?}"))?;
    let instances: Vec<Instance> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let mut repos: HashMap<String, Repo> = HashMap::new();
    for inst in &instances {
        if !repos.contains_key(&inst.repo) {
            let dir = mirrors.join(inst.repo.replace('/', "+")).join("repo");
            let repo = Repo::open(&dir).with_context(|| format!("opening {dir:?}"))?;
            repos.insert(inst.repo.clone(), repo);
        }
    }
    let index_opts = |repo: &str| IndexOptions {
        cache: CacheLocation::Dir(cache_root.join(repo.replace('/', "+"))),
        ..IndexOptions::default()
    };

    // Cold pass: fills the cache.
    let t = Instant::now();
    let mut parsed = 0;
    for inst in &instances {
        let idx = Index::at_commit(
            &repos[&inst.repo],
            &inst.base_commit,
            &index_opts(&inst.repo),
        )?;
        parsed += idx.stats().parsed;
    }
    eprintln!(
        "cold pass: {} instances, {parsed} files parsed, {:.1} s",
        instances.len(),
        t.elapsed().as_secs_f64()
    );

    if let Some(sweep) = sweep {
        return run_sweep(&sweep, &instances, &repos, &index_opts);
    }

    let mut ours = Tally::default();
    let mut halves = [Tally::default(), Tally::default()];
    let mut base_halves = [Tally::default(), Tally::default()];
    let mut base = Tally::default();
    let mut per_repo: HashMap<&str, (Tally, Tally)> = HashMap::new();
    for inst in &instances {
        let repo = &repos[&inst.repo];
        let t = Instant::now();
        let idx = Index::at_commit(repo, &inst.base_commit, &index_opts(&inst.repo))?;
        let ranked: Vec<String> = idx
            .rank(&inst.problem_statement, &opts)
            .into_iter()
            .take(10)
            .map(|r| r.path)
            .collect();
        let secs = t.elapsed().as_secs_f64();
        ours.add(&ranked, &inst.gold_files, secs);
        let half = usize::from(!tune_half(&inst.instance_id));
        halves[half].add(&ranked, &inst.gold_files, secs);
        let entry = per_repo.entry(inst.repo.as_str()).or_default();
        entry.0.add(&ranked, &inst.gold_files, secs);
        if misses
            && !inst
                .gold_files
                .iter()
                .all(|g| ranked[..ranked.len().min(5)].contains(g))
        {
            let full = idx.rank(&inst.problem_statement, &opts);
            let pos: Vec<String> = inst
                .gold_files
                .iter()
                .map(|g| {
                    let p = full.iter().position(|r| &r.path == g);
                    let skipped = skip_path(g) || idx.file(g).is_none();
                    format!(
                        "{g}@{}{}",
                        p.map_or("-".into(), |p| (p + 1).to_string()),
                        if skipped { "(not indexed)" } else { "" }
                    )
                })
                .collect();
            eprintln!(
                "MISS {} gold {:?} top {:?}",
                inst.instance_id,
                pos,
                &ranked[..ranked.len().min(5)]
            );
        }
        if baseline {
            let t = Instant::now();
            let b = bm25_baseline(repo, &inst.base_commit, &inst.problem_statement)?;
            let secs = t.elapsed().as_secs_f64();
            base.add(&b, &inst.gold_files, secs);
            base_halves[half].add(&b, &inst.gold_files, secs);
            entry.1.add(&b, &inst.gold_files, secs);
        }
    }
    println!("{} instances from {data:?}\n", instances.len());
    println!("| method | Acc@1 | Acc@3 | Acc@5 | Acc@10 | time/query |");
    println!("|---|---|---|---|---|---|");
    println!("{}", ours.row("git-agent index (warm cache), all"));
    println!(
        "{}",
        halves[0].row(&format!("ours, tune half (n={})", halves[0].n))
    );
    println!(
        "{}",
        halves[1].row(&format!("ours, held-out half (n={})", halves[1].n))
    );
    if baseline {
        println!("{}", base.row("BM25 baseline (.py files), all"));
        println!("{}", base_halves[0].row("BM25, tune half"));
        println!("{}", base_halves[1].row("BM25, held-out half"));
    }
    println!("\n| repository | n | ours Acc@5 | BM25 Acc@5 |");
    println!("|---|---|---|---|");
    let mut names: Vec<&&str> = per_repo.keys().collect();
    names.sort();
    for name in names {
        let (o, b) = &per_repo[*name];
        let pct = |t: &Tally| 100.0 * t.hits[2] as f64 / t.n.max(1) as f64;
        println!(
            "| {name} | {} | {:.1}% | {:.1}% |",
            o.n,
            pct(o),
            if baseline { pct(b) } else { f64::NAN }
        );
    }
    Ok(())
}

/// Rank every instance with each options line of `path`; print Acc@k per half.
fn run_sweep(
    path: &std::path::Path,
    instances: &[Instance],
    repos: &HashMap<String, Repo>,
    index_opts: &dyn Fn(&str) -> IndexOptions,
) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path:?}"))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let all: Vec<RankOptions> = lines
        .iter()
        .map(|l| serde_json::from_str(l))
        .collect::<Result<_, _>>()?;
    let mut tallies: Vec<[Tally; 2]> = all.iter().map(|_| Default::default()).collect();
    for inst in instances {
        let idx = Index::at_commit(
            &repos[&inst.repo],
            &inst.base_commit,
            &index_opts(&inst.repo),
        )?;
        let half = usize::from(!tune_half(&inst.instance_id));
        let mut rankers: Vec<((f64, f64), Ranker)> = Vec::new();
        for (opts, tally) in all.iter().zip(&mut tallies) {
            let key = (opts.path_term_weight, opts.def_term_weight);
            let k = match rankers.iter().position(|(k, _)| *k == key) {
                Some(k) => k,
                None => {
                    rankers.push((key, Ranker::with_options(idx.files(), opts)));
                    rankers.len() - 1
                }
            };
            let ranked: Vec<String> = rankers[k]
                .1
                .rank(&inst.problem_statement, opts)
                .into_iter()
                .take(10)
                .map(|r| r.path)
                .collect();
            tally[half].add(&ranked, &inst.gold_files, 0.0);
        }
    }
    println!("| opts | tune @1/@3/@5/@10 | held-out @1/@3/@5/@10 |");
    for (line, [t, h]) in lines.iter().zip(&tallies) {
        let f = |t: &Tally| {
            t.hits
                .iter()
                .map(|x| format!("{:.1}", 100.0 * *x as f64 / t.n.max(1) as f64))
                .collect::<Vec<_>>()
                .join("/")
        };
        println!("| {line} | {} | {} |", f(t), f(h));
    }
    Ok(())
}
