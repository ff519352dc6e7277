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

/// Compiles the C source `src` to `out` with `args` (testkit's `cc`, which must succeed).
fn cc(src: &str, out: &Path, args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("x.c");
    std::fs::write(&c, src).unwrap();
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let (c, out) = (c.to_str().unwrap(), out.to_str().expect("UTF-8 path"));
    let mut all = vec![c, "-o", out];
    all.extend_from_slice(args);
    cuda_sandbox_testkit::cc(&all);
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

/// The label glibc's `LD_DEBUG=libs` prints for a search path (`RPATH`, `RUNPATH`,
/// `LD_LIBRARY_PATH`, `system search path`; `cache` for the " search cache=" line).
fn ld_debug_kind(source: &Source) -> &'static str {
    match source {
        Source::Rpath(_) => "RPATH",
        Source::LdLibraryPath => "LD_LIBRARY_PATH",
        Source::Runpath(_) => "RUNPATH",
        Source::Cache(_) => "cache",
        Source::Default => "system search path",
        Source::Direct => "path",
        Source::Loaded => "loaded",
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
            .map(|t| (t.file.clone(), ld_debug_kind(&t.source).to_string()))
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

/// Rewrites the ELF header of a copy of `from`: another class or another machine.
fn patched(from: &Path, to: &Path, at: usize, value: &[u8]) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let mut b = std::fs::read(from).unwrap();
    b[at..at + value.len()].copy_from_slice(value);
    std::fs::write(to, b).unwrap();
}

// The tests, one module per tier (docs/testing.md).
mod pure;
mod root;
