//! PLACEHOLDER: the smr model is being written (issue 3).
