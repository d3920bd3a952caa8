//! Integration tests, linked once. Each concern has its file under `tests/suite/`.

// The tests replay attacks with raw system calls (pipes, fds, environment).
#![allow(
    unsafe_code,
    clippy::undocumented_unsafe_blocks,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod suite;
