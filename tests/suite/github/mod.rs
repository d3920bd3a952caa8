//! GitHub: the forge against a fake API checked by GitHub's REST description, and the
//! triggers over GitHub's published webhook examples.

mod action;
pub mod fake;
mod forge;
mod trigger;
