//! Fuzzes the fat-binary reader (`elfkit::fatbin::read_gpu_code`): any bytes (a bare fat
//! binary, an ELF file, an `ar` archive, anything else) must give the containers or an error,
//! never a panic or a hang; every container and entry it reports lies inside the input, and
//! there are no more entries than 64-byte entry headers the input could hold.
#![no_main]

use cuda_sandbox_elfkit::fatbin::read_gpu_code;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(code) = read_gpu_code(data) else {
        return;
    };
    let len = data.len() as u64;
    let mut entries = 0;
    for c in &code.containers {
        let end = c.offset.checked_add(c.size);
        assert!(
            end.is_some_and(|e| e <= len),
            "container at {} of {} bytes runs past the input's {len}",
            c.offset,
            c.size
        );
        for e in &c.entries {
            assert!(
                e.offset >= c.offset && e.offset < c.offset + c.size,
                "entry at {} outside its container at {}..{}",
                e.offset,
                c.offset,
                c.offset + c.size
            );
        }
        entries += c.entries.len();
    }
    // Each entry (or part of a concatenated one) has a header of 64 bytes at least.
    assert!(
        entries <= data.len() / 64,
        "{entries} entries from {len} bytes"
    );
});
