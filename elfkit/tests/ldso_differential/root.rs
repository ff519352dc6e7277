//! The root tier of these tests (docs/testing.md).

use super::*;

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
