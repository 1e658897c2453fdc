//! Integration tests of `grpc`: gRPC's rules over a real tonic `Channel` and a
//! real HTTP/2 server on 127.0.0.1.

#[path = "../support/mod.rs"]
mod support;

mod grpc;
mod history;
