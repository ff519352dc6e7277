//! `loader::resolve` against the real dynamic loader (this machine's glibc): programs and
//! libraries built with `cc` (DT_RUNPATH, DT_RPATH, `$ORIGIN`), fake `libcuda.so.1` files in
//! several directories, and the loader's own account of its search (`LD_DEBUG=libs`: the
//! "trying file=" lines and the "search path=… (RUNPATH from file …)" labels) compared with
//! ours, file by file, on the directories that exist. glibc does not retry a directory it found
//! missing, and tries legacy hwcaps subdirectories we do not model; neither exists here.

use cuda_sandbox_check::loader::{self, Outcome, RealFs, Resolution, SearchContext, Source};
use std::path::{Path, PathBuf};
use std::process::Command;

const INTERP: &str = "/lib64/ld-linux-x86-64.so.2";

/// dlopens `libcuda.so.1` itself, or with an argument dlopens that library and calls its
/// `go`, which does; prints `FOUND <l_name>` or `ERROR <dlerror>`.
const PROG: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
static void report(void *h) {
    struct link_map *m;
    if (!h) { printf("ERROR %s\n", dlerror()); return; }
    dlinfo(h, RTLD_DI_LINKMAP, &m);
    printf("FOUND %s\n", m->l_name);
}
void go(void) { report(dlopen("libcuda.so.1", RTLD_NOW)); }
int main(int argc, char **argv) {
    if (argc < 2) { go(); return 0; }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { printf("ERROR %s\n", dlerror()); return 1; }
    void (*g)(void) = (void (*)(void))dlsym(lib, "go");
    g();
    return 0;
}
"#;

/// A library whose `go` dlopens `libcuda.so.1` (a libcudart, or anything with a static one).
const MID: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
void go(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    struct link_map *m;
    if (!h) { printf("ERROR %s\n", dlerror()); return; }
    dlinfo(h, RTLD_DI_LINKMAP, &m);
    printf("FOUND %s\n", m->l_name);
}
"#;

/// Links `libcuda.so.1` (DT_NEEDED) and prints where `cuInit` came from.
const NEEDS: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int cuInit(unsigned int);
int main(void) {
    Dl_info i;
    cuInit(0);
    dladdr((void *)cuInit, &i);
    printf("FOUND %s\n", i.dli_fname);
    return 0;
}
"#;

fn cc(src: &str, out: &Path, args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("x.c");
    std::fs::write(&c, src).unwrap();
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

fn fake_libcuda(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("libcuda.so.1");
    cuda_sandbox_testkit::shared_library(&p, Some("libcuda.so.1")).unwrap();
    p
}

fn dirs(root: &Path, names: &[&str]) {
    for n in names {
        std::fs::create_dir_all(root.join(n)).unwrap();
    }
}

/// Whether this machine's loader can be the oracle: glibc's x86-64 loader whose cache does not
/// know `libcuda.so.1` (else the cache, which is not modelled, could answer first).
/// Under `CI=true` a machine without that oracle fails the test instead.
fn oracle_available(test: &str) -> bool {
    let skip = |why: String| {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test} must run in CI: {why}");
        }
        eprintln!("{test}: skipped, {why}");
        false
    };
    if !Path::new(INTERP).exists() {
        return skip(format!("no {INTERP}"));
    }
    let cache = Command::new("ldconfig").arg("-p").output();
    if let Ok(o) = cache {
        if String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1") {
            return skip("ld.so.cache lists libcuda.so.1".into());
        }
    }
    true
}

/// What the real loader did: the program's last line, and for the search of `libcuda.so.1`
/// each file tried with the kind of list it came from (`RUNPATH`, `LD_LIBRARY_PATH`, …).
struct Real {
    line: String,
    tried: Vec<(PathBuf, String)>,
    log: String,
}

fn run_real(prog: &Path, args: &[&Path], llp: Option<&str>) -> Real {
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("LD_DEBUG", "libs")
        .env_remove("LD_LIBRARY_PATH");
    if let Some(l) = llp {
        cmd.env("LD_LIBRARY_PATH", l);
    }
    let o = cmd.output().expect("run the test program");
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    let mut tried = Vec::new();
    let mut kind = String::new();
    let mut inside = false;
    for l in log.lines() {
        // "      PID:\tmessage"
        let msg = l.split_once(":\t").map(|(_, m)| m).unwrap_or("");
        if msg.starts_with("find library=libcuda.so.1 ") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if msg.is_empty() {
            break;
        }
        if let Some(sp) = msg.trim_start().strip_prefix("search path=") {
            let label = sp.rsplit_once("\t\t(").map(|(_, k)| k).unwrap_or("");
            let label = label.trim_end_matches(')');
            kind = label.split(" from file").next().unwrap().to_string();
        } else if let Some(f) = msg.trim_start().strip_prefix("trying file=") {
            tried.push((PathBuf::from(f), kind.clone()));
        }
    }
    assert!(inside, "the loader did not search libcuda.so.1:\n{log}");
    Real { line, tried, log }
}

fn parent_exists(f: &Path) -> bool {
    match f.parent() {
        Some(p) if p.as_os_str().is_empty() => true,
        Some(p) => p.is_dir(),
        None => false,
    }
}

/// Ours and the loader's, file by file on existing directories, list kinds included.
fn assert_same_search(ours: &Resolution, real: &Real) {
    let ours_tried: Vec<(PathBuf, String)> = ours
        .tried
        .iter()
        .filter(|t| t.dir_exists)
        .map(|t| (t.file.clone(), t.source.ld_debug_kind().to_string()))
        .collect();
    let real_tried: Vec<(PathBuf, String)> = real
        .tried
        .iter()
        .filter(|(f, _)| parent_exists(f))
        .cloned()
        .collect();
    assert!(!real_tried.is_empty(), "nothing tried:\n{}", real.log);
    assert_eq!(
        ours_tried,
        real_tried,
        "search order differs; ours: {}\nloader log:\n{}",
        ours.describe(),
        real.log
    );
}

fn context(exe: &Path, llp: Option<&str>) -> SearchContext {
    let mut ctx = SearchContext::for_process(Path::new(INTERP), Some(exe), llp).unwrap();
    ctx.dst_lib = "lib/x86_64-linux-gnu".into(); // Debian's $LIB (measured)
    ctx
}

fn info_of(path: &Path) -> cuda_sandbox_elfkit::DynamicInfo {
    cuda_sandbox_elfkit::dynamic_info(&std::fs::read(path).unwrap())
        .unwrap()
        .unwrap()
}

/// Our resolution of `libcuda.so.1` for `object`, held to what the real loader tried.
fn resolved_like(
    real: &Real,
    object: &Path,
    info: &cuda_sandbox_elfkit::DynamicInfo,
    ctx: &SearchContext,
) -> Resolution {
    let res = loader::resolve("libcuda.so.1", object, info, ctx, &RealFs);
    assert_same_search(&res, real);
    res
}

fn found_line(res: &Resolution) -> String {
    match &res.outcome {
        Outcome::Found { path, .. } => format!("FOUND {}", path.display()),
        other => format!("{other:?}"),
    }
}

#[test]
fn the_executables_runpath_comes_after_ld_library_path_and_origin_is_its_real_directory() {
    if !oracle_available("runpath") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    dirs(d, &["bin", "a", "llp", "links"]);
    fake_libcuda(&d.join("b"));
    let prog = d.join("bin/prog");
    let rp = format!(
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../a:{}/b",
        d.display()
    );
    cc(PROG, &prog, &[&rp, "-ldl"]);
    // Run through a symlink in another directory: $ORIGIN is the real one (bin/).
    let link = d.join("links/prog");
    std::os::unix::fs::symlink(&prog, &link).unwrap();
    let llp = format!("{}/llp", d.display());
    let real = run_real(&link, &[], Some(&llp));
    let ctx = context(&link, Some(&llp));
    let res = resolved_like(&real, &link, &info_of(&prog), &ctx);
    assert_eq!(found_line(&res), real.line);
    let Outcome::Found {
        real_path, source, ..
    } = &res.outcome
    else {
        unreachable!()
    };
    assert_eq!(source, &Source::Runpath(link.clone()));
    assert_eq!(
        real_path.as_deref(),
        Some(d.join("b/libcuda.so.1").canonicalize().unwrap().as_path())
    );
    let kinds: Vec<_> = res.lists.iter().map(|l| l.source.ld_debug_kind()).collect();
    assert_eq!(kinds, ["LD_LIBRARY_PATH", "RUNPATH", "system search path"]);
    assert!(
        res.describe().starts_with(&format!(
            "LD_LIBRARY_PATH [{llp}], then DT_RUNPATH [{}/bin/../a:{}/b], then ld.so.cache",
            d.canonicalize().unwrap().display(),
            d.display()
        )),
        "{}",
        res.describe()
    );
}

#[test]
fn the_executables_rpath_comes_before_ld_library_path() {
    if !oracle_available("rpath") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    dirs(d, &["a"]);
    let want = fake_libcuda(&d.join("b"));
    fake_libcuda(&d.join("llp"));
    let prog = d.join("prog");
    let rp = format!(
        "-Wl,--disable-new-dtags,-rpath,{}/a:{}/b",
        d.display(),
        d.display()
    );
    cc(PROG, &prog, &[&rp, "-ldl"]);
    let llp = format!("{}/llp", d.display());
    let real = run_real(&prog, &[], Some(&llp));
    let res = resolved_like(&real, &prog, &info_of(&prog), &context(&prog, Some(&llp)));
    assert_eq!(real.line, format!("FOUND {}", want.display()));
    assert_eq!(found_line(&res), real.line);
    // Without the one in b/, LD_LIBRARY_PATH's comes next.
    std::fs::remove_file(&want).unwrap();
    let real = run_real(&prog, &[], Some(&llp));
    let res = resolved_like(&real, &prog, &info_of(&prog), &context(&prog, Some(&llp)));
    assert_eq!(real.line, format!("FOUND {llp}/libcuda.so.1"));
    assert_eq!(found_line(&res), real.line);
}

#[test]
fn a_library_doing_the_dlopen_uses_its_own_runpath_not_the_executables() {
    if !oracle_available("library runpath") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fake_libcuda(&d.join("exe-rp"));
    let want = fake_libcuda(&d.join("mid-rp"));
    dirs(d, &["real", "sym"]);
    let prog = d.join("prog");
    let rp = format!("-Wl,--enable-new-dtags,-rpath,{}/exe-rp", d.display());
    cc(PROG, &prog, &[&rp, "-ldl"]);
    // libcudart-like: DT_RUNPATH with $ORIGIN; loaded through a symlink, whose directory is
    // its $ORIGIN (the loader does not follow it).
    let mid = d.join("real/libmid.so");
    cc(
        MID,
        &mid,
        &[
            "-shared",
            "-fPIC",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../mid-rp",
            "-ldl",
        ],
    );
    let sym = d.join("sym/libmid.so");
    std::os::unix::fs::symlink(&mid, &sym).unwrap();
    let real = run_real(&prog, &[&sym], None);
    let ctx = context(&prog, None);
    let res = resolved_like(&real, &sym, &info_of(&mid), &ctx);
    assert_eq!(
        real.line,
        format!("FOUND {}/sym/../mid-rp/libcuda.so.1", d.display())
    );
    assert_eq!(found_line(&res), real.line);
    assert!(res.tried.iter().all(|t| !t.dir.contains("exe-rp")));
    assert!(want.exists());
}

#[test]
fn a_library_without_runpath_gets_the_executables_rpath() {
    if !oracle_available("executable rpath") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let want = fake_libcuda(&d.join("exe-rpath"));
    let prog = d.join("prog");
    let rp = "-Wl,--disable-new-dtags,-rpath,$ORIGIN/exe-rpath";
    cc(PROG, &prog, &[rp, "-ldl"]);
    let mid = d.join("libplain.so");
    cc(MID, &mid, &["-shared", "-fPIC", "-ldl"]);
    let real = run_real(&prog, &[&mid], None);
    let ctx = context(&prog, None);
    assert_eq!(
        ctx.executable_rpath,
        Some(vec!["$ORIGIN/exe-rpath".to_string()])
    );
    let res = resolved_like(&real, &mid, &info_of(&mid), &ctx);
    let canon = d.canonicalize().unwrap();
    assert_eq!(
        real.line,
        format!("FOUND {}/exe-rpath/libcuda.so.1", canon.display())
    );
    assert_eq!(found_line(&res), real.line);
    assert!(want.exists());
    // With DT_RUNPATH of its own, the library gets no DT_RPATH at all.
    let mid2 = d.join("librp.so");
    let own = format!("-Wl,--enable-new-dtags,-rpath,{}/nothing-here", d.display());
    cc(MID, &mid2, &["-shared", "-fPIC", &own, "-ldl"]);
    let real = run_real(&prog, &[&mid2], None);
    let res = resolved_like(&real, &mid2, &info_of(&mid2), &ctx);
    assert!(real.line.starts_with("ERROR "), "{}", real.line);
    assert_eq!(res.outcome, Outcome::NotFound { other_class: false });
}

/// Rewrites the ELF header of a copy of a real libcuda: another class or another machine.
fn patched(from: &Path, to_dir: &Path, at: usize, value: &[u8]) {
    std::fs::create_dir_all(to_dir).unwrap();
    let mut b = std::fs::read(from).unwrap();
    b[at..at + value.len()].copy_from_slice(value);
    std::fs::write(to_dir.join("libcuda.so.1"), b).unwrap();
}

#[test]
fn wrong_class_and_machine_are_skipped_and_a_non_elf_file_ends_the_search() {
    if !oracle_available("wrong class") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let want = fake_libcuda(&d.join("good"));
    patched(&want, &d.join("class32"), 4, &[1]); // EI_CLASS = ELFCLASS32
    patched(&want, &d.join("aarch64"), 18, &183u16.to_le_bytes()); // e_machine
    let prog = d.join("prog");
    let rp = format!(
        "-Wl,--enable-new-dtags,-rpath,{0}/class32:{0}/aarch64:{0}/good",
        d.display()
    );
    cc(PROG, &prog, &[&rp, "-ldl"]);
    let real = run_real(&prog, &[], None);
    // (glibc 2.36 skips them silently; newer ones log "(incompatible ELF class)".)
    let ctx = context(&prog, None);
    let res = resolved_like(&real, &prog, &info_of(&prog), &ctx);
    assert_eq!(real.line, format!("FOUND {}", want.display()));
    assert_eq!(found_line(&res), real.line);
    // Only the other-class ones left: "wrong ELF class".
    std::fs::remove_file(&want).unwrap();
    std::fs::remove_dir_all(d.join("aarch64")).unwrap();
    let real = run_real(&prog, &[], None);
    let res = resolved_like(&real, &prog, &info_of(&prog), &ctx);
    assert!(
        real.line.contains("wrong ELF class: ELFCLASS32"),
        "{}",
        real.line
    );
    assert_eq!(res.outcome, Outcome::NotFound { other_class: true });
    // A file that is not ELF (a linker script, say) ends the search with an error, though a
    // good one comes later.
    fake_libcuda(&d.join("good"));
    std::fs::write(
        d.join("class32/libcuda.so.1"),
        "/* GNU ld script: the driver is elsewhere */\nINPUT(libcuda.so.575.57.08)\n",
    )
    .unwrap();
    let real = run_real(&prog, &[], None);
    let res = resolved_like(&real, &prog, &info_of(&prog), &ctx);
    assert!(real.line.contains("invalid ELF header"), "{}", real.line);
    assert_eq!(
        res.outcome,
        Outcome::Error {
            path: d.join("class32/libcuda.so.1"),
            reason: "invalid ELF header".into()
        }
    );
}

#[test]
fn dt_needed_libcuda_is_searched_from_the_executable() {
    if !oracle_available("DT_NEEDED") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let stub = fake_libcuda(&d.join("stub"));
    dirs(d, &["empty"]);
    let want = fake_libcuda(&d.join("lib"));
    let prog = d.join("prog");
    let rp = format!(
        "-Wl,--enable-new-dtags,-rpath,{0}/empty:{0}/lib",
        d.display()
    );
    let l = format!("-L{}", d.join("stub").display());
    cc(NEEDS, &prog, &[&l, "-l:libcuda.so.1", &rp, "-ldl"]);
    std::fs::remove_file(&stub).unwrap();
    let info = info_of(&prog);
    assert!(info.needs_libcuda());
    let real = run_real(&prog, &[], None);
    let res = loader::resolve("libcuda.so.1", &prog, &info, &context(&prog, None), &RealFs);
    assert_same_search(&res, &real);
    assert_eq!(real.line, format!("FOUND {}", want.display()));
    assert_eq!(found_line(&res), real.line);
}

#[test]
fn this_loaders_default_directories() {
    let Ok(dirs) = loader::default_dirs_of(Path::new(INTERP)) else {
        eprintln!("skipped: {INTERP} --help does not list them (glibc < 2.33?)");
        return;
    };
    assert!(!dirs.is_empty());
    assert!(dirs.iter().all(|d| d.is_absolute()), "{dirs:?}");
    let info = loader::interpreter_info(Path::new(INTERP)).unwrap();
    eprintln!("{INTERP}: {info:?}");
}
