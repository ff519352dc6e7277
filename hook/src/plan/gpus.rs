//! How many GPUs a tagged build gets: the derivation's count (parsed when the request was
//! resolved), else `gpus_per_build`, within the host's GPUs and `max_gpus_per_build`; and at
//! most one MIG instance, since CUDA enumerates one MIG instance per process (NVIDIA's MIG
//! user guide, "CUDA Device Enumeration").

use crate::drv::GPUS_ATTR;
use crate::request::GpusWanted;
use crate::slot::Slot;

/// Why a build's GPU count cannot be met. Renders as one line with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GpuCountError {
    /// The configured per-build count (`gpus_per_build`) is above the GPUs a build may have
    /// here.
    #[error(
        "gpus_per_build = {0} but a build may have only {1} GPU(s) here: lower gpus_per_build in \
         the config"
    )]
    PerBuild(usize, usize),
    /// The derivation's count is not a whole number in range: the value as the derivation
    /// wrote it, the GPUs a build may have, and `max_gpus_per_build` (0: no cap).
    #[error(
        "{GPUS_ATTR} = {0:?} is not a whole number from 1 to {1} (the GPUs a build may have on \
         this host{cap}): fix the derivation's {GPUS_ATTR}",
        cap = if *.2 > 0 { format!(", max_gpus_per_build = {}", .2) } else { String::new() }
    )]
    Attribute(String, usize, u32),
    /// More than one slot is asked where some GPUs are MIG instances and too few are whole:
    /// how many, the whole GPUs (without MIG instances) there are, and the derivation's text
    /// when it asked (else the configuration did).
    #[error(
        "{asked} asks for {0} GPUs, but a build may have at most one MIG instance (CUDA \
         enumerates one MIG instance per process) and this host has only {1} GPU(s) without \
         MIG: {fix}",
        asked = match .2 {
            Some(text) => format!("{GPUS_ATTR} = {text:?}"),
            None => format!("gpus_per_build = {}", .0),
        },
        fix = if .2.is_some() {
            format!("set the derivation's {GPUS_ATTR} to \"1\" to get one MIG instance")
        } else {
            "set gpus_per_build = 1 to lease one MIG instance per build".to_string()
        }
    )]
    OneMigInstance(usize, usize, Option<String>),
}

/// The slots of `slots` a build needing `count` may be given: any one of them for one; only
/// whole GPUs for more, since CUDA enumerates at most one MIG instance per process.
pub(super) fn one_mig_instance(
    count: usize,
    slots: &[Slot],
    wanted: Option<&GpusWanted>,
) -> Result<Vec<Slot>, GpuCountError> {
    if count <= 1 {
        return Ok(slots.to_vec());
    }
    let whole: Vec<Slot> = slots
        .iter()
        .copied()
        .filter(|s| matches!(s, Slot::Gpu(_)))
        .collect();
    if whole.len() >= count || whole.len() == slots.len() {
        return Ok(whole);
    }
    let attribute = wanted.map(|w| w.text.clone());
    Err(GpuCountError::OneMigInstance(count, whole.len(), attribute))
}

/// The number of GPUs a build needs: the derivation's [`GPUS_ATTR`] when set (`wanted`), else
/// `gpus_per_build`; never more than `max` (`max_gpus_per_build`, 0: no cap) or the GPUs
/// `available`.
pub(super) fn gpu_count(
    wanted: Option<&GpusWanted>,
    gpus_per_build: u32,
    max: u32,
    available: usize,
) -> Result<usize, GpuCountError> {
    let available = if max > 0 {
        available.min(max as usize)
    } else {
        available
    };
    let per_build = gpus_per_build as usize;
    match wanted {
        None if per_build <= available => Ok(per_build),
        None => Err(GpuCountError::PerBuild(per_build, available)),
        Some(w) => match w.count {
            Some(n) if n >= 1 && n <= available => Ok(n),
            _ => Err(GpuCountError::Attribute(w.text.clone(), available, max)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(
        value: Option<&str>,
        per_build: u32,
        max: u32,
        available: usize,
    ) -> Result<usize, GpuCountError> {
        let value = value.map(GpusWanted::parse);
        gpu_count(value.as_ref(), per_build, max, available)
    }

    fn attribute(text: &str, available: usize, max: u32) -> GpuCountError {
        GpuCountError::Attribute(text.into(), available, max)
    }

    #[test]
    fn the_gpus_attribute_is_validated() {
        assert_eq!(wanted(None, 1, 0, 4), Ok(1));
        assert_eq!(wanted(Some("2"), 1, 0, 4), Ok(2));
        assert_eq!(wanted(Some(" 4 "), 1, 0, 4), Ok(4));
        for bad in ["0", "5", "-1", "two", "", "1.5"] {
            assert_eq!(
                wanted(Some(bad), 1, 0, 4),
                Err(attribute(bad, 4, 0)),
                "{bad:?}"
            );
        }
        assert_eq!(
            attribute("two", 4, 0).to_string(),
            format!(
                "{GPUS_ATTR} = \"two\" is not a whole number from 1 to 4 (the GPUs a build may \
                 have on this host): fix the derivation's {GPUS_ATTR}"
            )
        );
        assert_eq!(wanted(None, 3, 0, 2), Err(GpuCountError::PerBuild(3, 2)));
        assert_eq!(
            GpuCountError::PerBuild(3, 2).to_string(),
            "gpus_per_build = 3 but a build may have only 2 GPU(s) here: lower gpus_per_build in \
             the config"
        );
    }

    #[test]
    fn max_gpus_per_build_caps_what_a_derivation_may_ask() {
        // Without the cap a derivation could take every GPU.
        assert_eq!(wanted(Some("4"), 1, 0, 4), Ok(4));
        assert_eq!(wanted(Some("4"), 1, 2, 4), Err(attribute("4", 2, 2)));
        assert_eq!(
            attribute("4", 2, 2).to_string(),
            format!(
                "{GPUS_ATTR} = \"4\" is not a whole number from 1 to 2 (the GPUs a build may \
                 have on this host, max_gpus_per_build = 2): fix the derivation's {GPUS_ATTR}"
            )
        );
        assert_eq!(wanted(Some("2"), 1, 2, 4), Ok(2));
        assert_eq!(wanted(None, 3, 2, 4), Err(GpuCountError::PerBuild(3, 2)));
    }

    #[test]
    fn a_build_gets_at_most_one_mig_instance() {
        use crate::mig::InstanceId;
        let slice = |gi| Slot::Mig(InstanceId { gpu: 0, gi, ci: 0 });
        let slots = [slice(1), slice(2), Slot::Gpu(1)];
        assert_eq!(one_mig_instance(1, &slots, None).unwrap(), slots);
        let two = GpusWanted::parse("2");
        let e = one_mig_instance(2, &slots, Some(&two))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cudaSandboxGpus = \"2\" asks for 2 GPUs, but a build may have at most one MIG \
             instance (CUDA enumerates one MIG instance per process) and this host has only 1 \
             GPU(s) without MIG: set the derivation's cudaSandboxGpus to \"1\" to get one MIG \
             instance"
        );
        let whole = [Slot::Gpu(0), Slot::Gpu(1), slice(1)];
        assert_eq!(
            one_mig_instance(2, &whole, Some(&two)).unwrap(),
            [Slot::Gpu(0), Slot::Gpu(1)]
        );
        assert_eq!(
            one_mig_instance(2, &slots, None),
            Err(GpuCountError::OneMigInstance(2, 1, None))
        );
        assert!(GpuCountError::OneMigInstance(2, 1, None)
            .to_string()
            .starts_with("gpus_per_build = 2 asks for 2 GPUs, but"));
    }
}
