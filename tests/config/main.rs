//! Configuration from files: backstop's own format (TOML, JSON, YAML) and the
//! importers of other tools' formats.

#[cfg(all(feature = "toml", feature = "json", feature = "yaml"))]
mod files;

#[cfg(feature = "toml")]
mod reload;
