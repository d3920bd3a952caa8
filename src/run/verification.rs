//! Verification: which command proves the change, running it in the sandbox, reading its
//! results against the baseline (the final check that decides the run is `final_check`).
//!
//! Success is decided here and only here, from the test command's results
//! ([`crate::verify::decide`]), never from a model's opinion. [`super::final_check`] runs
//! the stages of the final verification in order; a new stage is one more step there that
//! can fail the verdict and say why to the model, recorded as a [`VerifyLine`] of its own
//! [`Check`].

use std::time::Duration;

use serde_json::json;
use tracing::Instrument as _;

use std::path::Path;

use super::attribution;
use super::engine::RunEvent;
use super::error::Result;
use super::ledger::Ledger;
use super::report::VerifyLine;
use super::setup::Workbench;
use crate::audit::chain::Kind;
use crate::config::Preexisting;
use crate::exec::{ExecRequest, Executor, Termination};
use crate::verify::{self, Decision, Observation, RunResult, TestCommand};

/// Bytes of failure summary given to the model and the report.
const FAILURE_SUMMARY_BYTES: usize = 6 * 1024;

/// Which test run this is. Its display is the `when` of the run's [`VerifyLine`] (`before`,
/// `run_tests 2`, `attempt 1`), which the report and the record keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// The baseline, before any edit: what fails already.
    Baseline,
    /// The baseline's command once more, before any edit: which failures are flaky.
    Rerun,
    /// The model asked (`run_tests`); the number is the run's count of test runs so far.
    OnRequest(usize),
    /// The final verification after `finish`, by fix attempt (from 1).
    Attempt(u32),
    /// The same attempt in a clean checkout of what would be committed.
    Clean(u32),
    /// The same attempt with the base revision's versions of the changed test files.
    HeldOut(u32),
    /// The run's tests on the base revision's code: do they show the problem?
    OnBase(u32),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Baseline => f.write_str("before"),
            Check::Rerun => f.write_str("before, again (flaky check)"),
            Check::OnRequest(n) => write!(f, "run_tests {n}"),
            Check::Attempt(n) => write!(f, "attempt {n}"),
            Check::Clean(n) => write!(f, "attempt {n}, clean checkout"),
            Check::HeldOut(n) => write!(f, "attempt {n}, held-out tests"),
            Check::OnBase(n) => write!(f, "attempt {n}, tests on the base code"),
        }
    }
}

/// One test run, read.
#[derive(Debug)]
pub(super) struct TestRun {
    /// What the run observed (tests passed and failed, exit code).
    pub(super) obs: Observation,
    /// Its line in the record and the report.
    pub(super) line: VerifyLine,
    /// The verdict against the baseline.
    pub(super) decision: Decision,
    /// stdout then stderr, as captured (not redacted: it stays in the process).
    pub(super) output: String,
    /// A command set-up runs in every checkout before the tests failed there (its text):
    /// the tests did not run.
    pub(super) before_failed: Option<String>,
    /// Stopped at its time-out.
    pub(super) timed_out: bool,
}

impl TestRun {
    /// What the model is told: the one-line result, then the failure summary, and which
    /// failures it should leave alone.
    pub(super) fn feedback(&self) -> String {
        let mut text = if self.line.excerpt.is_empty() {
            self.line.result.clone()
        } else {
            format!("{}\n{}", self.line.result, self.line.excerpt)
        };
        let leave: Vec<String> = self
            .decision
            .preexisting
            .iter()
            .chain(&self.decision.flaky)
            .cloned()
            .collect();
        if !leave.is_empty() {
            text.push_str(&format!(
                "\nThese failed before your change and are unrelated to it (or flaky); do not try to fix them: {}",
                quoted(&leave)
            ));
        }
        text
    }
}

/// The command that verifies the change: the flag's, else the record's or the config's,
/// else detected in the worktree. A detected command gets the flags that make its output name
/// every test (so the baseline comparison sees them all); a command a person gave runs exactly
/// as given.
pub(super) fn test_command(led: &Ledger<'_>, from_flag: bool) -> Result<Option<TestCommand>> {
    let flag = if from_flag {
        led.rec.test_command.as_deref()
    } else {
        None
    };
    let config = led
        .rec
        .test_command
        .as_deref()
        .or(led.svc.config.settings.verify.test.as_deref());
    Ok(
        verify::resolve(&led.rec.worktree, flag, config)?.map(|mut cmd| {
            let reliable = verify::reliable_command(&cmd);
            if !reliable.added.is_empty() {
                tracing::debug!(command = %reliable.command, why = %reliable.note, "test command made verbose");
                cmd.command = reliable.command;
            }
            cmd
        }),
    )
}

/// Run the test command once in the run's worktree and read it against the record's
/// baseline. What the run changes in the worktree is attributed to the test command.
pub(super) async fn run_tests(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    check: Check,
) -> Result<TestRun> {
    attribution::observe(led, &bench.worktree, "a tool or command")?;
    if !matches!(check, Check::Baseline) {
        super::environment::refresh(led, bench, cmd).await?;
    }
    // The changed paths only tell pre-existing failures from related ones: no baseline
    // failure, nothing to tell, no snapshot to write.
    let baseline_failed = led
        .rec
        .baseline
        .as_ref()
        .and_then(|b| b.report.as_ref())
        .is_some_and(|r| !r.failed.is_empty());
    let changed = match check {
        Check::Baseline | Check::Rerun => Vec::new(),
        _ if !baseline_failed => Vec::new(),
        _ => {
            let base = led.svc.repo.resolve(&led.rec.base_sha)?;
            let snapshot = bench.worktree.snapshot()?;
            led.svc
                .repo
                .changed_blobs(base, snapshot)?
                .into_iter()
                .map(|c| c.path)
                .collect()
        }
    };
    let run = run_tests_at(
        led,
        bench.executor.as_ref(),
        bench.worktree.path(),
        cmd,
        check,
        &changed,
        None,
    )
    .await?;
    attribution::observe(
        led,
        &bench.worktree,
        &format!("{} ({check})", attribution::TEST_COMMAND),
    )?;
    // Saved now: a crash before the next save must not leave the test command's files
    // looking like the model's on resume.
    led.save()?;
    Ok(run)
}

/// Lints to build with `--force-warn` before the baseline counts: those the base's code
/// tripped under this toolchain without their being the project's rule
/// (`verify::toolchain_lints`) and not forced yet. `None` when the run passed, showed none,
/// or the project or the front door sets Rust flags of its own (`RUSTFLAGS` would replace
/// a `.cargo/config`'s `rustflags`, so the base is then tested as it is).
pub(super) fn lints_to_force(
    led: &Ledger<'_>,
    cmd: &TestCommand,
    run: &TestRun,
) -> Result<Option<Vec<String>>> {
    if run.obs.exit_code == Some(0) || cmd.runner != verify::Runner::Cargo {
        return Ok(None);
    }
    let new: Vec<String> = verify::toolchain_lints(&run.output)
        .into_iter()
        .filter(|l| !l.contains("::") && !led.rec.forced_warn_lints.contains(l))
        .collect();
    if new.is_empty() {
        return Ok(None);
    }
    let flags = [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
    ];
    if super::clean_checkout::cargo_setting_given(led, &flags, "rustflags")? {
        return Ok(None);
    }
    Ok(Some(new))
}

/// The report's note on lints forced to warnings (`lints_to_force`).
pub(super) fn forced_lints_note(lints: &[String]) -> String {
    format!(
        "The base's code does not build under this toolchain's lints ({}): lints newer than \
         the code, denied by default or made errors by its `deny(warnings)`, not rules the \
         project names. Every test run built with `--force-warn` for them (`RUSTFLAGS`, \
         `RUSTDOCFLAGS`).",
        lints
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Run the test command once through `executor`, rooted at `root` (the worktree or a clean
/// checkout), and read it against the record's baseline; `changed` holds the paths the run
/// changed from the base (for telling pre-existing failures from related ones). `limit`
/// shortens the configured time-out (never lengthens it).
pub(super) async fn run_tests_at(
    led: &mut Ledger<'_>,
    executor: &dyn Executor,
    root: &Path,
    cmd: &TestCommand,
    check: Check,
    changed: &[String],
    limit: Option<Duration>,
) -> Result<TestRun> {
    let svc = led.svc;
    let since = std::time::SystemTime::now();
    let configured =
        Duration::from_secs(u64::from(svc.config.settings.verify.timeout_minutes.max(1)) * 60);
    let timeout = limit.map_or(configured, |l| l.min(configured));
    let before = led
        .rec
        .setup
        .as_ref()
        .map(|s| s.before_tests.clone())
        .unwrap_or_default();
    let mut before_failed = None;
    let mut out = None;
    for c in &before {
        let o = executor
            .run(ExecRequest::shell(c.clone()).timeout(timeout))
            .instrument(tracing::debug_span!("before_tests"))
            .await?;
        led.audit(
            Kind::Verify,
            json!({"when": "before the tests", "command": c, "status": o.status, "duration_ms": o.duration.as_millis() as u64}),
        )?;
        if !matches!(o.status, Termination::Exited(0)) {
            before_failed = Some(c.clone());
            out = Some(o);
            break;
        }
    }
    let out = match out {
        Some(o) => o,
        None => {
            executor
                .run(ExecRequest::shell(cmd.command.clone()).timeout(timeout))
                .instrument(tracing::debug_span!("test_command"))
                .await?
        }
    };
    let mut text = match &before_failed {
        Some(c) => format!(
            "`{c}`, which set-up runs in every checkout before the tests, failed; the tests did not run:\n"
        ),
        None => String::new(),
    };
    text.push_str(&out.stdout.to_text_lossy());
    let err = out.stderr.to_text_lossy();
    if !err.is_empty() {
        text.push('\n');
        text.push_str(&err);
    }
    let exit_code = match out.status {
        Termination::Exited(c) => Some(c),
        _ => None,
    };
    let junit = verify::read_junit_reports(root, cmd.runner, since).unwrap_or_default();
    let obs = verify::observe(
        cmd,
        &RunResult {
            exit_code,
            output: text.clone(),
        },
        &junit,
    );
    let mut decision = verify::decide(led.rec.baseline.as_ref(), &obs);
    if !matches!(check, Check::Baseline | Check::Rerun | Check::OnBase(_)) {
        let allow = svc.config.settings.verify.preexisting == Preexisting::Allow;
        let goal = led.rec.task.goal.clone();
        let fixed = decision.newly_passing.clone();
        let planned = led.rec.planned_files();
        let base_sha = led.rec.base_sha.clone();
        let base_file = |path: &str| -> Option<String> {
            let bytes = svc.repo.read_file_at(&base_sha, path).ok()??;
            String::from_utf8(bytes).ok()
        };
        let evidence = Evidence {
            fixed: &fixed,
            changed,
            root,
            before: led.rec.baseline.as_ref().and_then(|b| b.report.as_ref()),
            before_root: &led.rec.worktree,
            after: obs.report.as_ref(),
            base_file: &base_file,
        };
        verify::excuse(
            &mut decision,
            &obs,
            &led.rec.flaky,
            // The held-out run follows a clean checkout's run that passed; a run that changed
            // a test file did something its tests may show (the reproduction check asks).
            matches!(check, Check::HeldOut(_)) || changed.iter().any(|p| verify::is_test_path(p)),
            |name| allow && unrelated(name, &evidence),
            |name| requested(name, &goal) || planned_test(name, &planned, &evidence),
        );
    }
    let result = match check {
        // Nothing to compare the baseline with: it says what fails already.
        Check::Baseline | Check::Rerun => baseline_result(&obs, exit_code),
        Check::OnRequest(_) | Check::Attempt(_) | Check::Clean(_) | Check::HeldOut(_) => {
            decision.headline(&obs)
        }
        // Not compared with the baseline: the question is which of the run's tests fail.
        Check::OnBase(_) => baseline_result(&obs, exit_code),
    };
    let excerpt = if obs.exit_code == Some(0) {
        String::new()
    } else {
        svc.redactor.redact(&verify::failure_summary(
            obs.report.as_ref(),
            &text,
            FAILURE_SUMMARY_BYTES,
        ))
    };
    let when = check.to_string();
    let line = VerifyLine {
        when: when.clone(),
        command: cmd.command.clone(),
        exit_code,
        duration_ms: out.duration.as_millis() as u64,
        result: result.clone(),
        excerpt,
    };
    led.audit(
        Kind::Verify,
        json!({"when": when, "command": cmd.command, "status": out.status, "duration_ms": line.duration_ms, "decision": decision, "dropped_bytes": out.stdout.dropped + out.stderr.dropped}),
    )?;
    led.progress(RunEvent::Verified {
        when,
        result: svc.redactor.clean(&result),
    });
    Ok(TestRun {
        obs,
        line,
        decision,
        output: text,
        before_failed,
        timed_out: matches!(out.status, Termination::TimedOut),
    })
}

/// Run the whole baseline command once more, the same invocation in the same order, to find
/// flaky baseline failures (issue 19). A test is flaky only if it failed in the baseline and
/// passes, by name, in that full rerun: a test that fails only after another one ran (order
/// or shared state) fails again there, where a rerun of it alone would pass (issue 18's
/// attacker review). Flaky tests are named in the report and left out of every decision —
/// except the run's only baseline failure, a test the request names, or every baseline
/// failure at once: a failure that does not come back may still be the one the run is for.
pub(super) async fn find_flaky(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
) -> Result<()> {
    let Some(failed) = led
        .rec
        .baseline
        .as_ref()
        .and_then(|b| b.report.as_ref())
        .filter(|r| r.names >= verify::Names::FailedOnly)
        .map(|r| r.failed.clone())
    else {
        return Ok(());
    };
    if failed.len() < 2 {
        // The only failure is what the run is about; whether it comes back or not, it decides.
        return Ok(());
    }
    // Audited as a test run of its own (`run_tests_at`); not a line of the report's table.
    let run = run_tests(led, bench, cmd, Check::Rerun).await?;
    let goal = led.rec.task.goal.clone();
    let flaky = flaky_in_rerun(&failed, &run.obs, |n| requested(n, &goal));
    led.rec.flaky.extend(flaky);
    if !led.rec.flaky.is_empty() {
        let names: Vec<String> = led.rec.flaky.iter().cloned().collect();
        led.rec.notes.push(format!(
            "Flaky: {} failed in the baseline but passed when the whole test command ran again; left out of the decision.",
            quoted(&names)
        ));
    }
    Ok(())
}

/// The baseline failures (`failed`) that pass, by name, in the full rerun `rerun`; none of
/// them when they all pass (a failure that does not come back may be the one the run is
/// for), and never one the request names.
fn flaky_in_rerun(
    failed: &std::collections::BTreeSet<String>,
    rerun: &Observation,
    requested: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(r) = rerun
        .report
        .as_ref()
        .filter(|r| r.names == verify::Names::Full)
    else {
        return Vec::new();
    };
    let passed: Vec<String> = failed
        .iter()
        .filter(|n| r.passed.contains(*n) && !r.failed.contains(*n))
        .cloned()
        .collect();
    if passed.len() == failed.len() {
        return Vec::new();
    }
    passed.into_iter().filter(|n| !requested(n)).collect()
}

/// The baseline's one-line result: which tests fail already, or the counts.
fn baseline_result(obs: &Observation, exit_code: Option<i32>) -> String {
    match &obs.report {
        Some(r) if !r.failed.is_empty() => format!(
            "{} failed: {}",
            r.failed.len(),
            r.failed
                .iter()
                .take(5)
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(r) => format!("{} passed, {} failed", r.counts.passed, r.counts.failed),
        None => match exit_code {
            Some(c) => format!("exit code {c}"),
            None => "killed".into(),
        },
    }
}

/// Whether a test that failed before and still fails is unrelated to the change, so it may
/// stand as pre-existing (issues 19, 39), for every runner: it is no variant (same test,
/// other parameters) of a test the run fixed, its file (where the runner names one) does not
/// reach what the run changed, and it failed the same way before and after. Anything else is
/// doubt and blocks; whether the request or the plan names it is asked apart.
fn unrelated(name: &str, ev: &Evidence<'_>) -> bool {
    let stem = name.split('[').next().unwrap_or(name);
    if ev
        .fixed
        .iter()
        .any(|f| f.split('[').next().unwrap_or(f) == stem)
    {
        return false;
    }
    if let Some(file) = test_file_of(name)
        && reaches_changed(ev, name, file)
    {
        return false;
    }
    same_failure(name, ev) == Some(true)
}

/// What tells a still-failing test from one the change touched (issue 39), for every runner.
struct Evidence<'a> {
    /// Baseline failures the change fixed (a variant of one is never unrelated).
    fixed: &'a [String],
    /// Paths the run changed from the base.
    changed: &'a [String],
    /// Where the tests ran now.
    root: &'a Path,
    /// The baseline's report and where it ran.
    before: Option<&'a verify::TestReport>,
    before_root: &'a Path,
    /// This run's report.
    after: Option<&'a verify::TestReport>,
    /// A file's content at the run's base (`None`: not there).
    base_file: &'a dyn Fn(&str) -> Option<String>,
}

/// Whether `name` failed the same way before and after (the runner's text about it, with
/// paths, durations, line numbers and addresses made alike): `None` when either side has no
/// text for it, which is doubt.
fn same_failure(name: &str, ev: &Evidence<'_>) -> Option<bool> {
    let before = ev.before?.details.get(name)?;
    let after = ev.after?.details.get(name)?;
    Some(
        normalized_failure(before, &[ev.before_root, ev.root])
            == normalized_failure(after, &[ev.before_root, ev.root]),
    )
}

/// A failure's text with what differs between two runs of the same failure made alike.
fn normalized_failure(text: &str, roots: &[&Path]) -> String {
    static PATTERNS: std::sync::LazyLock<Vec<(regex::Regex, &'static str)>> =
        std::sync::LazyLock::new(|| {
            [
                (
                    r"\b\d+(\.\d+)?\s?(ms|s|µs|us|ns|sec|secs|seconds)\b",
                    "<time>",
                ),
                // Rust prints the panicking thread's id: `thread 'name' (117) panicked`, and
                // its backtrace hint once per process, after whichever test panicked first.
                (r"(thread '[^']*') \(\d+\)", "$1"),
                (
                    r"(?m)^note: (?:run with `RUST_BACKTRACE|Some details are omitted).*$",
                    "",
                ),
                (r"(\.[A-Za-z]{1,5}):\d+(:\d+)?", "$1:<line>"),
                (r"\bline \d+", "line <n>"),
                (r"0x[0-9a-fA-F]{6,}", "0x<addr>"),
                (r"\s+", " "),
            ]
            .into_iter()
            .filter_map(|(p, r)| regex::Regex::new(p).ok().map(|re| (re, r)))
            .collect()
        });
    let mut t = text.to_string();
    // Longest first: one root may be the other's prefix (`<worktree>-verify`).
    let mut roots: Vec<&str> = roots
        .iter()
        .filter_map(|r| r.to_str())
        .filter(|r| !r.is_empty())
        .collect();
    roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
    for r in roots {
        t = t.replace(r, "<root>");
    }
    for (re, with) in PATTERNS.iter() {
        t = re.replace_all(&t, *with).into_owned();
    }
    t.trim().to_string()
}

/// The file a test's name places it in, when the runner names one: pytest's
/// `tests/x.py::…`, cargo's `crate(src/lib.rs)::…`, jest's `a/x.test.js › …`, vitest's
/// `x.test.mjs > …`.
pub(super) fn test_file_of(name: &str) -> Option<&str> {
    if let Some((file, _)) = name.split_once("::")
        && let Some(inner) = file.split_once('(').and_then(|(_, r)| r.strip_suffix(')'))
    {
        return Some(inner);
    }
    let first = name
        .split(" › ")
        .next()
        .and_then(|f| f.split(" > ").next())
        .and_then(|f| f.split("::").next())
        .unwrap_or(name)
        .trim();
    let code = [
        ".py", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx", ".rs",
    ];
    (!first.contains(' ') && code.iter().any(|e| first.ends_with(e))).then_some(first)
}

/// Whether the test `name` in `file` reaches what the run changed: the test file itself
/// changed (a Rust source file only when it is a test file: its unit tests sit beside the
/// code) where the test's own definition changed or cannot be told apart, or it imports a
/// changed module (Python, JavaScript). A fix that adds its tests to the file of an
/// unrelated failing test does not touch that test (issue 39).
fn reaches_changed(ev: &Evidence<'_>, name: &str, file: &str) -> bool {
    let (root, changed) = (ev.root, ev.changed);
    let rust_source = file.ends_with(".rs") && !verify::is_test_path(file);
    let Ok(text) = std::fs::read_to_string(root.join(file)) else {
        return !rust_source;
    };
    if !rust_source
        && changed.iter().any(|c| c == file)
        && !own_definition_unchanged(ev, name, file)
    {
        return true;
    }
    if file.ends_with(".py") {
        return changed
            .iter()
            .filter(|p| p.ends_with(".py") && !verify::is_test_path(p))
            .any(|p| imports_module(&text, p));
    }
    if rust_source || file.ends_with(".rs") {
        return false;
    }
    changed
        .iter()
        .filter(|p| !verify::is_test_path(p))
        .any(|p| requires_module(&text, p))
}

/// The function a test id names (`file.py::Class::test_m[p]` → `test_m`,
/// `bin(tests/t.rs)::module::name` → `name`), when it is an identifier.
fn test_function(name: &str) -> Option<&str> {
    let last = name.rsplit("::").next()?;
    let last = last.split('[').next()?.trim();
    (!last.is_empty() && last.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(last)
}

/// The source of the one `def`/`fn` named `func` in `text`: its line through the line
/// before the next one at its indentation or less (decorators and attributes above it
/// left out). `None` when there is no such definition or more than one.
fn definition(text: &str, func: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let starts = |l: &str| {
        let t = l.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("async ").unwrap_or(t);
        [
            format!("fn {func}("),
            format!("def {func}("),
            format!("fn {func}<"),
        ]
        .iter()
        .any(|p| t.starts_with(p.as_str()))
    };
    let mut found = lines.iter().enumerate().filter(|(_, l)| starts(l));
    let (at, first) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let own = indent(first);
    let mut out = vec![*first];
    for l in &lines[at + 1..] {
        // A Rust body ends at its own `}`; a Python signature may close at its own `)`.
        let brace = l.trim_start().starts_with('}');
        let paren = l.trim_start().starts_with(')');
        if !l.trim().is_empty() && indent(l) <= own && !brace && !paren {
            break;
        }
        out.push(l);
        if brace && indent(l) == own {
            break;
        }
    }
    Some(out.join("\n"))
}

/// Whether JavaScript or TypeScript source `text` imports or requires the module at
/// repository path `path` by a relative specifier ending in its name (with or without the
/// extension; `index` files by their directory).
fn requires_module(text: &str, path: &str) -> bool {
    let code = [".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx"];
    let Some(ext) = code.iter().find(|e| path.ends_with(*e)) else {
        return false;
    };
    let stem = path.strip_suffix(ext).unwrap_or(path);
    let stem = stem.strip_suffix("/index").unwrap_or(stem);
    let name = stem.rsplit('/').next().unwrap_or(stem);
    let Ok(re) = regex::Regex::new(&format!(
        r#"(?:require\s*\(|import\s*\(|from)\s*['"]\.{{1,2}}/(?:[^'"]*/)?{}(?:\.[a-z]+)?['"]"#,
        regex::escape(name)
    )) else {
        return true;
    };
    re.is_match(text)
}

/// Whether the request `goal` names the test `name`: its whole identifier, its file, its
/// function or method (also without the runner's `test_`/`test` prefix: `add` names
/// `test_add`) as a word of the request, or — for a runner that names tests by title — the
/// full title. Never a single word of a title: "should not error" shares words with many
/// requests and names none of them (issue 39).
fn requested(name: &str, goal: &str) -> bool {
    let goal_l = goal.to_lowercase();
    let plain = name.split('[').next().unwrap_or(name).trim();
    if plain.len() >= 3 && goal_l.contains(&plain.to_lowercase()) {
        return true;
    }
    if let Some(file) = test_file_of(plain) {
        let base = file.rsplit('/').next().unwrap_or(file);
        if goal_l.contains(&file.to_lowercase()) || goal_l.contains(&base.to_lowercase()) {
            return true;
        }
    }
    let leaf = plain.rsplit([':', '›', '>']).next().unwrap_or(plain).trim();
    if leaf.contains(char::is_whitespace) {
        let title = leaf
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        let goal_n = goal_l.split_whitespace().collect::<Vec<_>>().join(" ");
        return title.len() >= 8 && goal_n.contains(&title);
    }
    let tokens: std::collections::BTreeSet<String> = goal_l
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let leaf_l = leaf.to_lowercase();
    let bare = leaf_l
        .strip_prefix("test_")
        .or_else(|| leaf_l.strip_suffix("_test"))
        .or_else(|| leaf_l.strip_prefix("test").filter(|r| !r.is_empty()))
        .unwrap_or(&leaf_l);
    tokens.contains(&leaf_l) || (bare.len() >= 3 && tokens.contains(bare))
}

/// Whether the plan is about test `name`: it names the file the test lives in, and the
/// run changed that test's own definition (or it cannot be told apart). A plan that adds
/// its test to a file beside an unrelated failing one is not about that one. A test the
/// plan is about is never excused as pre-existing.
fn planned_test(
    name: &str,
    planned: &std::collections::BTreeSet<String>,
    ev: &Evidence<'_>,
) -> bool {
    // cargo names the crate's root source for a unit test, wherever the test is: only a test
    // file the plan names says the plan is about its tests.
    test_file_of(name).is_some_and(|f| {
        verify::is_test_path(f) && planned.contains(f) && !own_definition_unchanged(ev, name, f)
    })
}

/// Whether test `name`'s own definition in `file` is the same at the base and now (both
/// found, once each).
fn own_definition_unchanged(ev: &Evidence<'_>, name: &str, file: &str) -> bool {
    let Some(func) = test_function(name) else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(ev.root.join(file)) else {
        return false;
    };
    let now = definition(&text, func);
    now.is_some() && (ev.base_file)(file).and_then(|b| definition(&b, func)) == now
}

/// Whether Python source `text` imports the module at repository path `path` (`src/` layouts
/// and relative imports included), as written.
fn imports_module(text: &str, path: &str) -> bool {
    let rel = path.strip_prefix("src/").unwrap_or(path);
    let rel = rel.strip_suffix(".py").unwrap_or(rel);
    let rel = rel.strip_suffix("/__init__").unwrap_or(rel);
    let dotted = rel.replace('/', ".");
    let (parent, last) = match dotted.rsplit_once('.') {
        Some((p, l)) => (Some(p.to_string()), l.to_string()),
        None => (None, dotted.clone()),
    };
    let e = |s: &str| regex::escape(s);
    let mut patterns = vec![
        format!(r"(?m)^\s*import\s+[^\n]*\b{}\b", e(&dotted)),
        format!(r"(?m)^\s*from\s+{}\s+import\b", e(&dotted)),
        format!(r"(?m)^\s*from\s+\.+{}\s+import\b", e(&last)),
        format!(r"(?m)^\s*from\s+\.+\s+import\s+[^\n]*\b{}\b", e(&last)),
    ];
    if let Some(parent) = parent {
        patterns.push(format!(
            r"(?m)^\s*from\s+{}\s+import\s+[^\n]*\b{}\b",
            e(&parent),
            e(&last)
        ));
    }
    patterns.iter().any(|p| {
        // A pattern that does not compile is doubt: count it as importing.
        regex::Regex::new(p).map_or(true, |re| re.is_match(text))
    })
}

/// `a`, `b` and `c` as code spans, at most five named.
pub(super) fn quoted(names: &[String]) -> String {
    let mut out: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
    if names.len() > 5 {
        out.push(format!("{} more", names.len() - 5));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_test_definition_is_its_own_lines_only() {
        let rust = "#[test]\nfn a() {\n    one();\n}\n\n#[test]\nfn b() {\n    two();\n}\n";
        assert_eq!(
            super::definition(rust, "a").as_deref(),
            Some("fn a() {\n    one();\n}")
        );
        let python = "class T:\n    def test_a(self):\n        x = 1\n\n        assert x\n\n    def test_b(self):\n        pass\n";
        assert_eq!(
            super::definition(python, "test_a").as_deref(),
            Some("    def test_a(self):\n        x = 1\n\n        assert x\n")
        );
        let signature = "def test_a(\n    x,\n):\n    assert x\ndef other():\n    pass\n";
        assert_eq!(
            super::definition(signature, "test_a").as_deref(),
            Some("def test_a(\n    x,\n):\n    assert x")
        );
        // Two of that name: cannot be told apart.
        assert_eq!(
            super::definition("def t():\n  1\ndef t():\n  2\n", "t"),
            None
        );
        assert_eq!(super::test_function("t(tests/t.rs)::m::name"), Some("name"));
        assert_eq!(
            super::test_function("tests/x.py::C::test_m[1-2]"),
            Some("test_m")
        );
        assert_eq!(super::test_function("add adds two numbers"), None);
    }

    use super::*;

    #[test]
    fn requested_tests_by_identifier_file_or_full_title() {
        let add = "tests/test_calc.py::test_add";
        assert!(requested(add, "fix add"));
        assert!(requested(add, "Adding numbers: add(2, 3) returns -1"));
        assert!(requested(add, "see tests/test_calc.py"));
        assert!(requested(add, "test_add fails"));
        let title = "calc.test.js › calc › adds two numbers";
        assert!(requested(title, "adds two numbers is broken"));
        assert!(requested(title, "calc.test.js fails"));
        // One shared word of a title names nothing (issue 39).
        assert!(!requested(title, "fix add"));
        assert!(!requested(
            "sub does not error on strings",
            "add should not error"
        ));
        let rust = "fixture(src/lib.rs)::tests::adds_two_numbers";
        assert!(requested(rust, "adds_two_numbers fails"));
        assert!(!requested(rust, "fix add"));
        let env = "tests/test_env.py::test_runs_on_python_two";
        assert!(!requested(env, "fix add"));
        assert!(!requested(env, "fix the test that fails"));
        assert!(!requested(env, "this should run on Python 2"));
        assert!(requested(env, "runs_on_python_two breaks"));
    }

    #[test]
    fn a_failure_is_the_same_across_paths_times_and_lines() {
        let a = Path::new("/state/worktrees/r1");
        let b = Path::new("/state/worktrees/r1-verify");
        let before = "thread 'x' (117) panicked at /state/worktrees/r1/src/lib.rs:40:5:\nleft: 1\nright: 2 (0.03s)";
        let after = "thread 'x' (3) panicked at /state/worktrees/r1-verify/src/lib.rs:44:5:\nleft: 1\nright: 2 (0.05s)\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(
            normalized_failure(before, &[a, b]),
            normalized_failure(after, &[a, b])
        );
        let changed =
            "thread 'x' panicked at /state/verify/r1-verify/src/lib.rs:44:5:\nleft: 3\nright: 2";
        assert_ne!(
            normalized_failure(before, &[a, b]),
            normalized_failure(changed, &[a, b])
        );
    }

    #[test]
    fn test_files_from_each_runners_names() {
        assert_eq!(
            test_file_of("tests/test_calc.py::test_add"),
            Some("tests/test_calc.py")
        );
        assert_eq!(
            test_file_of("fx(src/lib.rs)::tests::adds"),
            Some("src/lib.rs")
        );
        assert_eq!(
            test_file_of("api(tests/api.rs)::adds"),
            Some("tests/api.rs")
        );
        assert_eq!(
            test_file_of("jt/calc.test.js › calc › adds"),
            Some("jt/calc.test.js")
        );
        assert_eq!(
            test_file_of("calc.test.mjs > calc > adds"),
            Some("calc.test.mjs")
        );
        assert_eq!(test_file_of("add adds two numbers"), None);
        assert!(requires_module(
            "const { add } = require('../calc.js');",
            "calc.js"
        ));
        assert!(requires_module(
            "import { add } from \"../src/calc\";",
            "src/calc.ts"
        ));
        assert!(!requires_module(
            "const x = require('../other.js');",
            "calc.js"
        ));
    }

    /// Guards issue 18's attacker review, item 4: only a pass in the full rerun makes a
    /// baseline failure flaky, never all of them at once, never a requested one.
    #[test]
    fn flaky_only_from_a_full_rerun() {
        use crate::verify::{Counts, Format, Names, TestReport};
        let set = |v: &[&str]| {
            v.iter()
                .map(|s| (*s).to_owned())
                .collect::<std::collections::BTreeSet<_>>()
        };
        let rerun = |passed: &[&str], failed: &[&str]| Observation {
            exit_code: Some(1),
            report: Some(TestReport {
                format: Format::Pytest,
                names: Names::Full,
                counts: Counts::default(),
                passed: set(passed),
                failed: set(failed),
                skipped: Default::default(),
                details: Default::default(),
            }),
        };
        let failed = set(&["t::add", "t::wobbly", "t::order"]);
        let none = |_: &str| false;
        assert_eq!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::wobbly", "t::x"], &["t::add", "t::order"]),
                none
            ),
            ["t::wobbly"]
        );
        assert!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::add", "t::wobbly", "t::order"], &[]),
                none
            )
            .is_empty()
        );
        assert!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::wobbly"], &["t::add", "t::order"]),
                |n: &str| n == "t::wobbly"
            )
            .is_empty()
        );
    }

    #[test]
    fn checks_keep_the_names_the_report_and_old_records_use() {
        assert_eq!(Check::Baseline.to_string(), "before");
        assert_eq!(Check::OnRequest(2).to_string(), "run_tests 2");
        assert_eq!(Check::Attempt(1).to_string(), "attempt 1");
    }
}
