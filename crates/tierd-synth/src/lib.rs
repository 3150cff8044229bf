//! Synthetic spike workloads (being written, issue 2).
