//! The pure tier of these tests (docs/testing.md).

use super::*;

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
