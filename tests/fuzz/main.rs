//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the same
//! checks the cargo-fuzz targets run (`fuzz/checks/`), on the stable toolchain, so a
//! regression a fuzzer once found fails a plain `cargo test`.

#[path = "../../fuzz/checks/mod.rs"]
mod checks;

use std::path::PathBuf;

/// Every file of a target's corpus, run through its check; at least `min` of them.
fn replay(target: &str, check: fn(&[u8]), min: usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "{target}: {} seeds, want {min}",
        files.len()
    );
    for path in files {
        let data = std::fs::read(&path).expect("a readable seed");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            eprintln!("{target}: seed {name} failed");
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn retry_after_corpus() {
    replay("retry_after", checks::retry_after::check, 10);
}

#[test]
fn replay_body_corpus() {
    replay("replay_body", checks::replay_body::check, 10);
}

#[test]
fn head_copy_corpus() {
    replay("head_copy", checks::head_copy::check, 10);
}

#[cfg(feature = "yaml")]
#[test]
fn gateway_httproute_corpus() {
    replay("gateway_httproute", checks::gateway_httproute::check, 10);
}

#[cfg(all(feature = "toml", feature = "json", feature = "yaml"))]
#[test]
fn config_file_corpus() {
    replay("config_file", checks::config_file::check, 10);
}

#[cfg(all(feature = "grpc", feature = "json"))]
#[test]
fn grpc_service_config_corpus() {
    replay(
        "grpc_service_config",
        checks::grpc_service_config::check,
        10,
    );
}
