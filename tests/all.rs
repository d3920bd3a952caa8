//! Integration tests, linked once. Each concern has its file under `tests/suite/`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod suite;
