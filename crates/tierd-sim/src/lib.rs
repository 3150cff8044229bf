//! Simulator (being written, issue 3).
