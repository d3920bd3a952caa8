//! One module per concern.

mod config;
