//! Workload statistics and analysis (being written, issue 2).
