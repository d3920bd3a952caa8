//! Verification: finding the project's test command, reading what its run printed, and
//! deciding whether a change succeeded.
//!
//! This module owns test-command detection ([`detect`], [`resolve`]), flags that make a
//! runner's output parseable ([`reliable_command`]), result parsers for cargo test, pytest,
//! go test, jest/vitest, node's test runner, mocha, ava, TAP (tape and others), Python's
//! unittest (and nose2), Maven/Gradle and JUnit XML ([`parse_output`],
//! [`parse_junit_xml`]), the focused failure summary for the model ([`failure_summary`]) and
//! the success decision ([`decide`]), and the environment set-up a project needs before
//! its tests can run ([`setup_plan`]).
//!
//! It must not run anything: the caller runs the command through the sandboxed executor and
//! hands the result in as data ([`RunResult`]). The decision is a pure function of exit codes
//! and parsed test names; no model's opinion enters it.

mod ava;
mod decide;
mod detect;
mod environment;
mod error;
mod integrity;
mod junit;
mod mocha;
mod parse;
mod pydeps;
mod report;
mod setup;
mod summary;
mod unittest;

pub use decide::{Basis, Observation, RunResult, TestVerdict, decide, excuse, observe};
pub use detect::{
    CommandSource, Reliable, Runner, TestCommand, detect, junit_report_dirs, read_junit_reports,
    reliable_command, resolve,
};
pub use environment::{
    EnvironmentProblem, before_tests_problem, environment_problem, toolchain_lints,
};
pub use error::{Error, Result};
pub use integrity::{
    doctest_change, is_test_path, named_by_results, names_doctest, python_doctests, rust_test_code,
    test_change, test_special_casing,
};
pub use junit::parse_junit_xml;
pub use parse::parse_output;
pub use report::{Counts, Format, Names, TestReport, strip_ansi};
pub use setup::{
    ENV_VAR as SETUP_ENV_VAR, Ecosystem, SetupPlan, expand as expand_setup_env, plan as setup_plan,
    plan_like_base as setup_plan_like_base, setup_input,
};
pub use summary::failure_summary;
