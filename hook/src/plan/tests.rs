//! Unit tests of `decide` on hand-made host views: no filesystem, no Nix.

use super::*;
use crate::config::ConfigSource;
use crate::config::Platform;
use crate::discover::choice::Rejected;
use crate::discover::compat::{CompatDriver, CompatNote};
use crate::discover::versions::CudaVersion;
use crate::request::{RuleId, Tagged, Verdict};
use crate::scan::devices::GlobMatches;
use crate::scan::driver::CompatSeen;
use crate::scan::paths::EntrySymlinks;
use crate::scan::{
    DeviceScan, DeviceView, DriverView, HostFacts, PathOrigin, PathView, RuleView, Snapshot,
};
use crate::symlinks::{ChainError, Lookup, Node, Space};
use cuda_sandbox_manifest::DriverKind;
use std::collections::BTreeMap;

/// What a scan would have found, written by hand: the entries looked at, what each glob
/// matched, the compat directories and the links in followed directories.
#[derive(Default)]
struct Hand {
    platform: Option<Platform>,
    kernel_driver: Option<String>,
    booted_driver: Option<crate::scan::BootedDriver>,
    nodes: BTreeMap<PathBuf, Node>,
    real_paths: BTreeMap<PathBuf, PathBuf>,
    globs: BTreeMap<String, GlobMatches>,
    compat: BTreeMap<String, Vec<CompatSeen>>,
    entry_symlinks: BTreeMap<PathBuf, Vec<String>>,
    mig: Option<Result<crate::scan::mig::MigHost, crate::scan::mig::MigScanError>>,
    inventory: Option<crate::scan::inventory::InventoryView>,
}

impl Hand {
    /// Records `node` at `path`.
    fn with(mut self, path: &str, node: Node) -> Hand {
        self.nodes.insert(PathBuf::from(path), node);
        self
    }
}

/// `decide` on the view a scan of the `hand`-made host would give for `req`'s rules.
fn decide_on(req: &Request, config: &Config, hand: &Hand) -> Decision {
    let snapshot = Snapshot {
        nodes: hand.nodes.clone().into_iter().collect(),
        real_paths: hand.real_paths.clone(),
    };
    let facts = HostFacts {
        platform: hand.platform,
        kernel_driver: hand.kernel_driver.clone(),
        l4t: None,
        booted_driver: hand.booted_driver.clone(),
    };
    let rooted = Space::Rooted {
        root: &config.host_root,
        store_dir: &config.store_dir,
    };
    let path_view = |origin: PathOrigin,
                     inside: &Path,
                     outside: PathBuf,
                     required: bool,
                     hint: &Option<String>,
                     follow: bool| {
        let space = match origin {
            PathOrigin::HostPath => rooted,
            PathOrigin::Mount => Space::Literal,
        };
        let inside = symlinks::normalize(inside);
        let entry_symlinks = follow
            .then(|| symlinks::follow(&inside, &outside, space, &snapshot).ok())
            .flatten()
            .filter(|c| c.target == Node::Dir)
            .and_then(|c| c.hops.last().cloned())
            .map(|dir| EntrySymlinks {
                names: hand
                    .entry_symlinks
                    .get(&dir.outside)
                    .cloned()
                    .unwrap_or_default(),
                dir,
            });
        PathView {
            origin,
            inside,
            outside,
            required,
            hint: hint.clone(),
            entry_symlinks,
        }
    };
    let tagged = tagged(req);
    let rules = tagged
        .matched_rules()
        .into_iter()
        .map(|rule| RuleView {
            name: rule.name.clone(),
            devices: rule
                .devices
                .iter()
                .map(|d| DeviceView {
                    source: d.clone(),
                    found: match d.platform.filter(|p| *p != facts.platform()) {
                        Some(wants) => DeviceScan::OtherPlatform(wants, facts.platform()),
                        None => DeviceScan::Matched(
                            hand.globs.get(&d.glob).cloned().unwrap_or_default(),
                        ),
                    },
                })
                .collect(),
            paths: rule
                .paths
                .iter()
                .map(|p| {
                    let inside = symlinks::normalize(&p.path);
                    let outside = rooted.outside(&inside);
                    let follow = p.follow_entry_symlinks;
                    path_view(
                        PathOrigin::HostPath,
                        &inside,
                        outside,
                        p.required,
                        &p.hint,
                        follow,
                    )
                })
                .chain(rule.mounts.iter().map(|m| {
                    let (outside, follow) = (m.outside.clone(), m.follow_entry_symlinks);
                    path_view(
                        PathOrigin::Mount,
                        &m.inside,
                        outside,
                        m.required,
                        &m.hint,
                        follow,
                    )
                }))
                .collect(),
            driver: rule.driver.as_ref().map(|d| DriverView {
                source: d.clone(),
                link_present: !matches!(
                    snapshot.lstat(&rooted.outside(&symlinks::normalize(&d.link))),
                    Node::Missing
                ),
                host_libraries: None,
                compat: d
                    .compat
                    .iter()
                    .flat_map(|pattern| hand.compat.get(pattern).cloned().unwrap_or_default())
                    .collect(),
            }),
            cdi: None,
            mig: rule
                .mig
                .as_ref()
                .map(|_| hand.mig.clone().unwrap_or_else(|| Ok(Default::default()))),
            sysfs: rule.sysfs,
        })
        .collect();
    decide(
        req,
        tagged,
        &HostView {
            facts,
            snapshot,
            rules,
            inventory: hand.inventory.clone(),
            drm: Default::default(),
        },
    )
}

const ROOT: &str = "/fake";

fn config(body: &str) -> Config {
    let text =
        format!("host_root = \"{ROOT}\"\n[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n{body}");
    Config::parse(&text, "test").unwrap()
}

/// The tagged part of `req`, a request made by [`request`].
fn tagged(req: &Request) -> &Tagged {
    req.tagged().expect("a tagged request")
}

fn request(config: &Config, gpus: Option<&str>) -> Request {
    Request {
        derivation: Some(PathBuf::from("/nix/store/x-t.drv")),
        chroot: Some(PathBuf::from("/tmp/chroot")),
        features: vec![b"cuda".to_vec()],
        structured: false,
        config_source: ConfigSource::Builtin,
        matched: Vec::new(),
        verdict: Verdict::Tagged(Tagged {
            config: config.clone(),
            rules: RuleId::all(config).collect(),
            gpus: gpus.map(crate::request::GpusWanted::parse),
        }),
        search_path: None,
        warnings: Vec::new(),
    }
}

/// A view of a host with the given entries (host paths under the fake root, or store paths).
fn host(entries: &[(&str, Node)]) -> Hand {
    let mut v = Hand {
        platform: Some(Platform::Discrete),
        ..Hand::default()
    };
    for (p, n) in entries {
        v.nodes.insert(PathBuf::from(p), n.clone());
    }
    v
}

fn dir() -> Node {
    Node::Dir
}
fn dev() -> Node {
    Node::CharDevice
}
fn link(to: &str) -> Node {
    Node::Symlink(PathBuf::from(to))
}

/// The parents every path under the fake root passes through.
fn with_parents(mut v: Hand, dirs: &[&str]) -> Hand {
    for d in ["/fake", "/fake/dev", "/fake/run", "/nix", "/nix/store"]
        .iter()
        .chain(dirs)
    {
        v.nodes.entry(PathBuf::from(d)).or_insert(Node::Dir);
    }
    v
}

fn glob(mut v: Hand, pattern: &str, matches: &[&str]) -> Hand {
    v.globs.insert(
        pattern.to_string(),
        matches.iter().map(|m| Ok(PathBuf::from(m))).collect(),
    );
    v
}

fn insides(plan: &Decision) -> Vec<String> {
    plan.exposures
        .iter()
        .map(|e| e.inside.display().to_string())
        .collect()
}

#[test]
fn devices_are_exposed_with_their_glob_as_reason() {
    let c = config("[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n");
    let v = host(&[("/fake/dev/nvidia0", dev()), ("/fake/dev/nvidia1", dev())]);
    let v = glob(
        with_parents(v, &[]),
        "/dev/nvidia[0-9]*",
        &["/fake/dev/nvidia0", "/fake/dev/nvidia1"],
    );
    let plan = decide_on(&request(&c, None), &c, &v);
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!(insides(&plan), ["/dev/nvidia0", "/dev/nvidia1"]);
    assert_eq!(plan.exposures[0].outside, Path::new("/fake/dev/nvidia0"));
    assert_eq!(
        plan.exposures[0].reason,
        Reason::Device {
            rule: "gpu".into(),
            glob: "/dev/nvidia[0-9]*".into()
        }
    );
}

#[test]
fn a_required_device_that_is_missing_is_a_problem_with_the_fix() {
    let c = config("[[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n");
    let v = glob(with_parents(host(&[]), &[]), "/dev/nvidia-uvm", &[]);
    let plan = decide_on(&request(&c, None), &c, &v);
    assert_eq!(plan.problems.len(), 1);
    assert_eq!(
        plan.problems[0],
        Problem::new(
            "gpu",
            ProblemKind::MissingDevice(
                "/dev/nvidia-uvm".into(),
                devices::device_hint("/dev/nvidia-uvm"),
            )
        )
    );
}

#[test]
fn skips_say_why() {
    let c = config(
        "[[rule.device]]\nglob = \"/dev/nvmap\"\nplatform = \"tegra\"\n\
         [[rule.device]]\nglob = \"/dev/dri/card*\"\n\
         [[rule.device]]\nglob = \"/dev/nvidia-modeset\"\n",
    );
    let v = host(&[("/fake/dev/nvidia-modeset", Node::File)]);
    let v = glob(with_parents(v, &[]), "/dev/dri/card*", &[]);
    let v = glob(v, "/dev/nvidia-modeset", &["/fake/dev/nvidia-modeset"]);
    let plan = decide_on(&request(&c, None), &c, &v);
    assert_eq!(
        plan.skipped,
        [
            Skip::new(
                "/dev/nvmap",
                Skipped::OtherPlatform(Platform::Tegra, Platform::Discrete)
            ),
            Skip::new("/dev/dri/card*", Skipped::NothingMatched),
            Skip::new("/dev/nvidia-modeset", Skipped::NotDevice),
            Skip::new("/dev/nvidia-modeset", Skipped::NothingMatched),
        ]
    );
    // The lines explain shows for them.
    let why: Vec<String> = plan.skipped.iter().map(|s| s.why.to_string()).collect();
    assert_eq!(
        why,
        [
            "only on Tegra (Jetson) hosts; this one is discrete-GPU",
            "optional device glob matched nothing",
            "not a character device or directory",
            "optional device glob matched nothing",
        ]
    );
    assert!(plan.exposures.is_empty() && plan.problems.is_empty());
}

#[test]
fn a_link_out_of_the_roots_is_not_followed() {
    let c = config("[[rule.path]]\npath = \"/run/gpu\"\n");
    let v = host(&[
        ("/fake/run/gpu", link("/etc/shadow")),
        ("/fake/etc/shadow", Node::File),
    ]);
    let v = with_parents(v, &["/fake/etc"]);
    let plan = decide_on(&request(&c, None), &c, &v);
    assert!(plan.exposures.is_empty());
    assert!(
        matches!(
            &plan.skipped[0].why,
            Skipped::OptionalPath(ChainError::Escapes(link, target))
                if link == Path::new("/run/gpu") && target == Path::new("/etc/shadow")
        ),
        "{:?}",
        plan.skipped
    );
}

#[test]
fn a_symlinked_directory_in_the_middle_of_a_path_is_resolved() {
    // /dev/nvidia-caps -> /etc made /etc/nvidia-cap1 a "device" (the node named, as a rule
    // may name the MIG config capability).
    let c = config("[[rule.device]]\nglob = \"/dev/nvidia-caps/nvidia-cap1\"\n");
    let v = host(&[
        ("/fake/dev/nvidia-caps", link("/etc")),
        ("/fake/dev/nvidia-caps/nvidia-cap1", dev()),
        ("/fake/etc", dir()),
    ]);
    let v = glob(
        with_parents(v, &[]),
        "/dev/nvidia-caps/nvidia-cap1",
        &["/fake/dev/nvidia-caps/nvidia-cap1"],
    );
    let plan = decide_on(&request(&c, None), &c, &v);
    assert!(plan.exposures.is_empty(), "{:?}", plan.exposures);
    assert!(
        matches!(
            &plan.skipped[0].why,
            Skipped::DeviceChain(ChainError::Escapes(link, target))
                if link == Path::new("/dev/nvidia-caps") && target == Path::new("/etc")
        ),
        "{:?}",
        plan.skipped
    );
    // The same link within the roots is fine.
    let v = host(&[
        ("/fake/dev/nvidia-caps", link("/dev/caps")),
        ("/fake/dev/caps", dir()),
        ("/fake/dev/caps/nvidia-cap1", dev()),
        ("/fake/dev/nvidia-caps/nvidia-cap1", dev()),
    ]);
    let v = glob(
        with_parents(v, &[]),
        "/dev/nvidia-caps/nvidia-cap1",
        &["/fake/dev/nvidia-caps/nvidia-cap1"],
    );
    let plan = decide_on(&request(&c, None), &c, &v);
    assert_eq!(insides(&plan), ["/dev/nvidia-caps/nvidia-cap1"]);
}

#[test]
fn user_writable_places_are_never_followed_into() {
    // The default roots include /run and /dev, but not /run/user or
    // /dev/shm, where any user can plant a file.
    for target in ["/run/user/1000/fake", "/dev/shm/fake", "/run/lock/fake"] {
        let c = config("[[rule.path]]\npath = \"/run/gpu\"\n");
        let v = host(&[("/fake/run/gpu", link(target))]);
        let v = with_parents(
            v,
            &[
                "/fake/run/user",
                "/fake/run/user/1000",
                "/fake/dev/shm",
                "/fake/run/lock",
            ],
        )
        .with(&format!("/fake{target}"), dev());
        let plan = decide_on(&request(&c, None), &c, &v);
        assert!(plan.exposures.is_empty(), "{target}: {:?}", plan.exposures);
        assert!(
            matches!(
                &plan.skipped[0].why,
                Skipped::OptionalPath(ChainError::Escapes(_, t)) if t == Path::new(target)
            ),
            "{:?}",
            plan.skipped
        );
    }
}

#[test]
fn nested_paths_are_pruned_and_conflicts_skipped() {
    let mut plan = Decision::default();
    let e = |inside: &str, outside: &str| Exposure {
        inside: inside.into(),
        outside: outside.into(),
        reason: Reason::Manifest,
    };
    plan.exposures = vec![
        e("/run/x/lib", "/h/x/lib"),
        e("/run/x", "/h/x"),
        e("/run/x/other", "/elsewhere/other"),
        e("/run/x", "/h/y"),
        e("/run/x", "/h/x"),
    ];
    plan.prune_nested();
    assert_eq!(insides(&plan), ["/run/x", "/run/x/other"]);
    assert_eq!(
        plan.skipped,
        [Skip::new("/run/x", Skipped::Conflicts("/h/x".into()))]
    );
    assert_eq!(
        plan.skipped[0].why.to_string(),
        "conflicts with /h/x already exposed there"
    );
}

fn compat(branches: Option<Vec<u32>>, cuda: i32) -> CompatDriver {
    CompatDriver {
        dir: PathBuf::from("/usr/local/cuda-12.9/compat"),
        dir_outside: PathBuf::from("/fake/usr/local/cuda-12.9/compat"),
        libcuda: "libcuda.so.575.51.03".into(),
        note: Some(CompatNote {
            cuda_version: Some(CudaVersion(cuda)),
            drivers: branches,
            json: String::new(),
        }),
        cuda_version: Some(CudaVersion(cuda)),
        libraries: Vec::new(),
    }
}

/// A NixOS host with driver 535 (CUDA 12.2) at /run/opengl-driver, and one compat driver.
fn driver_host(c: CompatDriver) -> Hand {
    let mut v = host(&[
        ("/fake/run/opengl-driver", link("/nix/store/aaa-driver")),
        ("/nix/store/aaa-driver", dir()),
        ("/nix/store/aaa-driver/lib", dir()),
        (
            "/nix/store/aaa-driver/lib/libcuda.so.1",
            link("libcuda.so.535.104.05"),
        ),
        (
            "/nix/store/aaa-driver/lib/libcuda.so.535.104.05",
            Node::File,
        ),
        ("/fake/usr", dir()),
        ("/fake/usr/local", dir()),
        ("/fake/usr/local/cuda-12.9", dir()),
        ("/fake/usr/local/cuda-12.9/compat", dir()),
        (
            "/fake/usr/local/cuda-12.9/compat/libcuda.so.1",
            link("libcuda.so.575.51.03"),
        ),
        (
            "/fake/usr/local/cuda-12.9/compat/libcuda.so.575.51.03",
            Node::File,
        ),
    ]);
    v = with_parents(v, &[]);
    v.kernel_driver = Some("535.104.05".into());
    v.real_paths.insert(
        "/nix/store/aaa-driver/lib/libcuda.so.1".into(),
        "/nix/store/aaa-driver/lib/libcuda.so.535.104.05".into(),
    );
    v.compat.insert(
        "/usr/local/cuda*/compat".into(),
        vec![CompatSeen {
            inside: c.dir.clone(),
            found: Ok(Some(c)),
        }],
    );
    v
}

#[test]
fn compat_is_chosen_when_its_note_lists_the_host_driver() {
    let c = config("[rule.driver]\ncompat = [\"/usr/local/cuda*/compat\"]\n");
    let plan = decide_on(
        &request(&c, None),
        &c,
        &driver_host(compat(Some(vec![535, 550]), 12090)),
    );
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let d = plan.driver.as_ref().unwrap();
    assert_eq!(d.kind, DriverKind::Compat);
    assert_eq!(d.cuda_version, Some(CudaVersion(12090)));
    assert_eq!(d.host_cuda_version, Some(CudaVersion(12020)));
    assert!(insides(&plan).contains(&"/usr/local/cuda-12.9/compat".to_string()));
    assert!(insides(&plan).contains(&"/run/opengl-driver".to_string()));
    assert_eq!(plan.closure_roots, [PathBuf::from("/nix/store/aaa-driver")]);
}

#[test]
fn compat_not_listing_the_host_driver_is_rejected_with_its_reason() {
    let c = config("[rule.driver]\ncompat = [\"/usr/local/cuda*/compat\"]\n");
    let plan = decide_on(
        &request(&c, None),
        &c,
        &driver_host(compat(Some(vec![550]), 12090)),
    );
    let d = plan.driver.as_ref().unwrap();
    assert_eq!(d.kind, DriverKind::Host);
    let choice = plan.driver_choice.as_ref().unwrap();
    assert_eq!(choice.rejected.len(), 1);
    assert_eq!(
        choice.rejected[0].why,
        Rejected::BranchNotListed(535, vec![550])
    );
    assert!(!insides(&plan).contains(&"/usr/local/cuda-12.9/compat".to_string()));
    assert!(d
        .libcuda
        .contains(&"/run/opengl-driver/lib/libcuda.so.1".to_string()));
}

/// `driver_host` with the kernel module `kernel` loaded under the 535.104.05 user space.
fn stale_host(kernel: &str) -> Hand {
    let mut v = with_real_libcuda(driver_host(compat(Some(vec![535]), 12090)));
    v.compat.clear();
    v.kernel_driver = Some(kernel.into());
    v
}

/// `v` with the real path the scan records for the driver link's libcuda.
fn with_real_libcuda(mut v: Hand) -> Hand {
    v.real_paths.insert(
        "/fake/run/opengl-driver/lib/libcuda.so.1".into(),
        "/nix/store/aaa-driver/lib/libcuda.so.535.104.05".into(),
    );
    v
}

#[test]
fn a_user_space_driver_newer_than_the_kernel_module_is_a_problem_naming_both() {
    let c = config("[rule.driver]\n");
    let plan = decide_on(&request(&c, None), &c, &stale_host("550.54.14"));
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    let line = plan.problems[0].to_string();
    for needle in [
        "535.104.05",
        "550.54.14",
        "reboot",
        "/proc/driver/nvidia/version",
    ] {
        assert!(line.contains(needle), "{needle:?} missing from {line}");
    }
    assert!(
        !line.contains("ln -sfn"),
        "no booted driver was found: {line}"
    );
}

#[test]
fn the_booted_systems_driver_is_offered_when_it_matches_the_kernel_module() {
    let c = config("[rule.driver]\n");
    let mut host = stale_host("550.54.14");
    host.booted_driver = Some(crate::scan::BootedDriver {
        driver: "/nix/store/bbb-graphics-drivers".into(),
        libcuda_version: Some("550.54.14".into()),
    });
    let plan = decide_on(&request(&c, None), &c, &host);
    let line = plan.problems[0].to_string();
    assert!(
        line.contains("ln -sfn /nix/store/bbb-graphics-drivers /run/opengl-driver"),
        "{line}"
    );
    // A booted driver of yet another version is not offered.
    host.booted_driver.as_mut().unwrap().libcuda_version = Some("545.29.06".into());
    let plan = decide_on(&request(&c, None), &c, &host);
    assert!(!plan.problems[0].to_string().contains("ln -sfn"));
}

#[test]
fn a_matching_driver_and_an_unknown_kernel_module_are_no_problem() {
    let c = config("[rule.driver]\n");
    let plan = decide_on(&request(&c, None), &c, &stale_host("535.104.05"));
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let mut host = stale_host("550.54.14");
    host.kernel_driver = None;
    let plan = decide_on(&request(&c, None), &c, &host);
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
}

#[test]
fn a_compat_driver_newer_than_the_kernel_module_is_no_stale_driver_but_the_hosts_must_match() {
    let c = config("[rule.driver]\ncompat = [\"/usr/local/cuda*/compat\"]\n");
    let plan = decide_on(
        &request(&c, None),
        &c,
        &with_real_libcuda(driver_host(compat(Some(vec![535]), 12090))),
    );
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!(plan.driver.as_ref().unwrap().kind, DriverKind::Compat);
    let mut stale = with_real_libcuda(driver_host(compat(None, 12090)));
    stale.kernel_driver = Some("550.54.14".into());
    let plan = decide_on(&request(&c, None), &c, &stale);
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    assert!(
        matches!(
            &plan.problems[0].kind,
            ProblemKind::StaleDriver(s) if s.user_space == "535.104.05" && s.kernel_module == "550.54.14"
        ),
        "{:?}",
        plan.problems
    );
}

#[test]
fn a_jetson_is_exempt() {
    let c = config("[rule.driver]\n");
    let mut host = stale_host("550.54.14");
    host.platform = Some(Platform::Tegra);
    let plan = decide_on(&request(&c, None), &c, &host);
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
}

#[test]
fn no_driver_is_a_problem_when_required() {
    let c = config("[rule.driver]\nhost_libraries = false\n");
    let v = with_parents(host(&[("/fake/run/opengl-driver", Node::Missing)]), &[]);
    let plan = decide_on(&request(&c, None), &c, &v);
    assert_eq!(plan.problems.len(), 1);
    assert!(
        matches!(
            &plan.problems[0].kind,
            ProblemKind::NoDriver(link, _) if link.ends_with("run/opengl-driver")
        ),
        "{:?}",
        plan.problems
    );
}

#[test]
fn gpu_demand_follows_the_derivation_and_the_cap() {
    let body = "gpus_per_build = 1\nmax_gpus_per_build = 2\n";
    let text = format!("{body}host_root = \"{ROOT}\"\n[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\n");
    let c = Config::parse(&text, "t").unwrap();
    let nodes: Vec<(String, Node)> = (0..4)
        .map(|i| (format!("/fake/dev/nvidia{i}"), dev()))
        .collect();
    let refs: Vec<(&str, Node)> = nodes.iter().map(|(p, n)| (p.as_str(), n.clone())).collect();
    let names: Vec<&str> = nodes.iter().map(|(p, _)| p.as_str()).collect();
    let v = glob(with_parents(host(&refs), &[]), "/dev/nvidia[0-9]*", &names);
    let plan = decide_on(&request(&c, None), &c, &v);
    assert_eq!(
        plan.gpu_demand,
        Some(GpuDemand {
            slots: (0..4).map(Slot::Gpu).collect(),
            count: 1,
            fit: None,
            drm: Default::default(),
        })
    );
    let plan = decide_on(&request(&c, Some("2")), &c, &v);
    assert_eq!(plan.gpu_demand.unwrap().count, 2);
    let plan = decide_on(&request(&c, Some("4")), &c, &v);
    assert!(
        matches!(
            &plan.problems[0].kind,
            ProblemKind::GpuCount(gpus::GpuCountError::Attribute(text, _, 2)) if text == "4"
        ),
        "{:?}",
        plan.problems
    );
    // keep_gpus leaves the control nodes and the picked GPU.
    let mut plan = decide_on(&request(&c, None), &c, &v);
    let demand = plan.gpu_demand.clone().unwrap();
    demand.keep(&[Slot::Gpu(2)], true, c.gpus_per_build, &mut plan);
    assert_eq!(insides(&plan), ["/dev/nvidia2"]);
    assert_eq!(plan.skipped.len(), 3);
}

/// Under leases a build keeps only the DRM nodes of the GPUs it is leased whole: another GPU's,
/// one whose GPU cannot be told, and a MIG build's parent GPU's are dropped, each saying why.
#[test]
fn a_leased_build_keeps_only_its_whole_gpus_drm_nodes() {
    use crate::sysfs::drm::DrmError;
    let device = |inside: &str| Exposure {
        inside: inside.into(),
        outside: format!("/fake{inside}").into(),
        reason: Reason::Device {
            rule: "gpu".into(),
            glob: "/dev/…".into(),
        },
    };
    let all = [
        "/dev/dri/by-path",
        "/dev/dri/card0",
        "/dev/dri/card1",
        "/dev/dri/card2",
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
        "/dev/gpu-render",
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
    ];
    let owners: crate::scan::DrmOwners = [
        // A DRM node a glob reached outside /dev/dri (the scan knows it by its 226:N).
        ("/dev/gpu-render", Ok(0)),
        ("/dev/dri/by-path", Err(DrmError::NotANode)),
        (
            "/dev/dri/card0",
            Err(DrmError::NoPciDevice("no PCI device".into())),
        ),
        ("/dev/dri/card1", Ok(0)),
        ("/dev/dri/card2", Ok(1)),
        ("/dev/dri/renderD128", Ok(0)),
        ("/dev/dri/renderD129", Ok(1)),
    ]
    .into_iter()
    .map(|(p, o)| (PathBuf::from(p), o))
    .collect();
    let mig = Slot::Mig(InstanceId {
        gpu: 1,
        gi: 1,
        ci: 0,
    });
    let demand = GpuDemand {
        slots: vec![Slot::Gpu(0), mig, Slot::Gpu(1)],
        count: 1,
        fit: None,
        drm: owners,
    };
    let kept = |picked: Slot| {
        let mut plan = Decision {
            exposures: all.iter().map(|p| device(p)).collect(),
            ..Decision::default()
        };
        demand.keep(&[picked], true, 1, &mut plan);
        let why: Vec<(String, String)> = plan
            .skipped
            .iter()
            .map(|s| (s.path.clone(), s.why.to_string()))
            .collect();
        (insides(&plan), why)
    };
    let (got, why) = kept(Slot::Gpu(1));
    assert_eq!(
        got,
        [
            "/dev/dri/card2",
            "/dev/dri/renderD129",
            "/dev/nvidia1",
            "/dev/nvidiactl"
        ]
    );
    assert_eq!(why.len(), 6, "{why:?}");
    assert!(why
        .iter()
        .any(|(p, w)| p == "/dev/gpu-render" && w.contains("another build's GPU")));
    assert!(why.contains(&(
        "/dev/dri/card0".into(),
        "a DRM node whose GPU cannot be told (no PCI device); with gpus_per_build = 1 a build gets only the DRM nodes of the GPUs it is \
         leased whole"
            .into()
    )));
    assert!(why
        .iter()
        .any(|(p, w)| p == "/dev/dri/card1" && w.contains("another build's GPU")));
    let (got, why) = kept(mig);
    assert_eq!(got, ["/dev/nvidia1", "/dev/nvidiactl"]);
    assert!(
        why.iter().any(|(p, w)| p == "/dev/dri/renderD129"
            && w.contains("of nvidia1, whose MIG instance this build is leased")),
        "{why:?}"
    );
}

#[test]
fn a_closure_member_linking_out_of_the_store_is_refused() {
    // A poisoned cache or store path must not bind a host file.
    let mut plan = Decision::default();
    let store = Path::new("/nix/store");
    plan.add_closure(
        Path::new("/nix/store/aaa-x"),
        vec![
            ("/nix/store/aaa-x".into(), Node::Dir),
            ("/nix/store/bbb-ok".into(), link("ccc-in-store")),
            ("/nix/store/ddd-evil".into(), link("/etc/shadow")),
            ("/nix/store/eee-evil".into(), link("../../../root")),
        ],
        store,
    );
    assert_eq!(insides(&plan), ["/nix/store/aaa-x", "/nix/store/bbb-ok"]);
    assert_eq!(plan.problems.len(), 2);
    let escapes = |member: &str, to: &str| ProblemKind::ClosureEscapes(member.into(), to.into());
    assert_eq!(
        plan.problems.iter().map(|p| &p.kind).collect::<Vec<_>>(),
        [
            &escapes("/nix/store/ddd-evil", "/etc/shadow"),
            &escapes("/nix/store/eee-evil", "/root")
        ]
    );
}

/// nix-required-mounts' own test: a mount of a directory whose entries are symlinks into
/// /usr/lib (`unsafeFollowSymlinks`). With `follow_entry_symlinks` their targets are exposed
/// too, within `symlink_roots`; without it, or for a target outside them, they are not.
#[test]
fn entry_symlinks_of_a_mounted_directory_bring_their_targets_when_asked() {
    let body = |follow: bool| {
        format!(
            "[[rule.mount]]\ninside = \"/run/opengl-driver/lib\"\n\
             outside = \"/usr/lib/imaginary-fhs-drivers\"\nfollow_entry_symlinks = {follow}\n"
        )
    };
    let mut view = with_parents(
        host(&[
            ("/", dir()),
            ("/usr", dir()),
            ("/usr/lib", dir()),
            ("/usr/lib/imaginary-fhs-drivers", dir()),
            (
                "/usr/lib/imaginary-fhs-drivers/libcuda.so",
                link("/usr/lib/libcuda.so"),
            ),
            ("/usr/lib/imaginary-fhs-drivers/secret", link("/etc/shadow")),
            ("/usr/lib/libcuda.so", Node::File),
            ("/etc", dir()),
            ("/etc/shadow", Node::File),
        ]),
        &[],
    );
    view.entry_symlinks.insert(
        PathBuf::from("/usr/lib/imaginary-fhs-drivers"),
        vec!["libcuda.so".into(), "secret".into()],
    );
    let followed = config(&body(true));
    let plan = decide_on(&request(&followed, None), &followed, &view);
    let shown = insides(&plan);
    assert!(
        shown.contains(&"/usr/lib/libcuda.so".to_string()),
        "{shown:?}"
    );
    assert!(
        shown.contains(&"/run/opengl-driver/lib".to_string()),
        "{shown:?}"
    );
    assert!(!shown.iter().any(|p| p.contains("shadow")), "{shown:?}");
    assert!(
        plan.skipped.iter().any(|s| s.path.ends_with("/secret")),
        "{:?}",
        plan.skipped
    );
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let plain = config(&body(false));
    let plan = decide_on(&request(&plain, None), &plain, &view);
    assert!(!insides(&plan).contains(&"/usr/lib/libcuda.so".to_string()));
}

/// The one-pass pruning keeps and skips exactly what a search of every kept entry would, on
/// many random sets of nested, equal and conflicting paths.
#[test]
fn prune_nested_agrees_with_a_search_of_every_kept_entry() {
    fn reference(mut all: Vec<Exposure>) -> (Vec<Exposure>, Vec<Skip>) {
        all.sort_by(|a, b| a.inside.cmp(&b.inside));
        let (mut kept, mut skipped): (Vec<Exposure>, Vec<Skip>) = (Vec::new(), Vec::new());
        for e in all {
            let covered = kept.iter().rev().find_map(|k| {
                let rel = e.inside.strip_prefix(&k.inside).ok()?;
                Some((k, rel))
            });
            match covered {
                Some((k, rel)) if e.outside.strip_prefix(&k.outside).ok() == Some(rel) => {}
                Some((k, _)) if k.inside == e.inside => skipped.push(Skip::new(
                    e.inside.display(),
                    Skipped::Conflicts(k.outside.clone()),
                )),
                _ => kept.push(e),
            }
        }
        (kept, skipped)
    }
    let parts = ["a", "b", "ab", "a b"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for _ in 0..2000 {
        let count = 1 + next(12);
        let exposures: Vec<Exposure> = (0..count)
            .map(|_| {
                let depth = 1 + next(3);
                let inside: PathBuf = std::iter::once("/")
                    .chain((0..depth).map(|_| parts[next(parts.len())]))
                    .collect();
                let outside = match next(3) {
                    0 => inside.clone(),
                    1 => Path::new("/other").join(inside.strip_prefix("/").unwrap()),
                    _ => PathBuf::from(format!("/elsewhere/{}", next(4))),
                };
                Exposure {
                    inside,
                    outside,
                    reason: Reason::Manifest,
                }
            })
            .collect();
        let mut plan = Decision {
            exposures: exposures.clone(),
            ..Decision::default()
        };
        plan.prune_nested();
        let (kept, skipped) = reference(exposures.clone());
        assert_eq!(plan.exposures, kept, "{exposures:?}");
        assert_eq!(plan.skipped, skipped, "{exposures:?}");
    }
}

/// The byte key sorts normalised absolute paths as `Path`'s component-wise order does.
#[test]
fn the_sort_key_orders_paths_as_path_does() {
    let paths = [
        "/",
        "/a",
        "/a/b",
        "/a-b",
        "/a b",
        "/a/b/c",
        "/ab",
        "/a.b",
        "/a/b-c",
        "/a/b/c/d",
        "/b",
        "/a\u{1}",
        "/nix/store/x-a",
        "/nix/store/x-a/lib",
        "/nix/store/x",
        "/nix/store/x/lib",
    ];
    let mut by_path: Vec<&str> = paths.to_vec();
    by_path.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
    let mut by_key: Vec<&str> = paths.to_vec();
    by_key.sort_by_cached_key(|p| super::component_order_key(Path::new(p)));
    assert_eq!(by_key, by_path);
}

/// A host with an 8.9 GPU (`nvidia0`) and a 9.0 (`nvidia1`) in its inventory, and a config
/// with `top` (`gpus_per_build`).
fn mixed_host(top: &str) -> (Config, Hand) {
    use crate::scan::inventory::{InventoryView, KnownGpu};
    use cuda_sandbox_cuda_facts::Capability;
    use cuda_sandbox_manifest::inventory::Bdf;
    let text = format!("{top}host_root = \"{ROOT}\"\n[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\n");
    let c = Config::parse(&text, "t").unwrap();
    let names = ["/fake/dev/nvidia0", "/fake/dev/nvidia1"];
    let mut v = glob(
        with_parents(host(&[(names[0], dev()), (names[1], dev())]), &[]),
        "/dev/nvidia[0-9]*",
        &names,
    );
    let gpu = |minor: u32, bdf: &str, cc: &str| KnownGpu {
        minor,
        bdf: Bdf::parse(bdf).unwrap(),
        capability: Capability::parse(cc).unwrap(),
    };
    v.inventory = Some(InventoryView::Gpus(vec![
        gpu(0, "0000:01:00.0", "8.9"),
        gpu(1, "0000:02:00.0", "9.0"),
    ]));
    (c, v)
}

fn requiring(c: &Config, features: &[&str]) -> Request {
    let mut req = request(c, None);
    req.features = features.iter().map(|f| f.as_bytes().to_vec()).collect();
    req
}

#[test]
fn with_leases_the_features_go_with_the_demand() {
    let (c, v) = mixed_host("gpus_per_build = 1\n");
    let plan = decide_on(&requiring(&c, &["cuda", "cuda-sm-90a"]), &c, &v);
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let fit = plan
        .gpu_demand
        .unwrap()
        .fit
        .expect("the features go with the demand");
    assert_eq!(
        fit.choose(&[Slot::Gpu(0), Slot::Gpu(1)], 1),
        Some(vec![Slot::Gpu(1)])
    );
    // Untagged by cuda-sm-*: no fit, the demand as before.
    let plan = decide_on(&requiring(&c, &["cuda"]), &c, &v);
    assert_eq!(plan.gpu_demand.unwrap().fit, None);
}

#[test]
fn a_host_that_cannot_satisfy_the_features_fails_at_once_naming_them_and_its_gpus() {
    for top in ["gpus_per_build = 1\n", ""] {
        let (c, v) = mixed_host(top);
        let plan = decide_on(&requiring(&c, &["cuda", "cuda-sm-100a"]), &c, &v);
        assert_eq!(plan.gpu_demand, None, "{top}");
        assert_eq!(
            plan.problems[0].kind,
            ProblemKind::FeaturesUnmet(
                vec!["cuda-sm-100a".into()],
                "nvidia0 8.9 at 0000:01:00.0, nvidia1 9.0 at 0000:02:00.0".into(),
            )
        );
    }
    let (c, v) = mixed_host("gpus_per_build = 1\n");
    let plan = decide_on(
        &requiring(&c, &["cuda", "cuda-sm-90a", "cuda-sm-89"]),
        &c,
        &v,
    );
    assert!(plan.problems.is_empty(), "a 9.0 meets cuda-sm-89 too");
    let mut req = requiring(&c, &["cuda", "cuda-sm-90a", "cuda-sm-9x"]);
    if let Verdict::Tagged(t) = &mut req.verdict {
        t.gpus = Some(crate::request::GpusWanted::parse("2"));
    }
    let plan = decide_on(&req, &c, &v);
    assert!(
        matches!(&plan.problems[0].kind,
            ProblemKind::FeaturesUnmet(unmet, _) if unmet == &["cuda-sm-9x"]),
        "{:?}",
        plan.problems
    );
}

#[test]
fn with_every_gpu_exposed_the_exposure_does_not_change() {
    let (c, v) = mixed_host("");
    let plain = decide_on(&requiring(&c, &["cuda"]), &c, &v);
    let tagged = decide_on(&requiring(&c, &["cuda", "cuda-sm-90a"]), &c, &v);
    assert!(tagged.problems.is_empty());
    assert_eq!(tagged.exposures, plain.exposures);
    assert_eq!(insides(&tagged), ["/dev/nvidia0", "/dev/nvidia1"]);
}

#[test]
fn without_an_inventory_the_features_select_nothing_and_say_so() {
    use crate::scan::inventory::InventoryView;
    let (c, mut v) = mixed_host("gpus_per_build = 1\n");
    v.inventory = Some(InventoryView::Missing("/run/x/inventory.json: gone".into()));
    let plan = decide_on(&requiring(&c, &["cuda", "cuda-sm-90a"]), &c, &v);
    assert!(plan.problems.is_empty());
    assert_eq!(plan.gpu_demand.unwrap().fit, None);
    assert_eq!(
        plan.skipped.last().unwrap().why,
        Skipped::NoInventory("cuda-sm-90a".into(), "/run/x/inventory.json: gone".into())
    );
    assert_eq!(plan.warnings.len(), 1);
}

#[test]
fn a_jetson_is_held_to_its_configured_capability() {
    use crate::scan::inventory::InventoryView;
    use cuda_sandbox_cuda_facts::Capability;
    let (c, mut v) = mixed_host("");
    v.inventory = Some(InventoryView::Tegra(Capability::parse("8.7").unwrap()));
    let ok = decide_on(&requiring(&c, &["cuda", "cuda-sm-87"]), &c, &v);
    assert!(ok.problems.is_empty());
    let plan = decide_on(&requiring(&c, &["cuda", "cuda-sm-90"]), &c, &v);
    assert_eq!(
        plan.problems[0].kind,
        ProblemKind::TegraUnmet("8.7".into(), vec!["cuda-sm-90".into()])
    );
}
