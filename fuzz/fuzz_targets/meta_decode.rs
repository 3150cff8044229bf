#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::meta_decode::run(data));
