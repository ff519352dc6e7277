//! Fuzzes the configuration reader: any text must give a valid config or a one-line error.
#![no_main]

use cuda_sandbox_hook::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = Config::parse(text, "fuzz") {
            assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
        }
    }
});
