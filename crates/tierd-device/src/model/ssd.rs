//! PLACEHOLDER: the ssd model is being written (issue 3).
