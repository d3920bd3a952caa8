//! One module per concern.

mod audit;
mod common;
mod config;
mod exec;
mod github;
mod index;
mod integrity;
mod layers;
mod memory;
mod model;
mod publish;
mod run;
mod sandbox_cmd;
mod secret_scan;
mod serve_crash;
mod serve_e2e;
mod serve_isolation;
mod server;
mod server_limits;
mod setup;
mod store;
mod tools;
mod verify;
mod view;
mod workspace;
