//! One module per concern.

mod config;
mod index;
