#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| osurender_fuzz::client_ip(data));
