//! PLACEHOLDER: being written (issue 3).
