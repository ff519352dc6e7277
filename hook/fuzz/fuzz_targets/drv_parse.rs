//! Fuzzes the `.drv` reader: any bytes must give a derivation or an error with an offset inside
//! the input, never a panic or a hang; the JSON derivation reader likewise.
#![no_main]

use cuda_sandbox_hook::drv::{features_from_json, Derivation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Derivation::parse(data) {
        Ok(drv) => {
            let _ = drv.required_features();
        }
        Err(e) => assert!(e.offset <= data.len(), "offset {} past {}", e.offset, data.len()),
    }
    let _ = features_from_json(data);
});
