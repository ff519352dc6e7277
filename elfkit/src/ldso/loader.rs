//! Which `ld.so`: the facts of one dynamic loader the search depends on ([`Loader`]), asked
//! of the loader itself ([`Loader::ask`]) or taken from what its build is known to do
//! ([`Loader::debian`], [`Loader::nixpkgs`]).

use super::cpu;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The ELF class, byte order and machine a loader accepts (`open_verify`, `elf_machine_matches_host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHost {
    /// `ELFCLASS64` (else 32).
    pub class64: bool,
    /// Little-endian (`ELFDATA2LSB`).
    pub little_endian: bool,
    /// `e_machine` (`EM_X86_64` = 62, `EM_AARCH64` = 183).
    pub machine: u16,
}

impl ElfHost {
    /// This process's own class, byte order and machine.
    pub fn native() -> ElfHost {
        let machine = match std::env::consts::ARCH {
            "x86_64" => 62,
            "x86" => 3,
            "aarch64" => 183,
            "arm" => 40,
            "powerpc64" | "powerpc" => 21,
            "riscv64" => 243,
            _ => 0,
        };
        ElfHost {
            class64: cfg!(target_pointer_width = "64"),
            little_endian: cfg!(target_endian = "little"),
            machine,
        }
    }

    /// The path programs for this machine name as their interpreter (`PT_INTERP`) outside
    /// Nix: `/lib64/ld-linux-x86-64.so.2`, `/lib/ld-linux-aarch64.so.1`.
    pub fn standard_interpreter(self) -> Option<&'static Path> {
        self.x86_64_or_aarch64("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")
            .map(Path::new)
    }

    /// `x86_64` on a 64-bit x86 machine, `aarch64` on a 64-bit Arm one, none on others: what
    /// this model knows of each machine.
    pub(crate) fn x86_64_or_aarch64<T>(self, x86_64: T, aarch64: T) -> Option<T> {
        match (self.machine, self.class64) {
            (62, true) => Some(x86_64),
            (183, true) => Some(aarch64),
            _ => None,
        }
    }
}

/// One dynamic loader's search: everything beside the objects and the environment that
/// decides which file a name gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loader {
    /// The loader's path (an executable's `PT_INTERP`): the process holds it under this name
    /// and its soname.
    pub interpreter: PathBuf,
    /// The default directories ("system search path"), in order, without trailing slashes.
    pub system_dirs: Vec<PathBuf>,
    /// The cache it reads between `DT_RUNPATH` and the default directories; a missing file is
    /// no cache. `None`: it reads none.
    pub cache: Option<PathBuf>,
    /// The glibc-hwcaps subdirectories it searches (`x86-64-v3`), best first: each directory
    /// is tried as `DIR/glibc-hwcaps/NAME` first, and the cache's entries of these
    /// subdirectories win in this order.
    pub glibc_hwcaps: Vec<String>,
    /// The legacy hwcaps subdirectories (glibc 2.33 to 2.36: `tls/haswell/x86_64`, …, in the
    /// order tried), after the glibc-hwcaps ones and before the directory itself.
    pub legacy_subdirs: Vec<String>,
    /// What `$LIB` stands for (`lib` upstream and in Nixpkgs, `lib/x86_64-linux-gnu` in
    /// Debian).
    pub lib: String,
    /// What `$PLATFORM` stands for (`haswell`, `x86_64`); entries naming it are dropped when
    /// `None`.
    pub platform: Option<String>,
    /// The ELF files it accepts.
    pub elf: ElfHost,
    /// Its glibc version, when it said (`2.36`).
    pub version: Option<String>,
}

impl Loader {
    /// Debian's glibc (bookworm, trixie, sid; Ubuntu alike): the multiarch default
    /// directories `/lib/TRIPLET`, `/usr/lib/TRIPLET`, `/lib`, `/usr/lib`, the cache
    /// `/etc/ld.so.cache`, `$LIB` = `lib/TRIPLET`, and this CPU's glibc-hwcaps subdirectories
    /// and `$PLATFORM` ([`cpu`]). Legacy hwcaps subdirectories, which Debian's glibc 2.36
    /// still searches, are left out (2.37 dropped them). The differential test holds this to
    /// the real loader's own account.
    pub fn debian(interpreter: PathBuf) -> Loader {
        // The Debian multiarch triplet (`x86_64-linux-gnu`), where known.
        let triplet = ElfHost::native().x86_64_or_aarch64("x86_64-linux-gnu", "aarch64-linux-gnu");
        let mut system_dirs = Vec::new();
        if let Some(t) = triplet {
            system_dirs.push(Path::new("/lib").join(t));
            system_dirs.push(Path::new("/usr/lib").join(t));
        }
        system_dirs.extend(["/lib".into(), "/usr/lib".into()]);
        let lib = triplet.map_or("lib".into(), |t| format!("lib/{t}"));
        Loader::of(interpreter, system_dirs, "/etc/ld.so.cache".into(), lib)
    }

    /// Nixpkgs' glibc, whose loader is `GLIBC/lib/ld-linux-….so.N` (`interpreter`). Its build
    /// differs from Debian's in what the search reads (`pkgs/development/libraries/glibc/`):
    ///
    /// - `dont-use-system-ld-so-cache.patch` defines `LD_SO_CACHE` as `PREFIX
    ///   "/etc/ld.so.cache"`, with the prefix its own store path, and the build removes that
    ///   file: the cache is `GLIBC/etc/ld.so.cache`, which does not exist, and
    ///   `/etc/ld.so.cache` is never read.
    /// - Configured with `--prefix=GLIBC`, not `/usr`, its `slibdir` and `libdir` are both
    ///   `GLIBC/lib` (glibc's `LIBC_SLIBDIR_RTLDDIR` picks `/lib64` only for `/usr`): that one
    ///   directory is the whole system search path, and `$LIB` (`notdir` of `slibdir`) is
    ///   `lib`.
    /// - `dont-use-system-ld-so-preload.patch` reads `/etc/ld-nix.so.preload` instead of
    ///   `/etc/ld.so.preload` (preloading is not modelled).
    ///
    /// The glibc-hwcaps subdirectories and `$PLATFORM` are this CPU's, as in
    /// [`Loader::debian`].
    pub fn nixpkgs(interpreter: PathBuf) -> Loader {
        // GLIBC: the parent of the interpreter's directory.
        let prefix = interpreter.ancestors().nth(2).unwrap_or(Path::new("/"));
        let (lib, cache) = (prefix.join("lib"), prefix.join("etc/ld.so.cache"));
        Loader::of(interpreter, vec![lib], cache, "lib".into())
    }

    /// A build of glibc for this machine, with this CPU's glibc-hwcaps subdirectories and
    /// `$PLATFORM` ([`cpu`]), no legacy hwcaps subdirectories and no version known.
    fn of(interpreter: PathBuf, system_dirs: Vec<PathBuf>, cache: PathBuf, lib: String) -> Loader {
        Loader {
            interpreter,
            system_dirs,
            cache: Some(cache),
            glibc_hwcaps: cpu::glibc_hwcaps(),
            legacy_subdirs: Vec::new(),
            lib,
            platform: cpu::platform(),
            elf: ElfHost::native(),
            version: None,
        }
    }

    /// The loader that runs `interpreter`, as far as can be known without running it: Nixpkgs'
    /// glibc for one inside `store_dir` whose store path is a glibc's
    /// (`…-glibc-2.42-67/lib/ld-linux-x86-64.so.2`), else Debian's.
    pub fn known(interpreter: &Path, store_dir: &Path) -> Loader {
        let in_glibc = crate::store_path_of(interpreter, store_dir).is_some_and(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains("-glibc-"))
        });
        if in_glibc {
            Loader::nixpkgs(interpreter.to_path_buf())
        } else {
            Loader::debian(interpreter.to_path_buf())
        }
    }

    /// Whether the executable named to this loader (`ld.so PROG`) has the `$ORIGIN` of its
    /// real path, as when the kernel starts it: glibc 2.42 and later (`9b646f5dc9`, BZ
    /// 25263); earlier ones take the path as given. A loader of unknown version is taken to
    /// be a current one.
    pub fn explicit_origin_is_real(&self) -> bool {
        self.version.as_ref().is_none_or(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 42)
        })
    }

    /// The subdirectories tried in each directory of a search, in order, the directory itself
    /// (`""`) last.
    pub fn subdirs(&self) -> Vec<String> {
        self.glibc_hwcaps
            .iter()
            .map(|n| format!("glibc-hwcaps/{n}"))
            .chain(self.legacy_subdirs.iter().cloned())
            .chain([String::new()])
            .collect()
    }

    /// The loader's own account of its search, from the output of `INTERP --help` and
    /// `INTERP --list-diagnostics` (glibc ≥ 2.33): the system search path, the cache (from
    /// "libraries located via"), the glibc-hwcaps subdirectories marked "searched", the legacy
    /// hwcaps subdirectories (glibc ≤ 2.36) as `_dl_important_hwcaps` combines them, and
    /// `dl_dst_lib`, `dl_platform` and `version.version`.
    pub fn from_account(
        interpreter: PathBuf,
        help: &str,
        diagnostics: &str,
    ) -> Result<Loader, NoSystemSearchPath> {
        let mut loader = Loader {
            interpreter,
            system_dirs: Vec::new(),
            cache: None,
            glibc_hwcaps: Vec::new(),
            legacy_subdirs: Vec::new(),
            lib: "lib".into(),
            platform: None,
            elf: ElfHost::native(),
            version: None,
        };
        let mut section = "";
        // The legacy components, in the order a subdirectory names them: tls, the platform,
        // then the hwcaps bits as --help lists them (highest bit first).
        let (mut tls, mut platform, mut bits) = (false, None, Vec::new());
        for line in help.lines() {
            if !line.starts_with(' ') && !line.starts_with('\t') {
                section = line.trim();
                continue;
            }
            let line = line.trim();
            let (name, marks) = line.split_once(" (").unwrap_or((line, ""));
            if section.starts_with("Shared library search path") {
                if let Some(dir) = line.strip_suffix("(system search path)") {
                    loader.system_dirs.push(PathBuf::from(dir.trim_end()));
                } else if let Some(cache) = line
                    .strip_prefix("(libraries located via ")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    loader.cache = Some(PathBuf::from(cache));
                }
            } else if section.starts_with("Subdirectories of glibc-hwcaps directories") {
                if marks.contains("searched") {
                    loader.glibc_hwcaps.push(name.to_string());
                }
            } else if section.starts_with("Legacy HWCAP subdirectories")
                && marks.contains("searched")
            {
                if marks.contains("AT_PLATFORM") {
                    platform = Some(name.to_string());
                } else if name == "tls" {
                    tls = true;
                } else {
                    bits.push(name.to_string());
                }
            }
        }
        if loader.system_dirs.is_empty() {
            return Err(NoSystemSearchPath);
        }
        let tls = tls.then(|| "tls".to_string());
        let parts: Vec<String> = tls.into_iter().chain(platform).chain(bits).collect();
        loader.legacy_subdirs = power_set(&parts); // none without parts
        for (key, value) in diagnostics.lines().filter_map(|l| l.split_once('=')) {
            let value = unquote(value);
            match key {
                "dl_dst_lib" => loader.lib = value,
                "dl_platform" if !value.is_empty() => loader.platform = Some(value),
                "version.version" => loader.version = Some(value),
                _ => {}
            }
        }
        Ok(loader)
    }

    /// Asks `interpreter` (glibc ≥ 2.33) for its account: runs `INTERP --help` and `INTERP
    /// --list-diagnostics` ([`Loader::from_account`]). Only for a loader one would run anyway:
    /// it executes the file.
    pub fn ask(interpreter: &Path) -> Result<Loader, AskError> {
        let run = |arg: &str| -> Result<String, AskError> {
            let out = (Command::new(interpreter).arg(arg).output())
                .map_err(|e| AskError::CannotRun(interpreter.to_path_buf(), e.to_string()))?;
            if !out.status.success() {
                return Err(AskError::Failed(
                    interpreter.to_path_buf(),
                    arg.into(),
                    out.status.to_string(),
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let help = run("--help")?;
        let diagnostics = run("--list-diagnostics")?;
        Loader::from_account(interpreter.to_path_buf(), &help, &diagnostics)
            .map_err(|why| AskError::NoSearchPath(interpreter.to_path_buf(), why))
    }
}

/// Every combination of `parts` as glibc ≤ 2.36 tries them (`_dl_important_hwcaps`): counting
/// down from all of them to none, the first part the most significant, each combination
/// naming its parts in order; the empty one (the directory itself) is left out.
fn power_set(parts: &[String]) -> Vec<String> {
    let n = parts.len();
    (1..1u32 << n)
        .rev()
        .map(|mask| {
            parts
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << (n - 1 - i)) != 0)
                .map(|(_, p)| p.as_str())
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect()
}

/// A `--list-diagnostics` value: `"text"` with `\\`, `\"` and `\ooo` escapes, or a bare word.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_string();
    };
    let mut out = Vec::new();
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 4 <= bytes.len() && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit) => {
                let oct = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("0");
                out.push(u8::from_str_radix(oct, 8).unwrap_or(b'?'));
                i += 4;
            }
            b'\\' if i + 1 < bytes.len() => {
                out.push(bytes[i + 1]);
                i += 2;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `INTERP --help` without the "(system search path)" lines of glibc 2.33 and later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("its --help lists no \"(system search path)\" directories")]
pub struct NoSystemSearchPath;

/// Why a dynamic loader cannot say how it searches. Each names the loader first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// It cannot be run: why `exec` failed.
    #[error("cannot run {loader}: {1}", loader = .0.display())]
    CannotRun(PathBuf, String),
    /// It exits with an error: the option asked and its exit status.
    #[error(
        "{loader} {1} failed ({2}): it is not glibc's ld.so, or older than glibc 2.33",
        loader = .0.display()
    )]
    Failed(PathBuf, String, String),
    /// `--help` lists no system search path.
    #[error("{loader}: {1}", loader = .0.display())]
    NoSearchPath(PathBuf, NoSystemSearchPath),
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP_236: &str = "\
Shared library search path:
  (libraries located via /etc/ld.so.cache)
  /lib/x86_64-linux-gnu (system search path)
  /usr/lib/x86_64-linux-gnu (system search path)
  /lib (system search path)
  /usr/lib (system search path)

Subdirectories of glibc-hwcaps directories, in priority order:
  x86-64-v4
  x86-64-v3 (supported, searched)
  x86-64-v2 (supported, searched)

Legacy HWCAP subdirectories under library search path directories:
  haswell (AT_PLATFORM; supported, searched)
  tls (supported, searched)
  avx512_1
  x86_64 (supported, searched)
";

    #[test]
    fn the_loaders_account_is_read() {
        let diag = "dl_dst_lib=\"lib/x86_64-linux-gnu\"\ndl_platform=\"haswell\"\n\
                    version.version=\"2.36\"\npath.system_dirs[0x0]=\"/lib/x86_64-linux-gnu/\"\n";
        let l = Loader::from_account("/lib64/ld-linux-x86-64.so.2".into(), HELP_236, diag).unwrap();
        assert_eq!(l.system_dirs[0], Path::new("/lib/x86_64-linux-gnu"));
        assert_eq!(l.system_dirs.len(), 4);
        assert_eq!(l.cache.as_deref(), Some(Path::new("/etc/ld.so.cache")));
        assert_eq!(l.glibc_hwcaps, ["x86-64-v3", "x86-64-v2"]);
        // As the 2.36 loader's LD_DEBUG "search path=" lists them.
        assert_eq!(
            l.legacy_subdirs,
            [
                "tls/haswell/x86_64",
                "tls/haswell",
                "tls/x86_64",
                "tls",
                "haswell/x86_64",
                "haswell",
                "x86_64"
            ]
        );
        assert_eq!(l.subdirs()[0], "glibc-hwcaps/x86-64-v3");
        assert_eq!(l.subdirs().last().unwrap(), "");
        assert_eq!(l.lib, "lib/x86_64-linux-gnu");
        assert_eq!(l.platform.as_deref(), Some("haswell"));
        assert_eq!(l.version.as_deref(), Some("2.36"));
        assert!(Loader::from_account("/x".into(), "Usage: ld.so\n", "").is_err());
        assert_eq!(unquote(r#""a\"b\\c\101""#), "a\"b\\cA");
    }

    #[test]
    fn nixpkgs_glibc_reads_no_system_cache_and_searches_its_own_lib() {
        let interp = PathBuf::from("/nix/store/aaa-glibc-2.42-67/lib/ld-linux-x86-64.so.2");
        let n = Loader::nixpkgs(interp.clone());
        assert_eq!(
            n.system_dirs,
            [PathBuf::from("/nix/store/aaa-glibc-2.42-67/lib")]
        );
        assert_eq!(
            n.cache.as_deref(),
            Some(Path::new("/nix/store/aaa-glibc-2.42-67/etc/ld.so.cache"))
        );
        assert_eq!(n.lib, "lib");
        assert_eq!(Loader::known(&interp, Path::new("/nix/store")), n);
        let d = Loader::known(
            Path::new("/lib64/ld-linux-x86-64.so.2"),
            Path::new("/nix/store"),
        );
        assert_eq!(d.cache.as_deref(), Some(Path::new("/etc/ld.so.cache")));
        assert!(d.system_dirs.contains(&PathBuf::from("/usr/lib")));
        // Another store path's loader is not taken for Nixpkgs' glibc.
        let other = Path::new("/nix/store/bbb-musl-1.2/lib/ld-musl-x86_64.so.1");
        assert_eq!(Loader::known(other, Path::new("/nix/store")).cache, d.cache);
    }
}
