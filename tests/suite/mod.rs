//! One module per concern.

mod config;
mod github;
mod workspace;
