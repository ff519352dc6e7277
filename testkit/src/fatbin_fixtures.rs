//! Fat binaries made by NVIDIA's own CUDA 13.5 tools (`ptxas`, `fatbinary`, then `cc` and
//! `ar` as nvcc drives them) from a small kernel of ours, and `cuobjdump`'s listing of them:
//! the ground truth a fat-binary reader is held to.
//!
//! What cuobjdump 13.5 does, measured on these fixtures and on the cache's cuRAND:
//!
//! - It prints `ELF file    N: NAME` and `PTX file    N: NAME` in file order. `N` is a running
//!   number per kind (ELF and PTX counted apart) over the whole file: every container, every
//!   section and every archive member. It is not the container's index: one container of five
//!   images lists as ELF 1..3 and PTX 1..2, and cuRAND's 13 containers list as 93 + 93.
//! - `NAME` is `STEM.N.ARCH.cubin` or `STEM.N.ARCH.ptx`, where `STEM` is the file name less its
//!   last extension (`libcurand.so` for `libcurand.so.10`, `librel` for `librel.a`); a bare
//!   cubin lists as `STEM.ARCH.cubin` with no number.
//! - An `sm_XYf` cubin lists as `sm_XY` (the `f` is dropped); an `sm_XYa` cubin keeps its `a`.
//!   PTX keeps both: `compute_100f` PTX lists as `sm_100f`, `compute_90a` as `sm_90a`.
//! - An archive's entries follow a line `member /ABSOLUTE/PATH.a:MEMBER.o:` for each member
//!   with device code, the numbering carrying on from member to member.
//! - Without `--all-fatbin` it lists only the executable fat binary (`.nv_fatbin`) of a file
//!   that also has a relocatable one (`__nv_relfatbin`); [`cuobjdump_list`] passes it.
//! - A container held as a plain byte array in `.rodata` is not found: cuobjdump prints
//!   `File '...' does not contain device code` and exits 255. So does a PTX text file.
//! - `--concat` entries (kind 0x100, several images in one compressed entry) list like the
//!   separate images they hold.
//! - `--list-text` lists the SASS text section of each kernel in each cubin
//!   (`SASS text section 1 : x-saxpy.sm_100.elf.bin`), nothing the entry lists lack, so it is
//!   not used. No option lists NVVM (LTO-IR) entries, and these tools cannot make one.

use crate::real_nvidia::RealNvidia;
use crate::run_ok as run;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PTX ISA version of the kernel: the lowest that ptxas 13.5 accepts for every target
/// (`sm_107*` needs 9.4, `sm_88` and `sm_110*` 9.0, `sm_103*` and `sm_121*` 8.8).
pub const PTX_VERSION: &str = "9.4";

/// The kernel's PTX for `.target target` (an `sm_*` name, `a` or `f` suffix included):
/// `saxpy(x, y, a, n)` sets `y[i] = a * x[i] + y[i]` for each thread's `i < n`.
pub fn kernel_ptx(target: &str) -> String {
    format!(
        "\
.version {PTX_VERSION}
.target {target}
.address_size 64

.visible .entry saxpy(
\t.param .u64 saxpy_x,
\t.param .u64 saxpy_y,
\t.param .f32 saxpy_a,
\t.param .u32 saxpy_n
)
{{
\t.reg .pred %p<2>;
\t.reg .b32 %r<6>;
\t.reg .f32 %f<5>;
\t.reg .b64 %rd<8>;

\tld.param.u64 %rd1, [saxpy_x];
\tld.param.u64 %rd2, [saxpy_y];
\tld.param.f32 %f1, [saxpy_a];
\tld.param.u32 %r2, [saxpy_n];
\tmov.u32 %r3, %ctaid.x;
\tmov.u32 %r4, %ntid.x;
\tmov.u32 %r5, %tid.x;
\tmad.lo.s32 %r1, %r3, %r4, %r5;
\tsetp.ge.u32 %p1, %r1, %r2;
\t@%p1 bra DONE;
\tcvta.to.global.u64 %rd3, %rd1;
\tcvta.to.global.u64 %rd4, %rd2;
\tmul.wide.u32 %rd5, %r1, 4;
\tadd.s64 %rd6, %rd3, %rd5;
\tadd.s64 %rd7, %rd4, %rd5;
\tld.global.f32 %f2, [%rd6];
\tld.global.f32 %f3, [%rd7];
\tfma.rn.f32 %f4, %f2, %f1, %f3;
\tst.global.f32 [%rd7], %f4;
DONE:
\tret;
}}
"
    )
}

/// What kind of file a [`Fixture`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixtureKind {
    /// A bare cubin from ptxas (not a fat binary).
    Cubin,
    /// A PTX text file (not a fat binary).
    Ptx,
    /// A file of fat-binary containers, as `fatbinary --create` writes it.
    Fatbin,
    /// An ELF shared object.
    SharedObject,
    /// An ELF relocatable object (`.o`).
    Object,
    /// An `ar` archive of objects.
    Archive,
}

/// One file made by [`build`].
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Where it is.
    pub path: PathBuf,
    /// What it holds and how it was made, for messages.
    pub what: String,
    /// What kind of file it is.
    pub kind: FixtureKind,
    /// How many images (cubins and PTX files) NVIDIA's tools put into it, over all its
    /// containers, sections and members.
    pub images: usize,
}

/// The `--gpu-name` values ptxas 13.5 accepts, in the order `ptxas --help` lists them:
/// real `sm_*`, virtual `compute_*` (PTX only) and `lto_*`.
pub fn gpu_names(real: &RealNvidia) -> Vec<String> {
    let help = stdout(Command::new(real.ptxas_13_5()).arg("--help"));
    let option = help
        .find("--gpu-name")
        .expect("ptxas --help documents --gpu-name");
    let rest = &help[option..];
    let start = rest
        .find("Allowed values for this option:")
        .expect("ptxas --help lists the --gpu-name values");
    let end = rest[start..]
        .find("Default value")
        .map_or(rest.len(), |e| start + e);
    let names: Vec<String> = rest[start..end]
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("sm_")),
        "no sm_* value in ptxas --help: {names:?}"
    );
    names
}

/// An image given to `fatbinary --image3`.
#[derive(Clone)]
pub(crate) struct Image {
    /// `elf` or `ptx`.
    pub(crate) kind: &'static str,
    /// The architecture without its `sm_` or `compute_` prefix: `90a`.
    pub(crate) sm: String,
    /// The cubin or PTX file.
    pub(crate) file: PathBuf,
}

impl Image {
    fn arg(&self) -> String {
        format!(
            "--image3=kind={},sm={},file={}",
            self.kind,
            self.sm,
            self.file.display()
        )
    }

    /// Whether the architecture is arch-specific (`a`) or family-specific (`f`).
    fn suffixed(&self) -> bool {
        self.sm.ends_with('a') || self.sm.ends_with('f')
    }
}

/// The relocatable cubins (`ptxas -c`) of the `--device-c` fixtures: `rel1.o` has the first
/// two, `rel2.o` the others.
const RELOCATABLE: [&str; 4] = ["sm_75", "sm_90a", "sm_100f", "sm_120"];

/// Builds the fixtures into `dir` (created if need be) with ptxas 13.5 and fatbinary 13.5, then
/// `cc` and `ar`, and checks the sections each ELF file should have with `readelf`. A failing
/// tool panics with its stderr. About 1.5 MB and a few seconds. The fixtures:
///
/// - `cubin/sm_*.cubin`: one per `sm_*` value ptxas accepts ([`gpu_names`]);
///   `ptx/compute_*.ptx`: one per `compute_*` value, `.target` the same name as `sm_*`,
///   checked by ptxas. Each is a fixture of its own.
/// - `all.fatbin`: every cubin and PTX, fatbinary's defaults (PTX compressed, ELF not).
/// - `compress-{none,default,speed,size,balance}.fatbin`: the same, `--compress-mode=MODE`;
///   `compress-all.fatbin`: the same, `--compress-all`.
/// - `concat.fatbin`: the same, `--concat` (CUDA 13's concatenated kind-0x100 entries).
/// - `af-only.fatbin`: only the `a` and `f` cubins and PTX.
/// - `small.fatbin`: the `sm_75` cubin and `compute_75` PTX.
/// - `two-containers.fatbin`: `small.fatbin` then `af-only.fatbin`, back to back.
/// - `embedded.so`: two C files, each including a `fatbinary --embedded-fatbin` file (every
///   image; the `small` images), linked with `cc -shared`: two containers in `.nv_fatbin`,
///   two wrappers in `.nvFatBinSegment`.
/// - `rel1.o`, `rel2.o`: `fatbinary --device-c --embedded-fatbin` of relocatable cubins
///   (`sm_75`, `sm_90a` and `compute_75` PTX; `sm_100f`, `sm_120`), compiled with `cc -c`:
///   `__nv_relfatbin`. `librel.a`: both, with `ar`.
/// - `exec-and-rel.so`: the `small` executable fat binary and `rel1.o` in one shared object:
///   `.nv_fatbin` and `__nv_relfatbin`.
/// - `rodata.so`: the bytes of `two-containers.fatbin` as a `static const unsigned char`
///   array (8-aligned) in `.rodata`, kept by a function returning it; no fat-binary section.
pub fn build(real: &RealNvidia, dir: &Path) -> Vec<Fixture> {
    let names = gpu_names(real);
    let ptxas = real.ptxas_13_5();
    let src_dir = dir.join("src");
    let cubin_dir = dir.join("cubin");
    let ptx_dir = dir.join("ptx");
    let rel_dir = dir.join("rel");
    for d in [&src_dir, &cubin_dir, &ptx_dir, &rel_dir] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
    }
    let mut fixtures = Vec::new();
    let mut cubins = Vec::new();
    let mut ptxs = Vec::new();
    for name in &names {
        if let Some(sm) = name.strip_prefix("sm_") {
            let src = src_dir.join(format!("{name}.ptx"));
            write(&src, kernel_ptx(name).as_bytes());
            let cubin = cubin_dir.join(format!("{name}.cubin"));
            run(Command::new(&ptxas)
                .arg(format!("--gpu-name={name}"))
                .arg(&src)
                .arg("-o")
                .arg(&cubin));
            fixtures.push(Fixture {
                path: cubin.clone(),
                what: format!("{name} cubin (ptxas 13.5, PTX ISA {PTX_VERSION})"),
                kind: FixtureKind::Cubin,
                images: 1,
            });
            cubins.push(Image {
                kind: "elf",
                sm: sm.to_string(),
                file: cubin,
            });
        } else if let Some(sm) = name.strip_prefix("compute_") {
            let ptx = ptx_dir.join(format!("{name}.ptx"));
            write(&ptx, kernel_ptx(&format!("sm_{sm}")).as_bytes());
            // A virtual architecture only parses: ptxas checks the PTX and writes nothing.
            run(Command::new(&ptxas)
                .arg(format!("--gpu-name={name}"))
                .arg(&ptx)
                .arg("-o")
                .arg(src_dir.join(format!("{name}.unused"))));
            fixtures.push(Fixture {
                path: ptx.clone(),
                what: format!("{name} PTX (.target sm_{sm}, ISA {PTX_VERSION})"),
                kind: FixtureKind::Ptx,
                images: 1,
            });
            ptxs.push(Image {
                kind: "ptx",
                sm: sm.to_string(),
                file: ptx,
            });
        }
    }
    let every: Vec<Image> = cubins.iter().chain(&ptxs).cloned().collect();
    let every_what = format!("{} cubins and {} PTX files", cubins.len(), ptxs.len());

    let mut fatbin = |name: &str, images: &[Image], flags: &[&str], what: String| {
        let path = dir.join(name);
        let mut cmd = Command::new(real.fatbinary());
        cmd.arg(format!("--create={}", path.display()))
            .args(flags)
            .args(images.iter().map(Image::arg));
        run(&mut cmd);
        fixtures.push(Fixture {
            path: path.clone(),
            what,
            kind: FixtureKind::Fatbin,
            images: images.len(),
        });
        path
    };
    fatbin(
        "all.fatbin",
        &every,
        &[],
        format!("one container of {every_what}, fatbinary's default compression"),
    );
    for mode in ["none", "default", "speed", "size", "balance"] {
        fatbin(
            &format!("compress-{mode}.fatbin"),
            &every,
            &[&format!("--compress-mode={mode}")],
            format!("one container of {every_what}, --compress-mode={mode}"),
        );
    }
    fatbin(
        "compress-all.fatbin",
        &every,
        &["--compress-all"],
        format!("one container of {every_what}, --compress-all (ELF compressed too)"),
    );
    fatbin(
        "concat.fatbin",
        &every,
        &["--concat"],
        format!("one container of {every_what}, --concat: a few kind-0x100 entries holding them"),
    );
    let af: Vec<Image> = every.iter().filter(|i| i.suffixed()).cloned().collect();
    let af_fatbin = fatbin(
        "af-only.fatbin",
        &af,
        &[],
        format!("one container of the {} 'a' and 'f' images only", af.len()),
    );
    let small: Vec<Image> = every.iter().filter(|i| i.sm == "75").cloned().collect();
    assert_eq!(small.len(), 2, "ptxas 13.5 lists sm_75 and compute_75");
    let small_fatbin = fatbin(
        "small.fatbin",
        &small,
        &[],
        "one container: the sm_75 cubin and compute_75 PTX".to_string(),
    );
    let two = dir.join("two-containers.fatbin");
    let mut bytes = read(&small_fatbin);
    bytes.extend(read(&af_fatbin));
    write(&two, &bytes);
    fixtures.push(Fixture {
        path: two,
        what: "two containers back to back: small.fatbin then af-only.fatbin".to_string(),
        kind: FixtureKind::Fatbin,
        images: small.len() + af.len(),
    });

    // Executable fat binaries embedded as nvcc does: fatbinary writes a C include file whose
    // asm puts the container in .nv_fatbin and whose wrapper goes in .nvFatBinSegment.
    let embedded = dir.join("embedded.so");
    let tu1 = embedded_c(real, dir, "embedded1", &every, false);
    let tu2 = embedded_c(real, dir, "embedded2", &small, false);
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&embedded)
        .arg(&tu1)
        .arg(&tu2));
    expect_sections(&embedded, &[".nv_fatbin", ".nvFatBinSegment"], &[]);
    fixtures.push(Fixture {
        path: embedded,
        what: format!(
            "shared object of two translation units: .nv_fatbin holds one container of \
             {every_what} and one of the sm_75 cubin and compute_75 PTX"
        ),
        kind: FixtureKind::SharedObject,
        images: every.len() + small.len(),
    });

    // Relocatable fat binaries (nvcc -rdc): relocatable cubins, fatbinary --device-c.
    let rel: Vec<Image> = RELOCATABLE
        .iter()
        .map(|name| {
            assert!(
                names.iter().any(|n| n == name),
                "ptxas 13.5 no longer lists {name}"
            );
            let file = rel_dir.join(format!("{name}.cubin"));
            run(Command::new(&ptxas)
                .args(["-c", &format!("--gpu-name={name}")])
                .arg(src_dir.join(format!("{name}.ptx")))
                .arg("-o")
                .arg(&file));
            Image {
                kind: "elf",
                sm: name["sm_".len()..].to_string(),
                file,
            }
        })
        .collect();
    let compute_75 = small.iter().find(|i| i.kind == "ptx").expect("compute_75");
    let rel1_images = vec![rel[0].clone(), rel[1].clone(), compute_75.clone()];
    let rel2_images = rel[2..].to_vec();
    let mut objects = Vec::new();
    for (stem, images, what) in [
        (
            "rel1",
            &rel1_images,
            "relocatable sm_75 and sm_90a cubins and compute_75 PTX",
        ),
        (
            "rel2",
            &rel2_images,
            "relocatable sm_100f and sm_120 cubins",
        ),
    ] {
        let c = embedded_c(real, dir, stem, images, true);
        let object = dir.join(format!("{stem}.o"));
        run(Command::new("cc")
            .args(["-c", "-fPIC", "-O2", "-o"])
            .arg(&object)
            .arg(&c));
        expect_sections(
            &object,
            &["__nv_relfatbin", ".nvFatBinSegment"],
            &[".nv_fatbin"],
        );
        fixtures.push(Fixture {
            path: object.clone(),
            what: format!("object with one container in __nv_relfatbin: {what}"),
            kind: FixtureKind::Object,
            images: images.len(),
        });
        objects.push(object);
    }
    let archive = dir.join("librel.a");
    let _ = std::fs::remove_file(&archive);
    run(Command::new("ar").arg("rcs").arg(&archive).args(&objects));
    fixtures.push(Fixture {
        path: archive,
        what: "ar archive of rel1.o and rel2.o".to_string(),
        kind: FixtureKind::Archive,
        images: rel1_images.len() + rel2_images.len(),
    });

    let both = dir.join("exec-and-rel.so");
    let exec_c = embedded_c(real, dir, "exec", &small, false);
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&both)
        .arg(&exec_c)
        .arg(&objects[0]));
    expect_sections(
        &both,
        &[".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment"],
        &[],
    );
    fixtures.push(Fixture {
        path: both,
        what: "shared object with small.fatbin's images in .nv_fatbin and rel1.o's in \
               __nv_relfatbin"
            .to_string(),
        kind: FixtureKind::SharedObject,
        images: small.len() + rel1_images.len(),
    });

    // A container as a plain byte array: no fat-binary section, nothing but the magic.
    let rodata = dir.join("rodata.so");
    let blob_c = dir.join("rodata.c");
    write(&blob_c, byte_array_c(&bytes).as_bytes());
    run(Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&rodata)
        .arg(&blob_c));
    expect_sections(
        &rodata,
        &[".rodata"],
        &[".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment"],
    );
    fixtures.push(Fixture {
        path: rodata,
        what: "shared object with two-containers.fatbin's bytes as a const array in .rodata"
            .to_string(),
        kind: FixtureKind::SharedObject,
        images: small.len() + af.len(),
    });
    fixtures
}

/// Writes `DIR/STEM.fatbin` and its `--embedded-fatbin` include file, and a C file including
/// it with what `fatbinary_section.h` (not in the wheels) would define; returns the C file.
/// With `device_c` the container goes to `__nv_relfatbin` and the wrapper is the global
/// `__fatbinwrap_cuda_sandbox_STEM` (nvcc names it after `__NV_MODULE_ID`); without, the
/// wrapper is a static `__fatDeviceText`, kept by a function returning its address.
pub(crate) fn embedded_c(
    real: &RealNvidia,
    dir: &Path,
    stem: &str,
    images: &[Image],
    device_c: bool,
) -> PathBuf {
    let include = dir.join(format!("{stem}.fatbin.c"));
    let mut cmd = Command::new(real.fatbinary());
    cmd.arg(format!(
        "--create={}",
        dir.join(format!("{stem}.fatbin")).display()
    ))
    .arg(format!("--embedded-fatbin={}", include.display()));
    if device_c {
        cmd.arg("--device-c");
    }
    cmd.args(images.iter().map(Image::arg));
    run(&mut cmd);
    let mut c = String::new();
    // fatbinary_section.h's wrapper: magic 0x466243b1, version, the container, and (for
    // version 2) the names of the relocatable fat binaries linked in.
    c.push_str(
        "#define __SKIP_INTERNAL_FATBINARY_HEADERS\n\
         typedef struct {\n  int magic;\n  int version;\n  const unsigned long long *data;\n  \
         void *filename_or_fatbins;\n} __fatBinC_Wrapper_t;\n",
    );
    let _ = writeln!(c, "#define __NV_MODULE_ID _cuda_sandbox_{stem}");
    let _ = writeln!(c, "#include \"{}\"", include.display());
    if !device_c {
        let _ = writeln!(
            c,
            "const void *cuda_sandbox_{stem}_wrapper(void) {{ return &__fatDeviceText; }}"
        );
    }
    let path = dir.join(format!("{stem}.c"));
    write(&path, c.as_bytes());
    path
}

/// C source holding `bytes` as an 8-aligned `static const unsigned char` array in `.rodata`,
/// kept by an exported function that returns it.
fn byte_array_c(bytes: &[u8]) -> String {
    let mut c = String::from(
        "__attribute__((aligned(8))) static const unsigned char cuda_sandbox_blob[] = {",
    );
    for (i, b) in bytes.iter().enumerate() {
        if i % 16 == 0 {
            c.push_str("\n ");
        }
        let _ = write!(c, " {b},");
    }
    c.push_str(
        "\n};\nconst unsigned char *cuda_sandbox_blob_data(void) { return cuda_sandbox_blob; }\n",
    );
    c
}

/// Panics unless the ELF file at `path` has every section of `present` and none of `absent`.
fn expect_sections(path: &Path, present: &[&str], absent: &[&str]) {
    let names = section_names(path);
    for s in present {
        assert!(
            names.iter().any(|n| n == s),
            "{} lacks section {s}: {names:?}",
            path.display()
        );
    }
    for s in absent {
        assert!(
            !names.iter().any(|n| n == s),
            "{} has section {s}: {names:?}",
            path.display()
        );
    }
}

/// The section names of an ELF file, as `readelf -SW` prints them.
pub fn section_names(path: &Path) -> Vec<String> {
    stdout(Command::new("readelf").arg("-SW").arg(path))
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.trim_start().strip_prefix('[')?.split_once(']')?;
            rest.split_whitespace().next().map(str::to_string)
        })
        .filter(|n| n != "Name" && n != "NULL")
        .collect()
}

/// The kind of an entry cuobjdump lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListedKind {
    /// `PTX file`: PTX text.
    Ptx,
    /// `ELF file`: a cubin.
    Elf,
}

/// One entry of `cuobjdump --all-fatbin --list-elf --list-ptx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// PTX or ELF.
    pub kind: ListedKind,
    /// cuobjdump's number for it (`ELF file N:`): 1-based and per kind, counting over the whole
    /// file (all containers, sections and members). Not the container's index.
    pub number: usize,
    /// The architecture as cuobjdump names it, from the name: `sm_90a`; an `sm_100f` cubin
    /// is `sm_100`, `compute_100f` PTX is `sm_100f`.
    pub arch: String,
    /// The name as printed: `libcurand.so.7.sm_100.cubin`.
    pub name: String,
    /// The archive member holding it (`rel1.o`), for an archive.
    pub member: Option<String>,
}

/// What `cuobjdump --all-fatbin --list-elf --list-ptx path` lists, in its order (the file's).
/// Empty where cuobjdump finds no device code (it says so and exits 255); any other failure,
/// or a line it has not been seen to print, panics.
pub fn cuobjdump_list(real: &RealNvidia, path: &Path) -> Vec<Listed> {
    let out = Command::new(real.cuobjdump())
        .args(["--all-fatbin", "--list-elf", "--list-ptx"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("run cuobjdump: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("does not contain device code") {
            return Vec::new();
        }
        panic!("cuobjdump on {} failed: {stderr}", path.display());
    }
    let mut member = None;
    let mut listed = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(m) = line.strip_prefix("member ") {
            let m = m.strip_suffix(':').unwrap_or(m);
            let (_, name) = m
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("cuobjdump member line without a member: {line}"));
            member = Some(name.to_string());
            continue;
        }
        let parse = || {
            let (kind, rest) = if let Some(rest) = line.strip_prefix("ELF file") {
                (ListedKind::Elf, rest)
            } else {
                (ListedKind::Ptx, line.strip_prefix("PTX file")?)
            };
            let (number, name) = rest.split_once(':')?;
            let name = name.trim();
            let stem = name
                .strip_suffix(".cubin")
                .or_else(|| name.strip_suffix(".ptx"))?;
            let arch = stem.rsplit('.').next()?;
            Some(Listed {
                kind,
                number: number.trim().parse().ok()?,
                arch: arch.to_string(),
                name: name.to_string(),
                member: member.clone(),
            })
        };
        listed.push(parse().unwrap_or_else(|| {
            panic!("unexpected cuobjdump line for {}: {line:?}", path.display())
        }));
    }
    listed
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

pub(crate) fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
