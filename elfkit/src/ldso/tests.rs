//! The model on fake trees: the search order, the RPATH chain, `dlopen`, objects loaded once,
//! the cache, and what Nixpkgs' glibc does differently. The real loader is the oracle in
//! `tests/ldso_differential/`.

use super::cache::tests::{build as build_cache, X86_64};
use super::*;
use crate::DynamicInfo;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// Files by path (their first bytes and dynamic information), directories by path, symlinks
/// by a map of real paths; a file's identity is its real path.
#[derive(Default)]
struct FakeFs {
    files: HashMap<PathBuf, (Vec<u8>, DynamicInfo)>,
    raw: HashMap<PathBuf, Vec<u8>>,
    dirs: Vec<PathBuf>,
    real: HashMap<PathBuf, PathBuf>,
}

impl FakeFs {
    fn lib(&mut self, path: &str, info: DynamicInfo) {
        self.files.insert(path.into(), (elf(2, 62), info));
        let mut d = Path::new(path).parent();
        while let Some(p) = d {
            self.dirs.push(p.to_path_buf());
            d = p.parent();
        }
    }
    /// `p` with `..` taken lexically (its directories are real ones here), then its link.
    fn real_of(&self, p: &Path) -> PathBuf {
        let p = crate::normalize(p);
        self.real.get(&p).cloned().unwrap_or(p)
    }
}

impl Fs for FakeFs {
    fn open(&self, path: &Path) -> io::Result<Opened> {
        use std::hash::{Hash, Hasher};
        let real = self.real_of(path);
        let mut hash = std::collections::hash_map::DefaultHasher::new();
        real.hash(&mut hash);
        let id = (0, hash.finish());
        match self.files.get(&real) {
            Some((head, info)) => Ok(Opened {
                id,
                head: Ok(head.clone()),
                dynamic: Ok(Some(info.clone())),
                real_path: Some(real),
            }),
            None if self.dirs.contains(&real) => Ok(Opened {
                id,
                head: Err(io::Error::from_raw_os_error(libc::EISDIR)),
                dynamic: Ok(None),
                real_path: Some(real),
            }),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        Ok(self.real_of(path))
    }
    fn is_dir(&self, path: &Path) -> bool {
        let path = crate::normalize(path);
        self.dirs.contains(&path)
    }
    fn read(&self, path: &Path, _limit: u64) -> io::Result<Vec<u8>> {
        self.raw
            .get(path)
            .cloned()
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }
}

fn elf(class: u8, machine: u16) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = class;
    h[5] = 1;
    h[6] = 1;
    h[16..18].copy_from_slice(&3u16.to_le_bytes());
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[54..56].copy_from_slice(&56u16.to_le_bytes());
    h
}

fn v(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

fn info(needed: &[&str], runpath: Option<&[&str]>, rpath: Option<&[&str]>) -> DynamicInfo {
    DynamicInfo {
        needed: v(needed),
        runpath: runpath.map(v),
        rpath: rpath.map(v),
        ..DynamicInfo::default()
    }
}

fn exe(needed: &[&str], runpath: Option<&[&str]>, rpath: Option<&[&str]>) -> DynamicInfo {
    DynamicInfo {
        interpreter: Some("/glibc/lib/ld.so".into()),
        ..info(needed, runpath, rpath)
    }
}

/// A loader with one default directory, no cache, no subdirectories, on x86-64.
fn loader() -> Loader {
    let mut l = Loader::nixpkgs("/glibc/lib/ld.so".into());
    l.glibc_hwcaps.clear();
    l.platform = Some("x86_64".into());
    l.elf = X86_64;
    l
}

fn dirs_of(s: &Search) -> Vec<&str> {
    s.tried.iter().map(|t| t.dir.as_str()).collect()
}

#[test]
fn headers_are_judged_as_open_verify_does() {
    let host = X86_64;
    assert_eq!(verify_header(&elf(2, 62), host), Attempt::Loadable);
    assert_eq!(verify_header(&elf(1, 3), host), Attempt::OtherClass);
    assert_eq!(verify_header(&elf(2, 183), host), Attempt::OtherMachine);
    assert_eq!(
        verify_header(&[b'x'; 100], host),
        Attempt::Unusable("invalid ELF header".into())
    );
    assert_eq!(
        verify_header(b"\x7fELF", host),
        Attempt::Unusable("file too short".into())
    );
    let mut rel = elf(2, 62);
    rel[16] = 1;
    assert_eq!(
        verify_header(&rel, host),
        Attempt::Unusable("only ET_DYN and ET_EXEC can be loaded".into())
    );
}

#[test]
fn dsts_follow_the_gabi_rules() {
    let l = loader();
    let o = Some("/o");
    assert_eq!(expand_dsts("$ORIGIN/../lib", o, &l).unwrap(), "/o/../lib");
    assert_eq!(expand_dsts("${ORIGIN}x", o, &l).unwrap(), "/ox");
    assert_eq!(expand_dsts("$ORIGINx", o, &l).unwrap(), "$ORIGINx");
    assert_eq!(
        expand_dsts("/a/$LIB/$PLATFORM", o, &l).unwrap(),
        "/a/lib/x86_64"
    );
    assert_eq!(expand_dsts("/a/$FOO", o, &l).unwrap(), "/a/$FOO");
    assert_eq!(expand_dsts("$ORIGIN", None, &l), None);
    let list = search::expand_list(&v(&["/a//", "/", "", "/a", "$ORIGIN"]), None, &l);
    assert_eq!(list, ["/a", "/", ""]);
}

#[test]
fn runpath_comes_after_ld_library_path_and_hides_every_rpath() {
    let mut fs = FakeFs::default();
    fs.lib("/bin/exe", exe(&["libmid.so"], None, Some(&["/exe-rpath"])));
    fs.lib(
        "/exe-rpath/libmid.so",
        info(&["libx.so"], Some(&["/rp"]), Some(&["/ignored"])),
    );
    let l = loader();
    let env = Environment {
        ld_library_path: Some("/llp".into()),
    };
    let mut p = Process::new(&l, &fs, env);
    p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    let s = p.searches().iter().find(|s| s.name == "libx.so").unwrap();
    // libmid has DT_RUNPATH: no DT_RPATH at all, not its own, not the executable's.
    assert_eq!(dirs_of(s), ["/llp", "/rp", "/glibc/lib"]);
    assert_eq!(
        s.describe(),
        "LD_LIBRARY_PATH [/llp], then DT_RUNPATH [/rp], then the default directories [/glibc/lib]"
    );
    assert_eq!(p.missing().len(), 1);
}

#[test]
fn rpath_is_inherited_up_the_loading_chain_but_not_through_dlopen() {
    let mut fs = FakeFs::default();
    fs.lib("/bin/exe", exe(&["liba.so"], None, Some(&["/e"])));
    fs.lib("/e/liba.so", info(&["libb.so"], None, Some(&["/a"])));
    fs.lib("/a/libb.so", info(&["libc1.so"], None, None));
    fs.lib("/a/libplug.so", info(&["libdep.so"], None, None));
    let l = loader();
    let mut p = Process::new(&l, &fs, Environment::default());
    let main = p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    // libc1.so, needed by libb (no paths of its own): libb's, liba's, then the executable's.
    let s = p.searches().iter().find(|s| s.name == "libc1.so").unwrap();
    assert_eq!(dirs_of(s), ["/a", "/e", "/glibc/lib"]);
    assert_eq!(
        s.describe(),
        "the DT_RPATH of /e/liba.so [/a], then the DT_RPATH of /bin/exe [/e], then the \
         default directories [/glibc/lib]"
    );
    // dlopen from libb: its chain applies to the name itself...
    let b = p.lookup("libb.so").unwrap();
    let d = p.dlopen("libplug.so", b);
    assert_eq!(
        d.outcome,
        Outcome::Found {
            path: "/a/libplug.so".into(),
            real_path: Some("/a/libplug.so".into()),
            source: Source::Rpath("/e/liba.so".into()),
        }
    );
    // ... not to what the plugin needs: the plugin's (none), then the executable's.
    let s = p.searches().iter().find(|s| s.name == "libdep.so").unwrap();
    assert_eq!(dirs_of(s), ["/e", "/glibc/lib"]);
    assert!(d.object.is_none(), "a missing dependency fails the dlopen");
    assert!(p.lookup("libplug.so").is_none(), "and unloads it");
    let _ = main;
}

#[test]
fn an_object_is_loaded_once_by_name_soname_or_file() {
    let mut fs = FakeFs::default();
    fs.lib(
        "/bin/exe",
        exe(
            &["libfoo.so", "libfoo.so.1", "libbar.so"],
            Some(&["/l"]),
            None,
        ),
    );
    let foo = DynamicInfo {
        soname: Some("libfoo.so.1".into()),
        ..info(&[], None, None)
    };
    fs.lib("/l/libfoo.so", foo);
    // libbar.so is another name of the same file.
    fs.files.insert(
        "/l/libbar.so".into(),
        fs.files[Path::new("/l/libfoo.so")].clone(),
    );
    fs.real.insert("/l/libbar.so".into(), "/l/libfoo.so".into());
    let l = loader();
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    let paths: Vec<_> = p.objects().map(|(_, o)| o.path.clone()).collect();
    assert_eq!(paths, [PathBuf::from("/bin/exe"), "/l/libfoo.so".into()]);
    // libfoo.so.1 was answered by the soname without a search; libbar.so by the file.
    assert!(p.searches().iter().all(|s| s.name != "libfoo.so.1"));
    assert!(p.searches().iter().any(|s| s.name == "libbar.so"));
    let foo = p.lookup("libbar.so").unwrap();
    assert_eq!(
        p.object(foo).names,
        ["libfoo.so", "libfoo.so.1", "libbar.so"]
    );
}

#[test]
fn wrong_class_is_skipped_and_junk_ends_the_search() {
    let mut fs = FakeFs::default();
    fs.lib("/bin/exe", exe(&[], Some(&["/a", "/b"]), None));
    fs.files.insert(
        "/a/libcuda.so.1".into(),
        (elf(1, 3), DynamicInfo::default()),
    );
    fs.lib("/b/libcuda.so.1", DynamicInfo::default());
    let l = loader();
    let mut p = Process::new(&l, &fs, Environment::default());
    let main = p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    let d = p.dlopen("libcuda.so.1", main);
    let s = &p.searches()[d.search.unwrap()];
    assert_eq!(s.tried[0].attempt, Attempt::OtherClass);
    assert_eq!(s.found(), Some(Path::new("/b/libcuda.so.1")));
    fs.files.insert(
        "/a/libcuda.so.1".into(),
        (b"INPUT(libcuda.so.575)".to_vec(), DynamicInfo::default()),
    );
    let mut p = Process::new(&l, &fs, Environment::default());
    let main = p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    let d = p.dlopen("libcuda.so.1", main);
    assert_eq!(
        d.outcome,
        Outcome::Error {
            path: "/a/libcuda.so.1".into(),
            reason: "file too short".into()
        }
    );
}

#[test]
fn origins_subdirectories_and_repeats() {
    let mut fs = FakeFs::default();
    fs.lib(
        "/real/bin/exe",
        exe(
            &["libx.so"],
            Some(&["$ORIGIN/../lib", "$ORIGIN/../lib/", "", "/d"]),
            None,
        ),
    );
    fs.real.insert("/run/exe".into(), "/real/bin/exe".into());
    let mut l = loader();
    l.glibc_hwcaps = vec!["x86-64-v3".into()];
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/run/exe"), Start::Kernel).unwrap();
    let s = &p.searches()[0];
    assert_eq!(s.lists[0].dirs, ["/real/bin/../lib", "", "/d"]);
    let files: Vec<_> = s.tried.iter().map(|t| t.file.to_str().unwrap()).collect();
    assert_eq!(
        files[..4],
        [
            "/real/bin/../lib/glibc-hwcaps/x86-64-v3/libx.so",
            "/real/bin/../lib/libx.so",
            "glibc-hwcaps/x86-64-v3/libx.so",
            "libx.so",
        ]
    );
    // Named to the loader, the executable's origin is the path as given before glibc 2.42,
    // its real path since; a library's is always the path as given.
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/run/exe"), Start::Loader).unwrap();
    assert_eq!(p.searches()[0].lists[0].dirs[0], "/real/bin/../lib");
    let mut old = l.clone();
    old.version = Some("2.41".into());
    let mut p = Process::new(&old, &fs, Environment::default());
    p.start(Path::new("/run/exe"), Start::Loader).unwrap();
    assert_eq!(p.searches()[0].lists[0].dirs[0], "/run/../lib");
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/run/exe"), Start::Library).unwrap();
    assert_eq!(p.searches()[0].lists[0].dirs[0], "/run/../lib");
    // A name with a slash is not searched; its DSTs are replaced.
    let mut p = Process::new(&l, &fs, Environment::default());
    let main = p.start(Path::new("/run/exe"), Start::Kernel).unwrap();
    let d = p.dlopen("$ORIGIN/libx.so", main);
    let s = &p.searches()[d.search.unwrap()];
    assert_eq!(s.tried.len(), 1);
    assert_eq!(s.tried[0].file, Path::new("/real/bin/libx.so"));
}

/// Debian's loader with a cache at `/etc/ld.so.cache` that knows `libonly-cache.so.1`, and
/// Nixpkgs' glibc on the same tree.
fn tree_with_a_cache() -> FakeFs {
    let mut fs = FakeFs::default();
    fs.lib(
        "/app/bin/prog",
        exe(&["libonly-cache.so.1", "libz.so.1"], None, None),
    );
    fs.lib("/opt/vendor/lib/libonly-cache.so.1", DynamicInfo::default());
    fs.lib(
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        DynamicInfo::default(),
    );
    fs.lib(
        "/nix/store/aaa-glibc-2.42-67/lib/libz.so.1",
        DynamicInfo::default(),
    );
    fs.lib(
        "/nix/store/aaa-glibc-2.42-67/lib/ld-linux-x86-64.so.2",
        DynamicInfo::default(),
    );
    let cache = build_cache(&[
        (
            "libonly-cache.so.1",
            "/opt/vendor/lib/libonly-cache.so.1",
            0x303,
            None,
        ),
        (
            "libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            0x303,
            None,
        ),
    ]);
    fs.raw.insert("/etc/ld.so.cache".into(), cache);
    fs
}

#[test]
fn debian_glibc_reads_etc_ld_so_cache_before_its_default_directories() {
    let fs = tree_with_a_cache();
    let mut l = Loader::debian("/lib64/ld-linux-x86-64.so.2".into());
    l.elf = X86_64;
    l.glibc_hwcaps.clear();
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/app/bin/prog"), Start::Kernel).unwrap();
    assert!(p.missing().is_empty(), "{:?}", p.missing());
    let s = &p.searches()[0];
    assert_eq!(
        s.outcome,
        Outcome::Found {
            path: "/opt/vendor/lib/libonly-cache.so.1".into(),
            real_path: Some("/opt/vendor/lib/libonly-cache.so.1".into()),
            source: Source::Cache("/etc/ld.so.cache".into()),
        }
    );
    assert_eq!(
        s.describe(),
        "ld.so.cache (/etc/ld.so.cache), then the default directories \
         [/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib:/usr/lib]"
    );
}

#[test]
fn nixpkgs_glibc_ignores_etc_ld_so_cache_and_searches_only_its_own_lib() {
    // The differences Nixpkgs' patches make (Loader::nixpkgs): the same tree, the same
    // program, another loader.
    let fs = tree_with_a_cache();
    let mut l = Loader::nixpkgs("/nix/store/aaa-glibc-2.42-67/lib/ld-linux-x86-64.so.2".into());
    l.elf = X86_64;
    l.glibc_hwcaps.clear();
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/app/bin/prog"), Start::Kernel).unwrap();
    // The library only /etc/ld.so.cache knows is not found ...
    let only = &p.missing()[0];
    assert_eq!(only.name, "libonly-cache.so.1");
    let s = &p.searches()[only.search];
    assert_eq!(s.outcome, Outcome::NotFound { other_class: false });
    assert!(
        s.lists
            .iter()
            .all(|l| !matches!(l.source, Source::Cache(_))),
        "{s:?}"
    );
    // ... and libz comes from glibc's own lib, not /usr/lib/x86_64-linux-gnu.
    let z = p.lookup("libz.so.1").unwrap();
    assert_eq!(
        p.object(z).path,
        Path::new("/nix/store/aaa-glibc-2.42-67/lib/libz.so.1")
    );
    assert_eq!(
        p.searches()[1].describe(),
        "the default directories [/nix/store/aaa-glibc-2.42-67/lib]"
    );
    // $LIB is `lib`, where Debian's is `lib/x86_64-linux-gnu`.
    assert_eq!(expand_dsts("/opt/$LIB", None, &l).unwrap(), "/opt/lib");
    // A cache at its own prefix would be read: the patch moved it, it did not remove it.
    let mut fs = tree_with_a_cache();
    let cache = fs.raw[Path::new("/etc/ld.so.cache")].clone();
    fs.raw
        .insert("/nix/store/aaa-glibc-2.42-67/etc/ld.so.cache".into(), cache);
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/app/bin/prog"), Start::Kernel).unwrap();
    assert!(p.missing().is_empty(), "{:?}", p.missing());
}

#[test]
fn the_loader_is_listed_where_it_is_first_needed() {
    let mut fs = FakeFs::default();
    fs.lib("/bin/exe", exe(&["libc.so.6"], None, None));
    fs.lib("/glibc/lib/libc.so.6", info(&["ld.so"], None, None));
    let rtld = DynamicInfo {
        soname: Some("ld.so".into()),
        ..DynamicInfo::default()
    };
    fs.lib("/glibc/lib/ld.so", rtld);
    let l = loader();
    let mut p = Process::new(&l, &fs, Environment::default());
    p.start(Path::new("/bin/exe"), Start::Kernel).unwrap();
    let paths: Vec<_> = p
        .objects()
        .map(|(_, o)| o.path.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        ["/bin/exe", "/glibc/lib/libc.so.6", "/glibc/lib/ld.so"]
    );
    assert_eq!(p.searches().len(), 1, "ld.so answered by its soname");
}

#[test]
fn the_runtimes_one_process_loads_are_in_its_graph_and_only_there() {
    // What `mixed-cuda-runtimes` asks: two runtimes reached through two libraries are one
    // process's; two programs with one runtime each are two processes.
    let mut fs = FakeFs::default();
    fs.lib(
        "/p/bin/both",
        exe(&["liba.so", "libb.so"], Some(&["/p/lib"]), None),
    );
    fs.lib("/p/bin/one", exe(&["libb.so"], Some(&["/p/lib"]), None));
    fs.lib(
        "/p/lib/liba.so",
        info(&["libcudart.so.12"], Some(&["$ORIGIN/../cuda12"]), None),
    );
    fs.lib(
        "/p/lib/libb.so",
        info(&["libcudart.so.11.0"], Some(&["$ORIGIN/../cuda11"]), None),
    );
    fs.lib("/p/cuda12/libcudart.so.12", DynamicInfo::default());
    fs.lib("/p/cuda11/libcudart.so.11.0", DynamicInfo::default());
    let l = loader();
    let runtimes = |program: &str| -> Vec<PathBuf> {
        let mut p = Process::new(&l, &fs, Environment::default());
        p.start(Path::new(program), Start::Kernel).unwrap();
        p.objects()
            .map(|(_, o)| o.path.clone())
            .filter(|p| p.to_string_lossy().contains("libcudart"))
            .collect()
    };
    assert_eq!(
        runtimes("/p/bin/both"),
        [
            PathBuf::from("/p/lib/../cuda12/libcudart.so.12"),
            "/p/lib/../cuda11/libcudart.so.11.0".into()
        ]
    );
    assert_eq!(
        runtimes("/p/bin/one"),
        [PathBuf::from("/p/lib/../cuda11/libcudart.so.11.0")]
    );
}

/// A loader's faults and a start's are each one line naming their subject (the loader, the
/// file) first, as when they were struct variants.
#[test]
fn faults_name_their_subject_first() {
    let (ld, exe) = (PathBuf::from("/lib/ld.so"), PathBuf::from("/bin/exe"));
    for (error, text) in [
        (
            AskError::CannotRun(ld.clone(), "denied".into()).to_string(),
            "cannot run /lib/ld.so: denied",
        ),
        (
            AskError::Failed(ld.clone(), "--help".into(), "exit status: 1".into()).to_string(),
            "/lib/ld.so --help failed (exit status: 1): it is not glibc's ld.so, or older than \
             glibc 2.33",
        ),
        (
            AskError::NoSearchPath(ld, NoSystemSearchPath).to_string(),
            "/lib/ld.so: its --help lists no \"(system search path)\" directories",
        ),
        (
            StartError::Open(exe.clone(), "not found".into()).to_string(),
            "/bin/exe: not found",
        ),
        (
            StartError::Unusable(exe, "wrong machine".into()).to_string(),
            "/bin/exe: wrong machine",
        ),
        (
            StartError::Started.to_string(),
            "the process has started already",
        ),
    ] {
        assert_eq!(error, text);
    }
}
