//! Configuration from files: backstop's own format (TOML, JSON, YAML) and the
//! importers of other tools' formats.

#[path = "../support/mod.rs"]
mod support;

#[cfg(all(feature = "toml", feature = "json", feature = "yaml"))]
mod files;
#[cfg(feature = "yaml")]
mod gateway;
#[cfg(all(feature = "grpc", feature = "json"))]
mod grpc;
#[cfg(feature = "toml")]
mod reload;
#[cfg(all(feature = "toml", feature = "json", feature = "yaml"))]
mod throttle;
