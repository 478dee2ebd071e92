#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osurender_fuzz::webhook(data));
