//! PLACEHOLDER: the hdd model is being written (issue 3).
