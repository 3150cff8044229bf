//! Workload statistics and the papers' hot-spot analysis of block traces.
//!
//! - [`stats`]: plain statistics (counts, bytes, working set, size mix, iops).
//! - [`analyze`]: OTF-AST's top-segment shares and spikes, ATSMF's IO
//!   concentrations, their durations and prediction table, a FlashCache-like
//!   FIFO hit ratio, and the per-segment per-period IO matrix.
//! - [`heatmap`]: that matrix as a PNG or SVG heat map.
//!
//! Every definition is written down in `docs/analysis.md`; code and page
//! change together. Everything here is pure computation over a
//! [`tierd_trace::TraceReader`]: no printing, no clock, no randomness.

pub mod analyze;
pub mod heatmap;
pub mod matrix;
pub mod stats;
pub mod touch;

pub use analyze::{analyze, render_text, Analysis, AnalyzeOptions};
pub use stats::{compute, Stats, StatsOptions};
