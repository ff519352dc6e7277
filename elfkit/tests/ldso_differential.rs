//! `elfkit::ldso` against the real dynamic loader of this machine (Debian's glibc on the host;
//! under `scripts/with-nix 2.26` and `2.34`, the trixie and sid roots' own): programs and
//! libraries built with `cc` in a temporary directory, run with `LD_DEBUG=libs` (every search,
//! every file tried, the kind of list it came from) and listed with `ld.so --list` and
//! `dl_iterate_phdr` (every object one process holds, in link-map order), compared with the
//! model's, file by file on the directories that exist (glibc does not retry a directory it
//! found missing). Covered: DT_RPATH against DT_RUNPATH and the RPATH chain, `$ORIGIN`
//! (through symlinks, for the executable and for libraries), `LD_LIBRARY_PATH`, `dlopen`
//! from a library (its own DT_RUNPATH; what it loads inherits no chain), objects loaded once
//! by soname, other ELF classes and machines, a non-ELF file, and a private `ld.so.cache`
//! (`ldconfig -C`) bound over `/etc/ld.so.cache` in a private mount namespace, glibc-hwcaps
//! entries included. Under `CI=true` a machine without the oracle (the loader, `cc`,
//! `ldconfig`, root for the namespace) fails instead of skipping.

use cuda_sandbox_elfkit::ldso::{
    Environment, Loader, Outcome, Process, RealFs, Search, Source, Start,
};
use std::path::{Path, PathBuf};
use std::process::Command;

const INTERP: &str = "/lib64/ld-linux-x86-64.so.2";

/// The real loader's own account, or `None` (skipped; a failure under `CI=true`).
fn oracle(test: &str) -> Option<Loader> {
    let missing = |why: String| {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test} must run in CI: {why}");
        }
        eprintln!("SKIPPED {test}: {why}");
        None
    };
    if !cfg!(target_arch = "x86_64") {
        return missing("the programs are built for x86-64's loader".into());
    }
    if !Path::new(INTERP).exists() {
        return missing(format!("no {INTERP}"));
    }
    if Command::new("cc").arg("--version").output().is_err() {
        return missing("no cc".into());
    }
    match Loader::ask(Path::new(INTERP)) {
        Ok(l) => {
            eprintln!("{test}: glibc {:?} ({INTERP})", l.version);
            Some(l)
        }
        Err(e) => missing(e.to_string()),
    }
}

fn cc(src: &str, out: &Path, args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("x.c");
    std::fs::write(&c, src).unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let o = Command::new("cc")
        .arg(&c)
        .arg("-o")
        .arg(out)
        .args(args)
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A shared library at `path` with `soname`, built with `args` (its own DT_NEEDED and paths).
fn lib(path: &Path, soname: &str, args: &[&str]) -> PathBuf {
    let so = format!("-Wl,-soname,{soname}");
    let mut all = vec!["-shared", "-fPIC", so.as_str()];
    all.extend_from_slice(args);
    cc("int ldso_test_symbol(void) { return 0; }\n", path, &all);
    path.to_path_buf()
}

/// Prints every object of the process, after the program's own `dlopen`s (`argv[1..]`, each
/// reported as `DLOPEN name path` or `ERROR message`) and after `go()` where a library linked
/// in defines it (`-DWITH_GO`).
const PROG: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#ifdef WITH_GO
void go(void);
#endif
static int print(struct dl_phdr_info *i, size_t s, void *d) {
    (void)s; (void)d;
    printf("OBJ %s\n", i->dlpi_name);
    return 0;
}
int main(int argc, char **argv) {
    for (int n = 1; n < argc; n++) {
        void *h = dlopen(argv[n], RTLD_NOW);
        struct link_map *m;
        if (!h) { printf("ERROR %s\n", dlerror()); continue; }
        dlinfo(h, RTLD_DI_LINKMAP, &m);
        printf("DLOPEN %s %s\n", argv[n], m->l_name);
    }
#ifdef WITH_GO
    go();
#endif
    dl_iterate_phdr(print, 0);
    return 0;
}
"#;

/// A library whose `go` dlopens `NAME` (a libcudart, or anything with a static one inside).
fn go_library(path: &Path, name: &str, args: &[&str]) {
    let src = format!(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <link.h>\n#include <stdio.h>\n\
         void go(void) {{ void *h = dlopen(\"{name}\", RTLD_NOW); struct link_map *m;\n\
         if (!h) {{ printf(\"ERROR %s\\n\", dlerror()); return; }}\n\
         dlinfo(h, RTLD_DI_LINKMAP, &m); printf(\"DLOPEN {name} %s\\n\", m->l_name); }}\n"
    );
    let mut all = vec!["-shared", "-fPIC"];
    all.extend_from_slice(args);
    all.push("-ldl");
    cc(&src, path, &all);
}

/// What the real loader did: the program's output, and each search of `LD_DEBUG=libs`.
struct Real {
    lines: Vec<String>,
    searches: Vec<(String, Vec<(PathBuf, String)>)>,
    log: String,
}

impl Real {
    /// The objects `dl_iterate_phdr` listed, the executable and the vDSO left out.
    fn objects(&self) -> Vec<PathBuf> {
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix("OBJ "))
            .filter(|n| n.contains('/'))
            .map(PathBuf::from)
            .collect()
    }
}

fn run_real(mut cmd: Command, llp: Option<&str>) -> Real {
    cmd.env("LD_DEBUG", "libs");
    run_debugged(cmd, llp)
}

/// [`run_real`] for a command that sets `LD_DEBUG=libs` itself, for the program only.
fn run_debugged(mut cmd: Command, llp: Option<&str>) -> Real {
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(l) = llp {
        cmd.env("LD_LIBRARY_PATH", l);
    }
    let o = cmd.output().expect("run the test program");
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    let lines = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    let mut searches: Vec<(String, Vec<(PathBuf, String)>)> = Vec::new();
    let mut kind = String::new();
    let mut inside = false;
    for l in log.lines() {
        // "      PID:\tmessage"
        let msg = l.split_once(":\t").map(|(_, m)| m).unwrap_or("");
        if let Some(rest) = msg.strip_prefix("find library=") {
            let name = rest.split(' ').next().unwrap().to_string();
            searches.push((name, Vec::new()));
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        let msg = msg.trim_start();
        if msg.is_empty() {
            inside = false;
        } else if let Some(sp) = msg.strip_prefix("search path=") {
            let label = sp.rsplit_once("\t\t(").map(|(_, k)| k).unwrap_or("");
            let label = label.trim_end_matches(')');
            kind = label.split(" from file").next().unwrap().to_string();
        } else if msg.starts_with("search cache=") {
            kind = "cache".into();
        } else if let Some(f) = msg.strip_prefix("trying file=") {
            searches
                .last_mut()
                .unwrap()
                .1
                .push((f.into(), kind.clone()));
        }
    }
    Real {
        lines,
        searches,
        log,
    }
}

fn parent_exists(f: &Path) -> bool {
    match f.parent() {
        Some(p) if p.as_os_str().is_empty() => true,
        Some(p) => p.is_dir(),
        None => false,
    }
}

/// The model's searches and the loader's, one by one: the same names in the same order, and
/// for each the same files tried on existing directories, from the same kind of list.
fn assert_same_searches(ours: &[Search], real: &Real) {
    let ours: Vec<&Search> = ours
        .iter()
        .filter(|s| !matches!(s.lists[0].source, Source::Direct))
        .collect();
    let names = |v: Vec<&str>| v.join(" ");
    assert_eq!(
        names(ours.iter().map(|s| s.name.as_str()).collect()),
        names(real.searches.iter().map(|s| s.0.as_str()).collect()),
        "the searches differ; loader log:\n{}",
        real.log
    );
    for (s, (name, tried)) in ours.iter().zip(&real.searches) {
        let ours_tried: Vec<(PathBuf, String)> = s
            .tried
            .iter()
            .filter(|t| t.dir_exists)
            .map(|t| (t.file.clone(), t.source.ld_debug_kind().to_string()))
            .collect();
        let real_tried: Vec<(PathBuf, String)> = tried
            .iter()
            .filter(|(f, _)| parent_exists(f))
            .cloned()
            .collect();
        assert_eq!(
            ours_tried,
            real_tried,
            "search for {name} differs; ours: {}\nloader log:\n{}",
            s.describe(),
            real.log
        );
    }
}

/// The objects of the model's process, in link-map order, the first one left out.
fn model_objects<F: cuda_sandbox_elfkit::ldso::Fs>(p: &Process<'_, F>) -> Vec<PathBuf> {
    p.objects().skip(1).map(|(_, o)| o.path.clone()).collect()
}

fn llp_env(llp: Option<&str>) -> Environment {
    Environment {
        ld_library_path: llp.map(String::from),
    }
}

/// The program run for real and modelled: the same searches, the same objects. The model
/// dlopens what the program does: `args`, then `go_name` from `go_library` when given.
fn assert_run_agrees(
    loader: &Loader,
    prog: &Path,
    args: &[&str],
    llp: Option<&str>,
    go: Option<(&str, &str)>,
) -> (Real, Vec<PathBuf>) {
    let mut cmd = Command::new(prog);
    cmd.args(args);
    let real = run_real(cmd, llp);
    let mut p = Process::new(loader, &RealFs, llp_env(llp));
    let main = p.start(prog, Start::Kernel).unwrap();
    for a in args {
        let d = p.dlopen(a, main);
        assert!(d.object.is_some(), "{a}: {d:?}");
    }
    if let Some((library, name)) = go {
        let by = p
            .lookup(library)
            .expect("the library defining go() is loaded");
        p.dlopen(name, by);
    }
    assert!(p.missing().is_empty(), "{:?}", p.missing());
    assert_same_searches(p.searches(), &real);
    let ours = model_objects(&p);
    assert_eq!(ours, real.objects(), "the objects differ:\n{}", real.log);
    (real, ours)
}

#[test]
fn this_loader_is_debians_as_the_model_knows_it() {
    let Some(asked) = oracle("this_loader_is_debians_as_the_model_knows_it") else {
        return;
    };
    let version = Command::new(INTERP).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(version.contains("Debian GLIBC"), "{version}");
    // What the hook assumes without running the loader is what the loader says of itself
    // (the legacy subdirectories of glibc 2.36 aside).
    let mut known = Loader::debian(INTERP.into());
    known.version = asked.version.clone();
    known.legacy_subdirs = asked.legacy_subdirs.clone();
    assert_eq!(known, asked);
    let minor: u32 = asked
        .version
        .as_deref()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(asked.legacy_subdirs.is_empty(), minor >= 37, "{asked:?}");
    // Under the sid root the newest glibc is the one judged.
    if std::env::var("CUDA_SANDBOX_NIX").as_deref() == Ok("2.34") {
        assert!(minor >= 42, "the sid root's loader is glibc {minor}");
    }
}

#[test]
fn rpath_runpath_origin_and_ld_library_path_as_the_real_loader_searches() {
    let Some(loader) =
        oracle("rpath_runpath_origin_and_ld_library_path_as_the_real_loader_searches")
    else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for dir in ["bin", "a", "llp", "links", "rpath-first"] {
        std::fs::create_dir_all(d.join(dir)).unwrap();
    }
    lib(&d.join("b/libldso-x.so.1"), "libldso-x.so.1", &[]);
    // DT_RUNPATH with $ORIGIN, run through a symlink: $ORIGIN is the real bin/, and
    // LD_LIBRARY_PATH comes first.
    let prog = d.join("bin/prog");
    let rp = format!(
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../a:{}/b",
        d.display()
    );
    cc(PROG, &prog, &[&rp, "-ldl"]);
    let link = d.join("links/prog");
    std::os::unix::fs::symlink(&prog, &link).unwrap();
    let llp = format!("{}/llp", d.display());
    let (real, _) = assert_run_agrees(&loader, &link, &["libldso-x.so.1"], Some(&llp), None);
    let want = d.join("b/libldso-x.so.1");
    assert!(
        real.lines
            .contains(&format!("DLOPEN libldso-x.so.1 {}", want.display())),
        "{:?}",
        real.lines
    );
    // The same name in LD_LIBRARY_PATH wins over DT_RUNPATH ...
    lib(&d.join("llp/libldso-x.so.1"), "libldso-x.so.1", &[]);
    let (real, _) = assert_run_agrees(&loader, &link, &["libldso-x.so.1"], Some(&llp), None);
    assert!(real
        .lines
        .contains(&format!("DLOPEN libldso-x.so.1 {llp}/libldso-x.so.1")));
    // ... but not over DT_RPATH, which comes before it.
    let prog2 = d.join("rpath-first/prog");
    let rp = format!("-Wl,--disable-new-dtags,-rpath,{}/b", d.display());
    cc(PROG, &prog2, &[&rp, "-ldl"]);
    let (real, _) = assert_run_agrees(&loader, &prog2, &["libldso-x.so.1"], Some(&llp), None);
    assert!(real
        .lines
        .contains(&format!("DLOPEN libldso-x.so.1 {}", want.display())));
    // $ORIGIN in LD_LIBRARY_PATH is the executable's.
    let llp_origin = "$ORIGIN/../llp";
    let (real, _) = assert_run_agrees(&loader, &link, &["libldso-x.so.1"], Some(llp_origin), None);
    let canon = d.canonicalize().unwrap();
    assert!(
        real.lines.contains(&format!(
            "DLOPEN libldso-x.so.1 {}/bin/../llp/libldso-x.so.1",
            canon.display()
        )),
        "{:?}",
        real.lines
    );
}

#[test]
fn the_rpath_chain_and_what_dlopen_from_a_library_loads() {
    let Some(loader) = oracle("the_rpath_chain_and_what_dlopen_from_a_library_loads") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // prog (DT_RPATH exe-rp) needs libldso-mid (DT_RPATH mid-rp, found in exe-rp), which
    // needs libldso-leaf: mid's own DT_RPATH, then the executable's.
    // mid's go() dlopens libldso-plug, found through mid's chain (mid-rp); plug needs
    // libldso-dep, which is in mid-rp and in exe-rp: what dlopen loaded inherits no chain,
    // so the executable's DT_RPATH gives it (exe-rp).
    let exe_rp = d.join("exe-rp");
    let mid_rp = d.join("mid-rp");
    lib(&mid_rp.join("libldso-leaf.so"), "libldso-leaf.so", &[]);
    let dep_exe = lib(&exe_rp.join("libldso-dep.so"), "libldso-dep.so", &[]);
    lib(&mid_rp.join("libldso-dep.so"), "libldso-dep.so", &[]);
    let l_mid = format!("-L{}", mid_rp.display());
    lib(
        &mid_rp.join("libldso-plug.so"),
        "libldso-plug.so",
        &["-Wl,--no-as-needed", &l_mid, "-lldso-dep"],
    );
    let mid = exe_rp.join("libldso-mid.so");
    let mid_flags = format!("-Wl,--disable-new-dtags,-rpath,{}", mid_rp.display());
    go_library(
        &mid,
        "libldso-plug.so",
        &[
            "-Wl,--no-as-needed",
            &l_mid,
            "-lldso-leaf",
            &mid_flags,
            "-Wl,-soname,libldso-mid.so",
        ],
    );
    let prog = d.join("prog");
    let l_exe = format!("-L{}", exe_rp.display());
    let exe_flags = format!("-Wl,--disable-new-dtags,-rpath,{}", exe_rp.display());
    cc(
        PROG,
        &prog,
        &["-DWITH_GO", &l_exe, "-lldso-mid", &exe_flags, "-ldl"],
    );
    let (real, ours) = assert_run_agrees(
        &loader,
        &prog,
        &[],
        None,
        Some(("libldso-mid.so", "libldso-plug.so")),
    );
    assert!(
        real.lines
            .iter()
            .any(|l| l.ends_with("mid-rp/libldso-plug.so")),
        "{:?}",
        real.lines
    );
    assert!(ours.contains(&dep_exe), "{ours:?}");
    assert!(!ours.contains(&mid_rp.join("libldso-dep.so")), "{ours:?}");
    // With DT_RUNPATH of its own, mid searches no DT_RPATH at all: not its own (absent
    // then), not the executable's; its go() finds the plugin through its DT_RUNPATH.
    let mid2 = exe_rp.join("libldso-mid.so");
    let runpath = format!("-Wl,--enable-new-dtags,-rpath,{}", mid_rp.display());
    go_library(
        &mid2,
        "libldso-plug.so",
        &[
            "-Wl,--no-as-needed",
            &l_mid,
            "-lldso-leaf",
            &runpath,
            "-Wl,-soname,libldso-mid.so",
        ],
    );
    assert_run_agrees(
        &loader,
        &prog,
        &[],
        None,
        Some(("libldso-mid.so", "libldso-plug.so")),
    );
    // A library's $ORIGIN is the directory it was loaded by, symlinks not followed: from
    // sym/, $ORIGIN/../mid-rp is mid-rp; from the real file's directory it would not be.
    let sym = d.join("sym");
    std::fs::create_dir_all(&sym).unwrap();
    let real_mid = d.join("real/deep/libldso-mid2.so");
    let origin = "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../mid-rp";
    lib(
        &real_mid,
        "libldso-mid2.so",
        &["-Wl,--no-as-needed", &l_mid, "-lldso-leaf", origin],
    );
    let by_path = sym.join("libldso-mid2.so");
    std::os::unix::fs::symlink(&real_mid, &by_path).unwrap();
    let plain = d.join("plain");
    cc(PROG, &plain, &["-ldl"]);
    let (_, ours) = assert_run_agrees(&loader, &plain, &[by_path.to_str().unwrap()], None, None);
    assert!(
        ours.contains(&d.join("sym/../mid-rp/libldso-leaf.so")),
        "{ours:?}"
    );
}

#[test]
fn ld_so_list_shows_the_graph_the_model_builds() {
    let Some(loader) = oracle("ld_so_list_shows_the_graph_the_model_builds") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Two names for one library (its file name and its soname), a chain of DT_RUNPATH with
    // $ORIGIN, and the executable named through a symlink: `ld.so --list` takes $ORIGIN as
    // given.
    let lib_dir = d.join("lib");
    lib(&lib_dir.join("libldso-one.so.1"), "libldso-one.so.1", &[]);
    std::os::unix::fs::symlink("libldso-one.so.1", lib_dir.join("libldso-one.so")).unwrap();
    let l = format!("-L{}", lib_dir.display());
    lib(
        &lib_dir.join("libldso-two.so"),
        "libldso-two.so",
        &[
            "-Wl,--no-as-needed",
            &l,
            "-l:libldso-one.so",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN",
        ],
    );
    let prog = d.join("bin/prog");
    cc(
        "int main(void) { return 0; }\n",
        &prog,
        &[
            "-Wl,--no-as-needed",
            &l,
            "-lldso-two",
            "-lldso-one",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib",
        ],
    );
    let listing = |path: &Path| -> Vec<(String, String)> {
        let o = Command::new(INTERP)
            .arg("--list")
            .arg(path)
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|line| {
                let line = line.trim();
                let line = line.rsplit_once(" (0x").map_or(line, |(l, _)| l);
                match line.split_once(" => ") {
                    Some((name, path)) => Some((name.to_string(), path.to_string())),
                    None if line.starts_with('/') => Some((line.to_string(), line.to_string())),
                    None => None, // linux-vdso.so.1
                }
            })
            .collect()
    };
    let modelled = |path: &Path| -> Vec<(String, String)> {
        let mut p = Process::new(&loader, &RealFs, Environment::default());
        p.start(path, Start::Loader).unwrap();
        assert!(p.missing().is_empty(), "{:?}", p.missing());
        p.objects()
            .skip(1)
            .map(|(_, o)| (o.names[0].clone(), o.path.display().to_string()))
            .collect()
    };
    let real = listing(&prog);
    assert!(real.len() >= 4, "{real:?}");
    assert_eq!(modelled(&prog), real);
    let links = d.join("links");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&prog, links.join("prog")).unwrap();
    // Through the symlink, $ORIGIN/../lib is links/../lib: the same directory here.
    assert_eq!(modelled(&links.join("prog")), listing(&links.join("prog")));
}

/// Rewrites the ELF header of a copy of `from`: another class or another machine.
fn patched(from: &Path, to: &Path, at: usize, value: &[u8]) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let mut b = std::fs::read(from).unwrap();
    b[at..at + value.len()].copy_from_slice(value);
    std::fs::write(to, b).unwrap();
}

#[test]
fn wrong_class_and_machine_are_skipped_and_a_non_elf_file_ends_the_search() {
    let Some(loader) =
        oracle("wrong_class_and_machine_are_skipped_and_a_non_elf_file_ends_the_search")
    else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let name = "libldso-w.so.1";
    let want = lib(&d.join("good").join(name), name, &[]);
    patched(&want, &d.join("class32").join(name), 4, &[1]); // EI_CLASS = ELFCLASS32
    patched(
        &want,
        &d.join("aarch64").join(name),
        18,
        &183u16.to_le_bytes(),
    ); // e_machine
    let prog = d.join("prog");
    let rp = format!(
        "-Wl,--enable-new-dtags,-rpath,{0}/class32:{0}/aarch64:{0}/good",
        d.display()
    );
    cc(PROG, &prog, &[&rp, "-ldl"]);
    let (real, _) = assert_run_agrees(&loader, &prog, &[name], None, None);
    assert!(real
        .lines
        .contains(&format!("DLOPEN {name} {}", want.display())));
    // Only the other-class one left: "wrong ELF class".
    std::fs::remove_file(&want).unwrap();
    std::fs::remove_dir_all(d.join("aarch64")).unwrap();
    let mut cmd = Command::new(&prog);
    cmd.arg(name);
    let real = run_real(cmd, None);
    assert!(
        real.lines
            .iter()
            .any(|l| l.contains("wrong ELF class: ELFCLASS32")),
        "{:?}",
        real.lines
    );
    let mut p = Process::new(&loader, &RealFs, Environment::default());
    let main = p.start(&prog, Start::Kernel).unwrap();
    assert_eq!(
        p.dlopen(name, main).outcome,
        Outcome::NotFound { other_class: true }
    );
    assert_same_searches(p.searches(), &real);
    // A file that is not ELF (a linker script, say) ends the search with an error, though a
    // good one comes later.
    lib(&want, name, &[]);
    std::fs::write(
        d.join("class32").join(name),
        "/* GNU ld script: the library is elsewhere */\nINPUT(libldso-w.so.1.0.0)\n",
    )
    .unwrap();
    let mut cmd = Command::new(&prog);
    cmd.arg(name);
    let real = run_real(cmd, None);
    assert!(
        real.lines.iter().any(|l| l.contains("invalid ELF header")),
        "{:?}",
        real.lines
    );
    let mut p = Process::new(&loader, &RealFs, Environment::default());
    let main = p.start(&prog, Start::Kernel).unwrap();
    assert_eq!(
        p.dlopen(name, main).outcome,
        Outcome::Error {
            path: d.join("class32").join(name),
            reason: "invalid ELF header".into()
        }
    );
    assert_same_searches(p.searches(), &real);
}

#[test]
fn a_private_cache_is_read_as_the_real_loader_reads_it() {
    let test = "a_private_cache_is_read_as_the_real_loader_reads_it";
    let Some(mut loader) = oracle(test) else {
        return;
    };
    if !cuda_sandbox_testkit::root_available(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // A directory only the cache knows, with a library in a glibc-hwcaps subdirectory too.
    let cached = d.join("cached");
    lib(
        &cached.join("libldso-cached.so.1"),
        "libldso-cached.so.1",
        &[],
    );
    lib(&cached.join("libldso-hw.so.1"), "libldso-hw.so.1", &[]);
    // In the best and the least subdirectory the loader searches: the best one wins.
    let hw = loader.glibc_hwcaps.first().cloned();
    for sub in loader
        .glibc_hwcaps
        .first()
        .into_iter()
        .chain(loader.glibc_hwcaps.last())
    {
        let p = cached
            .join("glibc-hwcaps")
            .join(sub)
            .join("libldso-hw.so.1");
        lib(&p, "libldso-hw.so.1", &[]);
    }
    let conf = d.join("ld.so.conf");
    std::fs::write(&conf, format!("{}\n", cached.display())).unwrap();
    let cache = d.join("ld.so.cache");
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or_else(|| panic!("{test}: no ldconfig"));
    cuda_sandbox_testkit::run_ok(
        Command::new(ldconfig)
            .arg("-X")
            .arg("-C")
            .arg(&cache)
            .arg("-f")
            .arg(&conf),
    );
    let prog = d.join("prog");
    let l = format!("-L{}", cached.display());
    cc(
        PROG,
        &prog,
        &[
            &l,
            "-Wl,--no-as-needed",
            "-l:libldso-cached.so.1",
            "-l:libldso-hw.so.1",
            "-ldl",
        ],
    );
    // The program in a mount namespace of its own, the private cache over /etc/ld.so.cache.
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" /etc/ld.so.cache && exec env LD_DEBUG=libs \"$2\"")
        .arg("sh")
        .arg(&cache)
        .arg(&prog);
    let real = run_debugged(cmd, None);
    assert!(!real.searches.is_empty(), "nothing searched:\n{}", real.log);
    loader.cache = Some(cache.clone());
    let mut p = Process::new(&loader, &RealFs, Environment::default());
    p.start(&prog, Start::Kernel).unwrap();
    assert!(p.missing().is_empty(), "{:?}", p.missing());
    let expect = |name: &str, path: &Path| {
        let s = p.searches().iter().find(|s| s.name == name).unwrap();
        assert_eq!(s.found(), Some(path), "{}", s.describe());
        assert!(matches!(
            &s.outcome,
            Outcome::Found {
                source: Source::Cache(_),
                ..
            }
        ));
    };
    expect("libldso-cached.so.1", &cached.join("libldso-cached.so.1"));
    let hw_path = match &hw {
        Some(sub) => cached
            .join("glibc-hwcaps")
            .join(sub)
            .join("libldso-hw.so.1"),
        None => cached.join("libldso-hw.so.1"),
    };
    expect("libldso-hw.so.1", &hw_path);
    assert_same_searches(p.searches(), &real);
    assert_eq!(model_objects(&p), real.objects(), "{}", real.log);
    // Without the cache neither is found: the cache, not a directory, found them.
    loader.cache = None;
    let mut p = Process::new(&loader, &RealFs, Environment::default());
    p.start(&prog, Start::Kernel).unwrap();
    assert_eq!(p.missing().len(), 2, "{:?}", p.missing());
}
