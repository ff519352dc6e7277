//! Shared libraries as nvcc builds them, for the tests of what a package's GPU code does on a
//! GPU: one module in `.nv_fatbin`, its cubins assembled by the ptxas of a chosen release and
//! packed by fatbinary 13.5, linked with `cc -shared` ([`crate::fatbin_fixtures`] has the
//! reader's fixtures and the tools' plumbing).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fatbin_fixtures::{embedded_c, kernel_ptx, write, Image, PTX_VERSION};
use crate::real_nvidia::RealNvidia;
use crate::run_ok as run;

/// A shared library `DIR/NAME.so` as nvcc builds one, for the tests of what a package's GPU
/// code does on a GPU: one module in `.nv_fatbin` holding SASS for each of `sass` (`"sm_80"`)
/// and PTX for each of `ptx` (`("compute_80", "8.8")`: the target and its ISA version), made
/// by ptxas and fatbinary 13.5 from [`kernel_ptx`], then `cc -shared`; `dir` gets the library
/// alone. Extra `cc` arguments (a runtime to link, a DT_RUNPATH) go in `cc_args`. Its cubins
/// record CUDA 13.5: a CUDA 13 build ([`gpu_library_of`] makes one of another release).
pub fn gpu_library(
    real: &RealNvidia,
    dir: &Path,
    name: &str,
    sass: &[&str],
    ptx: &[(&str, &str)],
    cc_args: &[&str],
) -> PathBuf {
    gpu_library_of(real, "13.5", dir, name, sass, ptx, cc_args)
}

/// [`gpu_library`] with its SASS assembled by the ptxas of CUDA `release` (`"12.9"`, one the
/// cache holds) from the kernel at the newest ISA that release takes, so its cubins record
/// that release; fatbinary 13.5 packs them.
pub fn gpu_library_of(
    real: &RealNvidia,
    release: &str,
    dir: &Path,
    name: &str,
    sass: &[&str],
    ptx: &[(&str, &str)],
    cc_args: &[&str],
) -> PathBuf {
    let ptxas = real
        .ptxas_release(release)
        .unwrap_or_else(|| panic!("no ptxas {release} in the cache"));
    let isa = match release {
        "13.5" => PTX_VERSION,
        "12.9" => "8.8",
        "12.8" => "8.7",
        other => panic!("the kernel's ISA for ptxas {other} is not known here"),
    };
    // Intermediate files (cubins, the .fatbin, the C file) go to a directory of their own, so
    // that `dir` holds the library alone, as an installed package would.
    let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let work = temp.path();
    let mut images = Vec::new();
    for arch in sass {
        let src = work.join(format!("{arch}.ptx"));
        let text = kernel_ptx(arch).replacen(
            &format!(".version {PTX_VERSION}"),
            &format!(".version {isa}"),
            1,
        );
        write(&src, text.as_bytes());
        let cubin = work.join(format!("{arch}.cubin"));
        run(Command::new(&ptxas)
            .arg(format!("--gpu-name={arch}"))
            .arg(&src)
            .arg("-o")
            .arg(&cubin));
        images.push(Image {
            kind: "elf",
            sm: arch.trim_start_matches("sm_").to_string(),
            file: cubin,
        });
    }
    for (target, isa) in ptx {
        let sm = target.trim_start_matches("compute_");
        let text = kernel_ptx(&format!("sm_{sm}")).replacen(
            &format!(".version {PTX_VERSION}"),
            &format!(".version {isa}"),
            1,
        );
        let file = work.join(format!("{target}.ptx"));
        write(&file, text.as_bytes());
        run(Command::new(real.ptxas_13_5())
            .arg(format!("--gpu-name={target}"))
            .arg(&file)
            .arg("-o")
            .arg(work.join(format!("{target}.unused"))));
        images.push(Image {
            kind: "ptx",
            sm: sm.to_string(),
            file,
        });
    }
    let c = embedded_c(real, work, name, &images, false);
    let out = dir.join(format!("{name}.so"));
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(&c)
        .args(cc_args));
    out
}

/// PTX with no kernel for `.target sm_XY` (ISA 7.8): one device function, with `data` a
/// `__device__` and a `__constant__` variable, with `managed` a `__managed__` one
/// (`cuda_sandbox_managed`). ptxas drops the unused function, so the cubin keeps only
/// `.nv.callgraph` and `.nv.rel.action`, as NVIDIA's cuFFT 11.4 sm_52 module does; with `data`
/// it keeps `.nv.global` and `.nv.constant3` too.
pub fn kernelless_ptx(sm: &str, data: bool, managed: bool) -> String {
    let mut text = format!(".version 7.8\n.target {sm}\n.address_size 64\n\n");
    if data {
        text.push_str(".visible .global .align 4 .u32 cuda_sandbox_counter;\n");
        text.push_str(".visible .const .align 4 .u32 cuda_sandbox_table;\n");
    }
    if managed {
        text.push_str(
            ".visible .global .attribute(.managed) .align 4 .u32 cuda_sandbox_managed;\n",
        );
    }
    text.push_str(".visible .func cuda_sandbox_helper()\n{\n\tret;\n}\n");
    text
}

/// A shared library `DIR/NAME.so` whose one module is an sm_52 cubin with no kernel
/// ([`kernelless_ptx`], assembled by ptxas 12.9, packed by fatbinary 13.5): nothing in it can
/// be launched; `data` and `managed` add its variables.
pub fn kernelless_library(
    real: &RealNvidia,
    dir: &Path,
    name: &str,
    data: bool,
    managed: bool,
) -> PathBuf {
    let ptxas = real
        .ptxas_release("12.9")
        .unwrap_or_else(|| panic!("no ptxas 12.9 in the cache"));
    let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let work = temp.path();
    let src = work.join("kernelless.ptx");
    write(&src, kernelless_ptx("sm_52", data, managed).as_bytes());
    let cubin = work.join("kernelless.cubin");
    run(Command::new(&ptxas)
        .arg("--gpu-name=sm_52")
        .arg(&src)
        .arg("-o")
        .arg(&cubin));
    let image = Image {
        kind: "elf",
        sm: "52".into(),
        file: cubin,
    };
    let c = embedded_c(real, work, name, &[image], false);
    let out = dir.join(format!("{name}.so"));
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(&c));
    out
}
