//! Memory and time of the hook on a 100 MiB `.drv` (hostile or just huge): one process per
//! case, peak RSS from the kernel's accounting of waited-for children.
//!
//! `cargo bench -p cuda-sandbox-hook --bench large_drv` prints, for an untagged and a tagged
//! 100 MiB derivation (one env value full of escapes): wall time and peak RSS. The hook reads
//! the file once and parses it in place, so the peak stays near the file size plus the one
//! escaped value it must copy.

use nix::sys::resource::{getrusage, UsageWho};
use std::process::Command;
use std::time::Instant;

const HOOK: &str = env!("CARGO_BIN_EXE_cuda-sandbox-hook");
const SIZE: usize = 100 << 20;

fn drv(features: &str) -> Vec<u8> {
    let chunk = "line one\\nline \\\"two\\\"\\ttabbed \\\\ backslash ";
    let mut value = String::with_capacity(SIZE + chunk.len());
    while value.len() < SIZE {
        value.push_str(chunk);
    }
    format!(
        r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("big","{value}"),("out","/nix/store/x-big"),("requiredSystemFeatures","{features}")])"#
    )
    .into_bytes()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("large_drv: run with `cargo bench -p cuda-sandbox-hook --bench large_drv`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "runtime_dir = \"{}\"\n[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n",
            dir.path().join("run").display()
        ),
    )
    .unwrap();
    println!("hook on a 100 MiB .drv (peak RSS is the largest child so far)");
    for (name, features) in [("untagged", "big-parallel"), ("tagged", "cuda")] {
        let path = dir.path().join(format!("{name}.drv"));
        let bytes = drv(features);
        std::fs::write(&path, &bytes).unwrap();
        let start = Instant::now();
        let out = Command::new(HOOK)
            .arg(&path)
            .arg(dir.path().join("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap();
        let wall = start.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let peak_kib = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap().max_rss();
        println!(
            "{name:<9} {:.1} MiB .drv: {:>7.1} ms, peak RSS {:.1} MiB",
            bytes.len() as f64 / (1 << 20) as f64,
            wall.as_secs_f64() * 1e3,
            peak_kib as f64 / 1024.0
        );
    }
}
