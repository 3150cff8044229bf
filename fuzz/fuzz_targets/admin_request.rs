#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::admin_request::run(data));
