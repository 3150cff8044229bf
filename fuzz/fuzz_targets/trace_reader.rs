#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::trace_reader::run(data));
