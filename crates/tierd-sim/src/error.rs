//! Errors of the simulator. Each message names what is wrong (the setting,
//! the file and key, the request) and what is allowed, so a user can fix the
//! input without reading the code.

use tierd_trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A setting is out of range or inconsistent. `key` is the TOML key or
    /// command-line option (`tier[1].capacity`, `segment_bytes`, `--speed`).
    #[error("{source_name}: {key}: {message}")]
    Config {
        /// Where the setting came from: a tier-stack file, a preset name, or
        /// `options` for the simulator's own settings.
        source_name: String,
        key: String,
        message: String,
    },
    /// A tier-stack file that is not valid TOML or has an unknown key.
    #[error("{source_name}: {message}")]
    StackSyntax {
        source_name: String,
        message: String,
    },
    /// The tier stack is neither a preset nor a readable file.
    #[error("tier stack {spec:?}: {message}")]
    StackNotFound { spec: String, message: String },
    /// A request reaches past the end of the simulated volume.
    #[error(
        "request {index} of the trace (offset {offset_bytes}, length {length_bytes} bytes) ends past \
         the {volume_bytes}-byte volume; give the volume size (--volume-bytes) or a home tier large \
         enough for it"
    )]
    BeyondVolume {
        index: u64,
        offset_bytes: u64,
        length_bytes: u64,
        volume_bytes: u64,
    },
    /// The trace holds more than one volume and none was chosen.
    #[error(
        "the trace has more than one volume ({first:?} and {other:?}); choose one (--volume NAME)"
    )]
    SeveralVolumes { first: String, other: String },
    /// The strategy name is neither a placement policy nor a cache.
    #[error(
        "unknown policy {name:?}; available: none, otf-ast, atsmf, fifo, lru, arc, s3fifo, adaptive"
    )]
    UnknownPolicy { name: String },
    /// A device preset could not be built for a tier.
    #[error("tier {tier:?} ({device}): {message}")]
    Device {
        tier: String,
        device: String,
        message: String,
    },
    #[error(transparent)]
    Trace(#[from] TraceError),
}

impl SimError {
    /// A [`SimError::Config`] for one of the simulator's own settings.
    pub fn option(key: &str, message: impl Into<String>) -> SimError {
        SimError::Config {
            source_name: "options".to_string(),
            key: key.to_string(),
            message: message.into(),
        }
    }
}
