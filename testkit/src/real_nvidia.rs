//! The real NVIDIA userspace that `scripts/nvidia-userspace` unpacks into a cache directory:
//! Debian's driver libraries of two branches, NVIDIA's cudart of three majors, ptxas of two,
//! the CUDA 13.5 fat-binary tools and cuRAND. They load and answer without a GPU, so tests hold
//! the runner and the fakes to them.

use std::path::{Path, PathBuf};

/// Where `scripts/nvidia-userspace` puts the libraries: `$CUDA_SANDBOX_NVIDIA_CACHE`, else
/// `~/.cache/cuda-sandbox/nvidia`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CUDA_SANDBOX_NVIDIA_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/cuda-sandbox/nvidia")
}

/// A driver branch in the cache (Debian's packages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// `libcuda1` etc.: 535.x, CUDA 12.2.
    R535,
    /// `libnvidia-tesla-470-cuda1` etc.: 470.x, CUDA 11.4.
    R470,
}

impl Branch {
    /// Every branch the cache holds.
    pub const ALL: [Branch; 2] = [Branch::R535, Branch::R470];

    /// The cache subdirectory.
    pub fn dir_name(self) -> &'static str {
        match self {
            Branch::R535 => "driver-535",
            Branch::R470 => "driver-470",
        }
    }

    /// `cuDriverGetVersion` of this branch (the branch table in docs/architecture.md).
    pub fn cuda_version(self) -> i32 {
        match self {
            Branch::R535 => 12020,
            Branch::R470 => 11040,
        }
    }
}

/// A CUDA runtime in the cache (NVIDIA's wheels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cudart {
    /// `nvidia-cuda-runtime-cu11` 11.8.89: `libcudart.so.11.0`.
    V11_8,
    /// `nvidia-cuda-runtime-cu12` 12.9.79: `libcudart.so.12`.
    V12_9,
    /// `nvidia-cuda-runtime` 13.0.96: `libcudart.so.13`.
    V13_0,
}

impl Cudart {
    /// Every runtime the cache holds.
    pub const ALL: [Cudart; 3] = [Cudart::V11_8, Cudart::V12_9, Cudart::V13_0];

    /// The cache subdirectory.
    pub fn dir_name(self) -> &'static str {
        match self {
            Cudart::V11_8 => "cudart-11.8",
            Cudart::V12_9 => "cudart-12.9",
            Cudart::V13_0 => "cudart-13.0",
        }
    }

    /// The shared library's file name (its SONAME).
    pub fn file_name(self) -> &'static str {
        match self {
            Cudart::V11_8 => "libcudart.so.11.0",
            Cudart::V12_9 => "libcudart.so.12",
            Cudart::V13_0 => "libcudart.so.13",
        }
    }

    /// `cudaRuntimeGetVersion`.
    pub fn cuda_version(self) -> i32 {
        match self {
            Cudart::V11_8 => 11080,
            Cudart::V12_9 => 12090,
            Cudart::V13_0 => 13000,
        }
    }
}

/// The unpacked cache, once checked to be complete.
#[derive(Debug, Clone)]
pub struct RealNvidia {
    dir: PathBuf,
}

impl RealNvidia {
    /// The cache if `scripts/nvidia-userspace` has filled it. Under `CI=true` a missing cache
    /// panics (these tests must run in CI); elsewhere it prints why `test` is skipped.
    pub fn find(test: &str) -> Option<RealNvidia> {
        let dir = cache_dir();
        if dir.join("READY").is_file() {
            return Some(RealNvidia { dir });
        }
        let why = format!(
            "the real NVIDIA userspace is not in {} (run scripts/nvidia-userspace)",
            dir.display()
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test} needs the real NVIDIA libraries and must run in CI: {why}");
        }
        eprintln!("SKIPPED {test}: {why}");
        None
    }

    /// Whether `path` (a file the cache should hold) is there. A cache filled by an older
    /// `scripts/nvidia-userspace` lacks the newer files: under `CI=true` that panics, elsewhere
    /// it prints why `test` is skipped.
    pub fn has(&self, test: &str, path: &Path) -> bool {
        if path.exists() {
            return true;
        }
        let why = format!(
            "{} is not in the cache (rerun scripts/nvidia-userspace: it fetches it)",
            path.display()
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test} needs it and must run in CI: {why}");
        }
        eprintln!("SKIPPED {test}: {why}");
        false
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding a branch's `libcuda.so.1`, `libnvidia-ml.so.1` and
    /// `libnvidia-ptxjitcompiler.so.1`.
    pub fn driver_dir(&self, branch: Branch) -> PathBuf {
        self.dir.join(branch.dir_name())
    }

    /// The real file behind a branch's `libcuda.so.1` (`libcuda.so.<driver version>`).
    pub fn libcuda_file(&self, branch: Branch) -> PathBuf {
        std::fs::canonicalize(self.driver_dir(branch).join("libcuda.so.1"))
            .expect("libcuda.so.1 in the real NVIDIA cache")
    }

    /// The directory holding a runtime's shared library, static archive and headers.
    pub fn cudart_dir(&self, cudart: Cudart) -> PathBuf {
        self.dir.join(cudart.dir_name())
    }

    /// A runtime's shared library.
    pub fn cudart(&self, cudart: Cudart) -> PathBuf {
        self.cudart_dir(cudart).join(cudart.file_name())
    }

    /// Every ptxas release in the cache, oldest first, with its release (`"12.8"`): the
    /// `ptxas-X.Y` directories and the 13.5 tools'. `scripts/nvidia-userspace` fetches those
    /// that bracket each architecture's first release (11.7 to 13.5).
    pub fn ptxas_releases(&self) -> Vec<(String, PathBuf)> {
        let mut found: Vec<(Vec<u32>, String, PathBuf)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let release = name.strip_prefix("ptxas-")?.to_owned();
                let key = release
                    .split('.')
                    .map(|p| p.parse().ok())
                    .collect::<Option<_>>()?;
                Some((key, release, e.path().join("ptxas")))
            })
            .collect();
        found.push((vec![13, 5], "13.5".into(), self.ptxas_13_5()));
        found.sort();
        found.into_iter().map(|(_, r, p)| (r, p)).collect()
    }

    /// ptxas of one release (`"11.8"`), when the cache has it.
    pub fn ptxas_release(&self, release: &str) -> Option<PathBuf> {
        self.ptxas_releases()
            .into_iter()
            .find(|(r, _)| r == release)
            .map(|(_, p)| p)
    }

    /// A file of the vendor corpus (`corpus/<wheel>/<file>`, e.g. `("cufft-11.4.1",
    /// "libcufft.so.11")`): NVIDIA's libraries as their PyPI wheels ship them.
    pub fn corpus(&self, wheel: &str, file: &str) -> PathBuf {
        self.dir.join("corpus").join(wheel).join(file)
    }

    /// JAX's CUDA plugin wheels 0.10.2 (`wheels/`), whole, as pip downloads them: `12` or `13`.
    pub fn jax_plugin_wheel(&self, cuda_major: u32) -> PathBuf {
        self.dir.join("wheels").join(format!(
            "jax_cuda{cuda_major}_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl"
        ))
    }

    /// The CUDA releases whose stub libcuda the cache holds ([`RealNvidia::stub_libcuda`]).
    pub const STUB_LIBCUDA_RELEASES: [&'static str; 2] = ["11.8", "12.4"];

    /// NVIDIA's link-time stub libcuda of a CUDA release (`stubs/libcuda.so` of Debian's
    /// `nvidia-cuda-dev`; one of [`RealNvidia::STUB_LIBCUDA_RELEASES`]).
    pub fn stub_libcuda(&self, release: &str) -> PathBuf {
        self.dir
            .join(format!("stub-libcuda-{release}"))
            .join("libcuda.so")
    }

    /// ptxas of a CUDA major (12 or 13).
    pub fn ptxas(&self, major: u32) -> PathBuf {
        self.dir.join(match major {
            12 => "ptxas-12.9/ptxas",
            13 => "ptxas-13.0/ptxas",
            other => panic!("no ptxas {other} in the cache"),
        })
    }

    /// The directory of NVIDIA's CUDA 13.5 command-line tools: `ptxas`, `fatbinary`, `nvlink`
    /// and `cuobjdump`.
    pub fn tools_dir(&self) -> PathBuf {
        self.dir.join("tools-13.5")
    }

    /// `cuobjdump` 13.5, the reference lister of the fat binaries in a file.
    pub fn cuobjdump(&self) -> PathBuf {
        self.tools_dir().join("cuobjdump")
    }

    /// `fatbinary` 13.5, which packs cubins and PTX into fat binaries.
    pub fn fatbinary(&self) -> PathBuf {
        self.tools_dir().join("fatbinary")
    }

    /// `ptxas` 13.5 (beside `fatbinary`; [`RealNvidia::ptxas`] has the 12.9 and 13.0 ones).
    pub fn ptxas_13_5(&self) -> PathBuf {
        self.tools_dir().join("ptxas")
    }

    /// NVIDIA's cuRAND 10.4 (`libcurand.so.10`, 104 MB): a real library whose `.nv_fatbin`
    /// holds many fat-binary containers.
    pub fn curand(&self) -> PathBuf {
        self.dir.join("curand-10.4/libcurand.so.10")
    }

    /// A runtime's `libcudadevrt.a`, whose archive member carries a relocatable fat binary
    /// (`__nv_relfatbin`). Only 12.9 and 13.0 have one in the cache; 11.8 panics.
    pub fn cudadevrt(&self, cudart: Cudart) -> PathBuf {
        assert!(
            cudart != Cudart::V11_8,
            "no libcudadevrt.a for cudart 11.8 in the cache"
        );
        self.cudart_dir(cudart).join("libcudadevrt.a")
    }
}
