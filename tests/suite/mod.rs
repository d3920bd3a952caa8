//! One module per concern.

mod audit;
mod config;
mod verify;
