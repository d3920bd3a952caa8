//! One module per concern.

mod config;
mod exec;
mod workspace;
