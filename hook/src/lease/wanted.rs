//! The derivation's GPU count: how many GPUs a tagged build asks for.

use crate::drv::GPUS_ATTR;

/// The number of GPUs a build needs: the derivation's [`GPUS_ATTR`] when set (`value`),
/// else `gpus_per_build`; never more than `max` (`max_gpus_per_build`, 0: no cap) or the GPUs
/// `available`. Errors say what is wrong with the value.
pub fn wanted(
    value: Option<&str>,
    gpus_per_build: u32,
    max: u32,
    available: usize,
) -> Result<usize, String> {
    let available = if max > 0 {
        available.min(max as usize)
    } else {
        available
    };
    let Some(text) = value else {
        let n = gpus_per_build as usize;
        return if n <= available {
            Ok(n)
        } else {
            Err(format!(
                "gpus_per_build = {n} but a build may have only {available} GPU(s) here: lower \
                 gpus_per_build in the config"
            ))
        };
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 && n <= available => Ok(n),
        _ => Err(format!(
            "{GPUS_ATTR} = {text:?} is not a whole number from 1 to {available} (the GPUs a \
             build may have on this host{}): fix the derivation's {GPUS_ATTR}",
            if max > 0 {
                format!(", max_gpus_per_build = {max}")
            } else {
                String::new()
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpus_attribute_is_validated() {
        assert_eq!(wanted(None, 1, 0, 4), Ok(1));
        assert_eq!(wanted(Some("2"), 1, 0, 4), Ok(2));
        assert_eq!(wanted(Some(" 4 "), 1, 0, 4), Ok(4));
        for bad in ["0", "5", "-1", "two", "", "1.5"] {
            let e = wanted(Some(bad), 1, 0, 4).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "{GPUS_ATTR} = {bad:?} is not a whole number from 1 to 4"
                )),
                "{e}"
            );
        }
        assert!(wanted(None, 3, 0, 2)
            .unwrap_err()
            .contains("lower gpus_per_build"));
    }

    #[test]
    fn max_gpus_per_build_caps_what_a_derivation_may_ask() {
        // Without the cap a derivation could take every GPU.
        assert_eq!(wanted(Some("4"), 1, 0, 4), Ok(4));
        let e = wanted(Some("4"), 1, 2, 4).unwrap_err();
        assert!(
            e.contains("from 1 to 2") && e.contains("max_gpus_per_build = 2"),
            "{e}"
        );
        assert_eq!(wanted(Some("2"), 1, 2, 4), Ok(2));
        assert!(wanted(None, 3, 2, 4).is_err());
    }
}
