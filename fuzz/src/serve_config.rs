//! The `tierd serve` configuration parser, `Config::parse` (TOML, then the
//! semantic checks), on any UTF-8 text; invalid UTF-8 is decoded lossily so
//! no input is wasted.
//!
//! Property beyond "no panic": a configuration that parses answers its
//! derived queries (listen targets, metadata directory) without panicking,
//! and every error names the file.

use std::path::Path;

use tierd_engine::config::Config;

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Config::parse(&text, "fuzz.toml", Path::new("/fuzz-base")) {
        Ok(config) => {
            let _ = config.listen_targets();
            let _ = config.metadata_dir();
            drop(format!("{config:?}"));
        }
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.starts_with("fuzz.toml"),
                "error without the file: {message}"
            );
        }
    }
}
