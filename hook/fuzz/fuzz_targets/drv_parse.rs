//! Fuzzes the `.drv` readers: any bytes must give a derivation or an error with an offset inside
//! the input, never a panic or a hang; the hook's lean reader (which streams `__json` through
//! its unescaper and keeps only the keys the hook decides on) must agree with the full parser,
//! a repeated key included; the JSON derivation reader likewise never panics. Seeds include long runs without escapes (the streaming reader was once
//! quadratic on them).
#![no_main]

use cuda_sandbox_hook::drv::{Derivation, DrvEnv, DrvError, JsonDerivation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let full = Derivation::parse(data);
    let lean = DrvEnv::parse(data);
    match (&full, &lean) {
        (Ok(drv), Ok(env)) => match (drv.attrs(), env.attrs()) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            // The same kind of error (a JSON error's words may differ: one reads a slice, the
            // other a stream), and the same repeated key.
            (Err(a), Err(b)) => {
                assert_eq!(std::mem::discriminant(&a), std::mem::discriminant(&b));
                if let DrvError::Repeated { .. } = a {
                    assert_eq!(a, b);
                }
            }
            (a, b) => panic!("the readers disagree: {a:?} vs {b:?}"),
        },
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            let offset = a.offset().expect("a parse error has an offset");
            assert!(offset <= data.len(), "offset {offset} past {}", data.len());
        }
        _ => panic!("the readers disagree: {full:?} vs {lean:?}"),
    }
    if let Ok(d) = JsonDerivation::parse(data) {
        let _ = d.attrs();
    }
});
