//! `gateway_httproute`: arbitrary bytes (read as UTF-8, invalid sequences replaced)
//! as a file of Gateway API `HTTPRoute`s, imported by
//! `backstop::config::gateway::from_yaml`:
//!
//! - it never panics, whatever the file;
//! - an error is one line, with a short message (the path may be as long as the
//!   file's own field names, the message never carries the file's values);
//! - an unmapped field is one line too, and `strict` refuses exactly the imports
//!   that have one, at the first one's path;
//! - what it imports builds a stack.

use backstop::config::gateway::from_yaml;

/// The longest message an error carries (its path aside).
const MAX_MESSAGE: usize = 200;

pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match from_yaml(&text) {
        Err(err) => {
            super::one_line(&err);
            assert!(
                err.message().len() <= MAX_MESSAGE,
                "a long message: {:?}",
                err.message()
            );
        }
        Ok(imported) => {
            for field in imported.unmapped() {
                assert!(!field.to_string().contains('\n'), "{field:?}");
            }
            let first = imported.unmapped().first().map(|f| f.path().to_owned());
            match (imported.clone().strict(), first) {
                (Ok(_), None) => {}
                (Err(err), Some(path)) => assert_eq!(err.path(), path),
                (strict, first) => panic!("strict {strict:?} with first unmapped {first:?}"),
            }
            let config = imported.lenient();
            if let Err(e) = super::build(config) {
                panic!("an import that does not build: {e}");
            }
        }
    }
}
