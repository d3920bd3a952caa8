//! One module per concern.

mod audit;
mod config;
mod exec;
mod model;
mod run;
mod tools;
mod verify;
mod workspace;
