//! The fleet's Nix system features, in Nixpkgs' convention: `cuda-sm-89` names compute
//! capability 8.9 (`_cuda.lib.mkCudaSystemFeature`), and a builder advertises, for the GPUs it
//! has, what `_cuda.lib.getCudaSystemFeatures` gives (followed from the Nixpkgs commit that
//! [`gpus::nixpkgs_pin`] names; no code of it is used). For each GPU of capability X.Y, over
//! the forms Nixpkgs' capability database holds (the table's `nixpkgs` column):
//!
//! - every baseline capability at or below X.Y;
//! - an arch-specific one (`9.0a`) only when its base is X.Y itself;
//! - a family-specific one (`10.0f`) when its base has major X and is at or below X.Y.
//!
//! Several GPUs advertise the union. It is a scheduling relation (which builder may take a
//! build), not a promise that a binary runs: that is `package::gpu_code`'s question. A GPU is
//! named by its capability alone: `9.0a` names code, not a GPU, and is refused.

use std::fmt;

use super::gpus::{self, Architecture};
use super::{Arch, Capability, ValueError, Variant};

/// The feature every GPU build of this project is tagged with, advertised beside the
/// `cuda-sm-*` ones.
pub const CUDA: &str = "cuda";

/// Why a capability given as a GPU's was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuCapabilityError {
    /// A variant suffix: a feature set, not a GPU.
    #[error("{0} is a feature set rather than a GPU: give its GPU's capability, {1}")]
    FeatureSet(String, Capability),
    /// Not a compute capability at all.
    #[error(transparent)]
    Malformed(#[from] ValueError),
}

/// Parses a GPU's compute capability (`8.9`, `89`, `sm_89`); `9.0a` and `sm_100f` are refused.
pub fn parse_gpu(text: &str) -> Result<Capability, GpuCapabilityError> {
    let arch = Arch::parse(text)?;
    match arch.variant {
        Variant::Plain => Ok(arch.capability),
        _ => Err(GpuCapabilityError::FeatureSet(
            text.trim().to_owned(),
            arch.capability,
        )),
    }
}

/// The system feature naming `arch`: `cuda-sm-90a` for sm_90a (the capability without its
/// dot, then the suffix).
pub fn feature_name(arch: Arch) -> String {
    format!("cuda-sm-{}{}", arch.capability.sm(), arch.variant.suffix())
}

/// Whether a GPU of capability `gpu` is offered a build requiring `required`.
pub fn offers(gpu: Capability, required: Arch) -> bool {
    let base = required.capability;
    match required.variant {
        Variant::Plain => base <= gpu,
        Variant::ArchSpecific => base == gpu,
        Variant::Family => base.major == gpu.major && base <= gpu,
    }
}

/// The `cuda-sm-*` features among a derivation's required features, read by the one rule
/// that the hook and the runner share.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Required {
    /// Each well-formed `cuda-sm-*` feature, in the order given, each once.
    pub archs: Vec<Arch>,
    /// `cuda-sm-*` names that are not a feature of the convention (`cuda-sm-9x`, `cuda-sm-090`):
    /// no GPU satisfies them.
    pub malformed: Vec<String>,
}

impl Required {
    /// Whether no `cuda-sm-*` feature is required at all.
    pub fn is_empty(&self) -> bool {
        self.archs.is_empty() && self.malformed.is_empty()
    }

    /// The required features no GPU of `gpus` offers (the malformed ones always), by name.
    /// Empty when the GPUs together satisfy the requirement: each feature by at least one of
    /// them, the union semantics of [`advertised`].
    pub fn unmet_by(&self, gpus: &[Capability]) -> Vec<String> {
        let missing = self
            .archs
            .iter()
            .filter(|&&arch| !gpus.iter().any(|&gpu| offers(gpu, arch)))
            .map(|&arch| feature_name(arch));
        missing.chain(self.malformed.iter().cloned()).collect()
    }

    /// Whether `gpus` together satisfy every required feature.
    pub fn satisfied_by(&self, gpus: &[Capability]) -> bool {
        self.unmet_by(gpus).is_empty()
    }
}

/// The `cuda-sm-*` features among `features` (other features are ignored). A name is taken
/// only in the form [`feature_name`] writes it, so `cuda-sm-9.0` is malformed, not 9.0.
pub fn required<'a>(features: impl IntoIterator<Item = &'a str>) -> Required {
    let mut required = Required::default();
    for name in features {
        let Some(body) = name.strip_prefix("cuda-sm-") else {
            continue;
        };
        match (Arch::parse(body).ok()).filter(|&arch| feature_name(arch) == name) {
            Some(arch) if required.archs.contains(&arch) => {}
            Some(arch) => required.archs.push(arch),
            None if required.malformed.iter().any(|m| m == name) => {}
            None => required.malformed.push(name.to_owned()),
        }
    }
    required
}

/// Every form the convention knows in `rows`, in Nixpkgs' order (by capability; X.Y, then X.Ya,
/// X.Yf).
fn forms_of(rows: &[Architecture]) -> Vec<Arch> {
    rows.iter()
        .flat_map(|row| {
            row.nixpkgs.iter().map(|&variant| Arch {
                capability: row.capability,
                variant,
            })
        })
        .collect()
}

/// Why a GPU adds no feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// Newer than every row of the table: a newer cuda-sandbox may know it.
    NewerThanTable,
    /// The table has the architecture, but Nixpkgs' convention (at the pinned commit) does
    /// not, so Nixpkgs names no feature for it.
    NotInNixpkgs,
    /// Older than, or between, the rows: no such GPU is known.
    NotInTable,
}

impl Unknown {
    /// In words, for one line of output.
    pub fn describe(self) -> &'static str {
        match self {
            Unknown::NewerThanTable => "newer than cuda-sandbox's capability table",
            Unknown::NotInNixpkgs => "not in the Nixpkgs convention the table follows",
            Unknown::NotInTable => "not a capability cuda-sandbox's table knows",
        }
    }
}

/// What a set of GPUs advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    /// The `cuda-sm-*` features, in Nixpkgs' order, each once.
    pub features: Vec<String>,
    /// The GPUs' capabilities that add nothing, each once, with why; never guessed.
    pub unknown: Vec<(Capability, Unknown)>,
}

impl fmt::Display for Advertised {
    /// The features, space-separated, as nix.conf's `system-features` takes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.features.join(" "))
    }
}

/// The features a builder with GPUs of these capabilities advertises (the union over them).
pub fn advertised(gpus: &[Capability]) -> Advertised {
    let rows = gpus::architectures();
    let forms = forms_of(rows);
    let mut unknown: Vec<(Capability, Unknown)> = Vec::new();
    let mut known = Vec::new();
    for &gpu in gpus {
        let row = rows.iter().find(|row| row.capability == gpu);
        if row.is_some_and(|row| row.nixpkgs.contains(&Variant::Plain)) {
            known.push(gpu);
            continue;
        }
        let why = match row {
            Some(_) => Unknown::NotInNixpkgs,
            None if rows.last().is_none_or(|last| gpu > last.capability) => Unknown::NewerThanTable,
            None => Unknown::NotInTable,
        };
        if !unknown.iter().any(|(c, _)| *c == gpu) {
            unknown.push((gpu, why));
        }
    }
    let features = forms
        .into_iter()
        .filter(|&form| known.iter().any(|&gpu| offers(gpu, form)))
        .map(feature_name)
        .collect();
    Advertised { features, unknown }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(text: &str) -> Capability {
        Capability::parse(text).unwrap()
    }

    fn features(gpus: &[&str]) -> Vec<String> {
        let gpus: Vec<Capability> = gpus.iter().map(|g| cc(g)).collect();
        let got = advertised(&gpus);
        assert!(got.unknown.is_empty(), "{:?}", got.unknown);
        got.features
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    /// `mkCudaSystemFeature "8.9"` is `cuda-sm-89`, `"10.0f"` is `cuda-sm-100f` (Nixpkgs'
    /// own property test, cuda-system-features.nix at the pinned commit).
    #[test]
    fn a_feature_is_the_capability_without_its_dot() {
        assert_eq!(feature_name(Arch::parse("8.9").unwrap()), "cuda-sm-89");
        assert_eq!(feature_name(Arch::parse("10.0f").unwrap()), "cuda-sm-100f");
        assert_eq!(feature_name(Arch::parse("12.1a").unwrap()), "cuda-sm-121a");
    }

    /// The whole lists, written out from the db at the pinned commit (3.5 3.7 5.0 5.2 6.0 6.1
    /// 7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0 9.0a, and 10.0 10.1 10.3 11.0 12.0 12.1 each with a and
    /// f) by the three rules, by hand.
    #[test]
    fn each_gpu_advertises_the_convention_s_list() {
        let old = "cuda-sm-35 cuda-sm-37 cuda-sm-50 cuda-sm-52 cuda-sm-60 cuda-sm-61 cuda-sm-70 \
                   cuda-sm-72";
        assert_eq!(features(&["7.5"]), words(&format!("{old} cuda-sm-75")));
        let ampere = format!("{old} cuda-sm-75 cuda-sm-80 cuda-sm-86 cuda-sm-87");
        assert_eq!(features(&["8.7"]), words(&ampere));
        let hopper = format!("{ampere} cuda-sm-89 cuda-sm-90");
        assert_eq!(features(&["9.0"]), words(&format!("{hopper} cuda-sm-90a")));
        assert_eq!(
            features(&["10.0"]),
            words(&format!("{hopper} cuda-sm-100 cuda-sm-100a cuda-sm-100f"))
        );
        let to_103 = format!(
            "{hopper} cuda-sm-100 cuda-sm-100f cuda-sm-101 cuda-sm-101f cuda-sm-103 cuda-sm-103a \
             cuda-sm-103f"
        );
        assert_eq!(features(&["10.3"]), words(&to_103));
        let to_110 = format!("{hopper} cuda-sm-100 cuda-sm-101 cuda-sm-103 cuda-sm-110");
        assert_eq!(
            features(&["12.0"]),
            words(&format!("{to_110} cuda-sm-120 cuda-sm-120a cuda-sm-120f"))
        );
        assert_eq!(
            features(&["12.1"]),
            words(&format!(
                "{to_110} cuda-sm-120 cuda-sm-120f cuda-sm-121 cuda-sm-121a cuda-sm-121f"
            ))
        );
    }

    /// Nixpkgs' property cases: 'a' for its own GPU only, 'f' across later minors of the
    /// family and not past it, the union of several GPUs without duplicates.
    #[test]
    fn arch_and_family_features_follow_their_rules() {
        let has = |gpus: &[&str], feature: &str| features(gpus).iter().any(|f| f == feature);
        assert!(has(&["9.0"], "cuda-sm-90a") && !has(&["10.0"], "cuda-sm-90a"));
        assert!(has(&["12.1"], "cuda-sm-121a"));
        for gpu in ["10.0", "10.1", "10.3"] {
            assert!(has(&[gpu], "cuda-sm-100f"), "{gpu}");
        }
        for gpu in ["9.0", "11.0", "12.0", "12.1"] {
            assert!(!has(&[gpu], "cuda-sm-100f"), "{gpu}");
        }
        assert!(!has(&["10.0"], "cuda-sm-103f"));
        assert!(has(&["10.3"], "cuda-sm-100f") && !has(&["10.3"], "cuda-sm-100a"));
        assert!(!has(&["8.0"], "cuda-sm-89") && has(&["8.9"], "cuda-sm-89"));
        let both = features(&["9.0", "10.0"]);
        assert!(both.contains(&"cuda-sm-90a".into()) && both.contains(&"cuda-sm-100a".into()));
        assert!(features(&["10.0"]).iter().all(|f| both.contains(f)));
        let mut unique = both.clone();
        unique.dedup();
        assert_eq!(unique, both);
        assert_eq!(features(&["10.0", "9.0"]), both);
    }

    #[test]
    fn a_capability_the_convention_lacks_is_named_never_guessed() {
        let got = advertised(&[cc("13.0"), cc("8.8"), cc("4.2"), cc("13.0")]);
        assert!(got.features.is_empty(), "{got:?}");
        assert_eq!(
            got.unknown,
            [
                (cc("13.0"), Unknown::NewerThanTable),
                (cc("8.8"), Unknown::NotInNixpkgs),
                (cc("4.2"), Unknown::NotInTable),
            ]
        );
        let mixed = advertised(&[cc("13.0"), cc("7.5")]);
        assert_eq!(
            mixed.features.last().map(String::as_str),
            Some("cuda-sm-75")
        );
        assert_eq!(mixed.unknown, [(cc("13.0"), Unknown::NewerThanTable)]);
    }

    /// Issue example: `[cuda-sm-90a, cuda-sm-100f]` on a 9.0 + 10.0 host is met by both GPUs
    /// together, by neither alone; a baseline is met by any GPU at or above it.
    #[test]
    fn a_requirement_is_met_by_the_union_of_the_gpus() {
        let req = required(["cuda", "big-parallel", "cuda-sm-90a", "cuda-sm-100f"]);
        assert_eq!(req.archs.len(), 2);
        assert!(req.satisfied_by(&[cc("9.0"), cc("10.0")]));
        assert_eq!(req.unmet_by(&[cc("9.0")]), ["cuda-sm-100f"]);
        assert_eq!(req.unmet_by(&[cc("10.0")]), ["cuda-sm-90a"]);
        assert_eq!(req.unmet_by(&[]), ["cuda-sm-90a", "cuda-sm-100f"]);
        let baseline = required(["cuda-sm-86"]);
        assert!(baseline.satisfied_by(&[cc("8.9")]));
        assert!(baseline.satisfied_by(&[cc("12.0")]));
        assert!(!baseline.satisfied_by(&[cc("8.0")]));
        assert!(required(["cuda", "kvm"]).is_empty());
        assert!(required(["cuda"]).satisfied_by(&[]));
    }

    #[test]
    fn a_malformed_feature_is_never_met() {
        let req = required([
            "cuda-sm-9.0",
            "cuda-sm-",
            "cuda-sm-sm_90",
            "cuda-sm-090",
            "cuda-sm-90",
        ]);
        assert_eq!(req.archs, [Arch::parse("9.0").unwrap()]);
        assert_eq!(
            req.malformed,
            ["cuda-sm-9.0", "cuda-sm-", "cuda-sm-sm_90", "cuda-sm-090"]
        );
        assert!(!req.satisfied_by(&[cc("9.0"), cc("12.0")]));
        assert_eq!(req.unmet_by(&[cc("9.0")]).len(), 4);
    }

    /// Every feature a GPU advertises is met by that GPU: the rule and the advertisement agree.
    #[test]
    fn what_a_gpu_advertises_it_satisfies() {
        for form in forms_of(gpus::architectures())
            .iter()
            .filter(|f| f.variant == Variant::Plain)
        {
            let gpu = form.capability;
            let own = advertised(&[gpu]);
            let req = required(own.features.iter().map(String::as_str));
            assert!(req.malformed.is_empty(), "{gpu}: {req:?}");
            assert!(req.satisfied_by(&[gpu]), "{gpu}");
            let not_advertised: Vec<String> = forms_of(gpus::architectures())
                .into_iter()
                .map(feature_name)
                .filter(|f| !own.features.contains(f))
                .collect();
            for f in not_advertised {
                assert!(!required([f.as_str()]).satisfied_by(&[gpu]), "{gpu} {f}");
            }
        }
    }

    #[test]
    fn a_feature_set_is_not_a_gpu() {
        assert_eq!(parse_gpu("sm_89"), Ok(cc("8.9")));
        assert_eq!(parse_gpu(" 12.1 "), Ok(cc("12.1")));
        let err = parse_gpu("9.0a").unwrap_err();
        assert_eq!(
            err.to_string(),
            "9.0a is a feature set rather than a GPU: give its GPU's capability, 9.0"
        );
        assert!(matches!(
            parse_gpu("10.0f"),
            Err(GpuCapabilityError::FeatureSet(..))
        ));
        assert_eq!(
            parse_gpu("nine"),
            Err(GpuCapabilityError::Malformed(ValueError::Arch(
                "nine".into()
            )))
        );
    }

    #[test]
    fn every_feature_names_a_known_form_and_every_gpu_its_own() {
        let forms = forms_of(gpus::architectures());
        let names: Vec<String> = forms.iter().map(|&f| feature_name(f)).collect();
        for form in forms.iter().filter(|f| f.variant == Variant::Plain) {
            let own = advertised(&[form.capability]);
            assert!(own.features.contains(&feature_name(*form)), "{form}");
            assert!(own.features.iter().all(|f| names.contains(f)), "{form}");
        }
    }
}
