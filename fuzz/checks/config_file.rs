//! `config_file`: arbitrary bytes as a stack's file in backstop's own format; the
//! first byte picks TOML, JSON or YAML, the rest (read as UTF-8, invalid
//! sequences replaced) is the file:
//!
//! - reading it never panics, whatever the file;
//! - an error is one line, with a message that is not empty;
//! - a file that reads writes back (`to_toml`) to a file that reads to the same
//!   settings: written again, the text is the same;
//! - building the stack it gives never panics.

use backstop::config::{from_json, from_toml, from_yaml, to_toml};

pub fn check(data: &[u8]) {
    let (format, rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let text = String::from_utf8_lossy(rest);
    let read = match format % 3 {
        0 => from_toml(&text),
        1 => from_json(&text),
        _ => from_yaml(&text),
    };
    let config = match read {
        Err(err) => {
            super::one_line(&err);
            return;
        }
        Ok(config) => config,
    };
    let written = to_toml(&config).expect("a file's settings write back");
    let again = from_toml(&written).expect("written settings read back");
    assert_eq!(to_toml(&again).expect("and write again"), written);
    let _ = super::build(config);
}
