//! PLACEHOLDER: the memory model is being written (issue 3).
