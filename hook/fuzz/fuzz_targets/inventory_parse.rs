//! Fuzzes the GPU inventory reader the hook uses (`manifest::inventory`): any bytes give an
//! inventory that writes back to itself, or a one-line error; never a panic.
#![no_main]

use cuda_sandbox_manifest::inventory::Inventory;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Inventory::parse(data) {
        Ok(inventory) => {
            let again = Inventory::parse(inventory.to_json().as_bytes());
            assert_eq!(again.as_ref(), Ok(&inventory), "does not read back as written");
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
});
