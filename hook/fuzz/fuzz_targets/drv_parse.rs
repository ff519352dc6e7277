//! Fuzzes the `.drv` readers: any bytes must give a derivation or an error with an offset inside
//! the input, never a panic or a hang; the hook's lean reader (which streams `__json` through
//! its unescaper) must agree with the full parser; the JSON derivation reader likewise never
//! panics. Seeds include long runs without escapes (the streaming reader was once
//! quadratic on them).
#![no_main]

use cuda_sandbox_hook::drv::{features_from_json, gpus_attr_from_json, Derivation, DrvEnv};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let full = Derivation::parse(data);
    let lean = DrvEnv::parse(data);
    match (&full, &lean) {
        (Ok(drv), Ok(env)) => {
            let a = drv.required_features().map(|f| f.features);
            let b = env.required_features().map(|f| f.features);
            match (a, b) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (a, b) => assert_eq!(a.is_ok(), b.is_ok()),
            }
            assert_eq!(drv.gpus_attr(), env.gpus_attr());
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            assert!(
                a.offset <= data.len(),
                "offset {} past {}",
                a.offset,
                data.len()
            );
        }
        _ => panic!("the readers disagree: {full:?} vs {lean:?}"),
    }
    let _ = features_from_json(data);
    let _ = gpus_attr_from_json(data);
});
