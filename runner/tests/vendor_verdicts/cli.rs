//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn nvidias_libraries_get_the_verdict_of_our_reading_of_nvidias_rules_on_both_routes() {
    let test = "nvidias_libraries_get_the_verdict_of_our_reading_of_nvidias_rules_on_both_routes";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    // The rows, by driver.
    let mut rows: BTreeMap<String, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for line in TABLE.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (head, cells) = line.split_once('|').unwrap();
        let head: Vec<&str> = head.split_whitespace().collect();
        let cells: Vec<String> = cells.split_whitespace().map(str::to_owned).collect();
        assert_eq!(cells.len(), TARGETS.len(), "{line}");
        rows.entry(head[1].to_owned())
            .or_default()
            .push((head[0].to_owned(), cells));
    }
    for name in [
        "cufft", "cufftw", "curand12", "curand13", "nvjpeg12", "nvjpeg13",
    ] {
        if !real.has(test, &file(&real, name)) {
            return;
        }
    }
    let no_gpu = FakeDriver::driver(&Sidecar {
        mode: Mode::NoKernelModule,
        ..Sidecar::default()
    });
    let mut wrong = Vec::new();
    let mut cells = 0;
    for (driver, files) in &rows {
        let paths: Vec<PathBuf> = files.iter().map(|(name, _)| file(&real, name)).collect();
        let lint = by_lint(&paths, &TARGETS, driver);
        let package = by_package(&no_gpu, &paths, &TARGETS, driver);
        for ((name, row), path) in files.iter().zip(&paths) {
            for (cell, target) in row.iter().zip(TARGETS) {
                cells += 1;
                let (verdict, rule) = expected(cell);
                let key = (path.clone(), target.to_owned());
                let shown = format!("{name} on {target} with a CUDA {driver} driver");
                let Some(l) = lint.get(&key) else {
                    wrong.push(format!("{shown}: lint gave no verdict"));
                    continue;
                };
                if (l.0.as_str(), l.1.as_str()) != (verdict, rule) {
                    wrong.push(format!(
                        "{shown}: lint says {} by {}, the table {verdict} by {rule} ({})",
                        l.0, l.1, l.2
                    ));
                }
                match package.get(&key) {
                    Some(p) if p == l => {}
                    Some(p) => wrong.push(format!(
                        "{shown}: the routes disagree: lint {l:?}, --package {p:?}"
                    )),
                    None => wrong.push(format!("{shown}: --package gave no verdict")),
                }
            }
        }
    }
    assert!(cells >= 300, "{cells} cells");
    assert!(
        wrong.is_empty(),
        "{} of {cells} cells wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Issue 47: NVIDIA's libraries keep kernels for some GPUs in modules of their own, so a module
/// without code for the GPU must not fail the file. Every pair NVIDIA (or the project) lists as
/// supported runs, wholly or partly; every pair outside support cannot run; `lint` and
/// `--package` give the same verdict, rule and words.
#[test]
fn libraries_run_where_their_makers_support_them_and_not_elsewhere_on_both_routes() {
    let test = "libraries_run_where_their_makers_support_them_and_not_elsewhere_on_both_routes";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    for (name, ..) in SUPPORT {
        if !real.has(test, &file(&real, name)) {
            return;
        }
    }
    let no_gpu = FakeDriver::driver(&Sidecar {
        mode: Mode::NoKernelModule,
        ..Sidecar::default()
    });
    let mut by_driver: BTreeMap<&str, (Vec<PathBuf>, Vec<&str>)> = BTreeMap::new();
    for (name, target, driver, ..) in SUPPORT {
        let (files, targets) = by_driver.entry(driver).or_default();
        let path = file(&real, name);
        if !files.contains(&path) {
            files.push(path);
        }
        if !targets.contains(target) {
            targets.push(target);
        }
    }
    let mut wrong = Vec::new();
    let mut partly = 0;
    for (driver, (files, targets)) in &by_driver {
        let lint = by_lint(files, targets, driver);
        let package = by_package(&no_gpu, files, targets, driver);
        for (name, target, _, supported, source) in SUPPORT.iter().filter(|r| r.2 == *driver) {
            let key = (file(&real, name), (*target).to_owned());
            let shown = format!("{name} on {target} with a CUDA {driver} driver ({source})");
            let Some(l) = lint.get(&key) else {
                wrong.push(format!("{shown}: lint gave no verdict"));
                continue;
            };
            let runs = matches!(l.0.as_str(), "runs-by-sass" | "runs-by-jit" | "runs-partly");
            partly += usize::from(l.0 == "runs-partly");
            if *supported && !runs {
                wrong.push(format!(
                    "{shown}: supported, but lint says {} ({})",
                    l.0, l.2
                ));
            }
            if !*supported && l.0 != "fails" {
                wrong.push(format!(
                    "{shown}: not supported, but lint says {} ({})",
                    l.0, l.2
                ));
            }
            match package.get(&key) {
                Some(p) if p == l => {}
                Some(p) => wrong.push(format!("{shown}: lint {l:?}, --package {p:?}")),
                None => wrong.push(format!("{shown}: --package gave no verdict")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} row(s) wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // The rows the issue names run partly: a module-wide verdict would fail them.
    assert!(partly >= 5, "only {partly} row(s) run partly");
}
