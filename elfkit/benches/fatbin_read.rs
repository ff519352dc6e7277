//! Wall time of the fat-binary reader against NVIDIA's `cuobjdump` 13.5 listing the same file.
//!
//! `cargo bench -p cuda-sandbox-elfkit --bench fatbin_read` prints, with the page cache warm
//! (each file is read once, and each lister run once, before timing):
//!
//! - NVIDIA's `libcurand.so.10` (104 MB): the median of [`RUNS`] `read_file` calls, MB/s (file
//!   size / time), the median of [`TOOL_RUNS`] `cuobjdump --list-elf --list-ptx FILE` runs
//!   (stdout to /dev/null) and the ratio cuobjdump / ours (the goal: at least 20×);
//!   whether both list the same number of entries; and where our time goes (mapping and
//!   parsing the ELF, walking `.nv_fatbin`, the magic scan over the other data sections and
//!   the page faults it takes).
//! - A bare `.fatbin` file of at least 1 GiB: the fat binaries `testkit::fatbin_fixtures`
//!   builds with NVIDIA's tools, back to back (8-aligned, zero padded), in a temporary
//!   directory on the same disk; the same figures, cuobjdump run [`BIG_TOOL_RUNS`] times.
//!   `FATBIN_BENCH_SMALL=1` skips it (CI runs the cuRAND part only).
//!
//! Figures, not assertions. Without the real NVIDIA userspace (`scripts/nvidia-userspace`) it
//! says why and exits 0, or 1 under `CI=true`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cuda_sandbox_elfkit::fatbin::sections::{FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_SECTION};
use cuda_sandbox_elfkit::fatbin::{parse, read_gpu_code, EntryKind, GpuCode, Origin};
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_testkit::fatbin_fixtures::{self, FixtureKind};
use cuda_sandbox_testkit::real_nvidia::{cache_dir, RealNvidia};
use object::{Object, ObjectSection, SectionKind};

/// The containers of the file at `path`, read from a mapping of it (as the runner reads the
/// files it lints).
fn read_file(path: &Path) -> Result<GpuCode, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let map = Mapped::of(&file).map_err(|e| e.to_string())?;
    read_gpu_code(map.bytes()).map_err(|e| e.to_string())
}

/// `read_file` runs per file.
const RUNS: usize = 31;
/// `cuobjdump` runs on cuRAND.
const TOOL_RUNS: usize = 7;
/// `cuobjdump` runs on the 1 GiB file.
const BIG_TOOL_RUNS: usize = 3;
/// The big file's least size.
const BIG: u64 = 1 << 30;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// The median of `runs` timed calls of `f`, after one untimed call.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    std::hint::black_box(f());
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(f());
                start.elapsed()
            })
            .collect(),
    )
}

/// `cuobjdump --list-elf --list-ptx FILE`, stdout to /dev/null.
fn cuobjdump_timed(real: &RealNvidia, path: &Path, runs: usize) -> Duration {
    timed(runs, || {
        let status = Command::new(real.cuobjdump())
            .args(["--list-elf", "--list-ptx"])
            .arg(path)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cuobjdump on {}: {status}",
            path.display()
        );
    })
}

/// How many `ELF file` and `PTX file` lines `cuobjdump --list-elf --list-ptx FILE` prints.
fn cuobjdump_count(real: &RealNvidia, path: &Path) -> usize {
    let out = Command::new(real.cuobjdump())
        .args(["--list-elf", "--list-ptx"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "cuobjdump on {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("ELF file") || l.starts_with("PTX file"))
        .count()
}

/// The SASS and PTX entries of the containers cuobjdump lists.
fn our_count(code: &GpuCode) -> usize {
    (code.containers.iter())
        .filter(|c| !matches!(c.origin, Origin::Scan(_)))
        .flat_map(|c| &c.entries)
        .filter(|e| matches!(e.kind, EntryKind::Sass | EntryKind::Ptx))
        .count()
}

/// Reads the whole file once, so that its pages are in the page cache.
fn warm(path: &Path) {
    std::hint::black_box(std::fs::read(path).unwrap());
}

/// Times ours and cuobjdump on `path`, prints the figures; returns the ratio.
fn compare(real: &RealNvidia, name: &str, path: &Path, tool_runs: usize) -> f64 {
    let size = std::fs::metadata(path).unwrap().len();
    warm(path);
    let code = read_file(path).unwrap();
    let ours = timed(RUNS, || read_file(path).unwrap());
    let theirs = cuobjdump_timed(real, path, tool_runs);
    let (n_ours, n_theirs) = (our_count(&code), cuobjdump_count(real, path));
    let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
    println!(
        "{name}: {:.1} MB, {} containers",
        size as f64 / 1e6,
        code.containers.len()
    );
    println!(
        "  ours      read_file           median of {RUNS:>2}: {:>10}  {:>9.0} MB/s",
        ms(ours),
        mb_per_s(size, ours)
    );
    println!(
        "  cuobjdump --list-elf --list-ptx median of {tool_runs:>2}: {:>10}  {:>9.0} MB/s",
        ms(theirs),
        mb_per_s(size, theirs)
    );
    println!(
        "  cuobjdump / ours = {ratio:.1}x (goal: at least 20x: {})",
        if ratio >= 20.0 { "met" } else { "NOT met" }
    );
    println!(
        "  entries: ours {n_ours} (SASS + PTX of the containers cuobjdump lists), cuobjdump \
         {n_theirs} lines: {}",
        if n_ours == n_theirs {
            "the same"
        } else {
            "DIFFERENT"
        }
    );
    ratio
}

/// Where `read_file`'s time goes on an ELF file, each part timed alone (medians).
fn parts(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    let map_only = timed(RUNS, || {
        cuda_sandbox_elfkit::map::Mapped::of(&file).unwrap()
    });
    let map = cuda_sandbox_elfkit::map::Mapped::of(&file).unwrap();
    let data = map.bytes();
    let parse_elf = timed(RUNS, || {
        let f = object::File::parse(data).unwrap();
        f.sections().count()
    });
    let elf = object::File::parse(data).unwrap();
    let mut walked = 0u64;
    let mut scanned = 0u64;
    let mut walk = Duration::ZERO;
    let mut scan = Duration::ZERO;
    let magic = parse::CONTAINER_MAGIC.to_le_bytes();
    let finder = memchr::memmem::Finder::new(&magic);
    let mut hits = 0;
    for s in elf.sections() {
        let Some((start, size)) = s.file_range() else {
            continue;
        };
        let bytes = &data[start as usize..(start + size) as usize];
        let name = s.name().unwrap_or_default();
        if name == FATBIN_SECTION || name == RELFATBIN_SECTION {
            walked += size;
            walk += timed(RUNS, || parse::containers_in(bytes, start).unwrap().len());
        } else if name != WRAPPER_SECTION
            && matches!(
                s.kind(),
                SectionKind::Data | SectionKind::ReadOnlyData | SectionKind::ReadOnlyDataWithRel
            )
        {
            scanned += size;
            hits += finder.find_iter(bytes).count();
            scan += timed(RUNS, || finder.find_iter(bytes).count());
        }
    }
    // A fresh mapping per run: the first pass over it pays the page faults.
    let scan_cold = timed(RUNS, || {
        let m = cuda_sandbox_elfkit::map::Mapped::of(&file).unwrap();
        let b = m.bytes();
        elf.sections()
            .filter(|s| {
                s.name().unwrap_or_default() != FATBIN_SECTION
                    && s.name().unwrap_or_default() != WRAPPER_SECTION
                    && matches!(
                        s.kind(),
                        SectionKind::Data
                            | SectionKind::ReadOnlyData
                            | SectionKind::ReadOnlyDataWithRel
                    )
            })
            .filter_map(|s| s.file_range())
            .map(|(start, size)| {
                finder
                    .find_iter(&b[start as usize..(start + size) as usize])
                    .count()
            })
            .sum::<usize>()
    });
    let total = timed(RUNS, || read_file(path).unwrap());
    println!(
        "  where read_file's {} goes (each part alone, medians):",
        ms(total)
    );
    println!(
        "    open + mmap + munmap                          {:>10}",
        ms(map_only)
    );
    println!(
        "    object::File::parse + sections                {:>10}",
        ms(parse_elf)
    );
    println!(
        "    walk .nv_fatbin ({:.1} MB, mapping reused)       {:>10}",
        walked as f64 / 1e6,
        ms(walk)
    );
    println!(
        "    memmem scan of .rodata/.data etc. ({:.1} MB, {hits} magic hits), mapping reused: {} \
         ({:.0} MB/s)",
        scanned as f64 / 1e6,
        ms(scan),
        mb_per_s(scanned, scan)
    );
    println!(
        "    the same scan on a fresh mapping (page faults included): {} ({:.0} MB/s)",
        ms(scan_cold),
        mb_per_s(scanned, scan_cold)
    );
}

/// Writes the fixtures' fat binaries back to back, 8-aligned and zero padded, until the file
/// holds at least [`BIG`] bytes; returns its path.
fn big_fatbin(real: &RealNvidia, dir: &Path) -> PathBuf {
    let fixtures = fatbin_fixtures::build(real, &dir.join("fixtures"));
    let blobs: Vec<Vec<u8>> = fixtures
        .iter()
        .filter(|f| f.kind == FixtureKind::Fatbin)
        .map(|f| {
            let mut b = std::fs::read(&f.path).unwrap();
            b.resize(b.len().next_multiple_of(8), 0);
            b
        })
        .collect();
    let path = dir.join("big.fatbin");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
    let mut len = 0u64;
    'fill: loop {
        for b in &blobs {
            out.write_all(b).unwrap();
            len += b.len() as u64;
            if len >= BIG {
                break 'fill;
            }
        }
    }
    out.flush().unwrap();
    println!(
        "(big.fatbin: {} fat binaries of the fixtures, {:.1} kB on average, repeated)",
        blobs.len(),
        blobs.iter().map(Vec::len).sum::<usize>() as f64 / blobs.len() as f64 / 1e3
    );
    path
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("fatbin_read: run with `cargo bench -p cuda-sandbox-elfkit --bench fatbin_read`");
        return;
    }
    if !cache_dir().join("READY").is_file() {
        println!(
            "fatbin_read: SKIPPED: the real NVIDIA userspace is not in {} (run \
             scripts/nvidia-userspace)",
            cache_dir().display()
        );
        std::process::exit(if std::env::var("CI").as_deref() == Ok("true") {
            1
        } else {
            0
        });
    }
    let real = RealNvidia::find("fatbin_read").expect("READY was checked");
    compare(&real, "libcurand.so.10", &real.curand(), TOOL_RUNS);
    parts(&real.curand());
    if std::env::var("FATBIN_BENCH_SMALL").is_ok_and(|v| !v.is_empty() && v != "0") {
        println!("big file: skipped (FATBIN_BENCH_SMALL)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let big = big_fatbin(&real, dir.path());
    compare(&real, "big.fatbin", &big, BIG_TOOL_RUNS);
}
