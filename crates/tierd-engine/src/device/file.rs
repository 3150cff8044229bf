//! TODO(device helper): see mod.rs
