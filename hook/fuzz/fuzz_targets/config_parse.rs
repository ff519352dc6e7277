//! Fuzzes the configuration reader: any text must give a valid config or a one-line error, and
//! the text pre-check the hook uses to skip parsing must never miss a feature a rule answers.
#![no_main]

use cuda_sandbox_hook::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match Config::parse(text, "fuzz") {
            Ok(config) => {
                for feature in config.rules.iter().flat_map(|r| &r.features) {
                    assert!(
                        Config::text_may_answer(data, &[feature.as_bytes().to_vec()]),
                        "the pre-check misses {feature:?}"
                    );
                }
            }
            Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
        }
    }
});
