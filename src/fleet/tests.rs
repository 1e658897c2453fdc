//! The store's keys.

use super::key_of;

#[test]
fn keys_are_hashes_the_same_in_every_process() {
    assert_eq!(
        key_of("https://example.com:443"),
        key_of("https://example.com:443")
    );
    assert_ne!(key_of("https://a.test"), key_of("https://b.test"));
    assert!(!key_of("https://example.com").contains("example"));
    assert_eq!(key_of(""), "cbf29ce484222325");
}
