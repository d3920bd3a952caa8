//! Model clients against real HTTP servers on loopback, the router, and a real llama-server.

mod anthropic;
mod llama;
mod openai;
mod router;
mod server;
