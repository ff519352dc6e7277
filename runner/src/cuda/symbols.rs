//! Which export `cuGetProcAddress(symbol, version)` returns: the newest ABI variant of `symbol`
//! introduced at or below `version`. The table was measured on the real drivers (Debian's
//! 535.309.01 and 470.256.02, every API version from 2.0 to 13.1) and agrees with the
//! `PFN_<symbol>_v<version>` typedefs of CUDA 12.9's and 13.0's `cudaTypedefs.h`; variants
//! newer than CUDA 12.2 come from those headers (a newer driver confirms them at run time).
//! Flags are always 0, so per-thread-stream variants are not involved.

use std::borrow::Cow;

use super::version::CudaVersion;

/// A base symbol and its exports, oldest first: (CUDA version introduced, export name).
pub(crate) struct VersionedSymbol {
    /// The base name passed to `cuGetProcAddress`.
    pub symbol: &'static str,
    /// The exports, oldest first.
    pub variants: &'static [(i32, &'static str)],
}

macro_rules! symbols {
    ($( $symbol:literal => [ $( $version:literal $export:literal ),+ ] ),* $(,)?) => {
        /// The symbols `driver::entry_points` and the runtime checks compare: the ones the
        /// runner itself calls, and the driver functions whose ABI changed between CUDA
        /// versions (the version-mixing hazards).
        pub(crate) const CHECKED_SYMBOLS: &[VersionedSymbol] = &[
            $( VersionedSymbol { symbol: $symbol, variants: &[ $( ($version, $export) ),+ ] }, )*
        ];
    };
}

symbols! {
    "cuInit" => [2000 "cuInit"],
    "cuDriverGetVersion" => [2020 "cuDriverGetVersion"],
    "cuDeviceGet" => [2000 "cuDeviceGet"],
    "cuDeviceGetCount" => [2000 "cuDeviceGetCount"],
    "cuDeviceTotalMem" => [2000 "cuDeviceTotalMem", 3020 "cuDeviceTotalMem_v2"],
    "cuDeviceGetUuid" => [9020 "cuDeviceGetUuid", 11040 "cuDeviceGetUuid_v2"],
    "cuDevicePrimaryCtxRelease" => [7000 "cuDevicePrimaryCtxRelease", 11000 "cuDevicePrimaryCtxRelease_v2"],
    "cuDevicePrimaryCtxReset" => [7000 "cuDevicePrimaryCtxReset", 11000 "cuDevicePrimaryCtxReset_v2"],
    "cuDevicePrimaryCtxSetFlags" => [7000 "cuDevicePrimaryCtxSetFlags", 11000 "cuDevicePrimaryCtxSetFlags_v2"],
    "cuCtxCreate" => [2000 "cuCtxCreate", 3020 "cuCtxCreate_v2", 11040 "cuCtxCreate_v3", 12050 "cuCtxCreate_v4"],
    "cuCtxDestroy" => [2000 "cuCtxDestroy", 4000 "cuCtxDestroy_v2"],
    "cuCtxSetCurrent" => [4000 "cuCtxSetCurrent"],
    "cuCtxGetDevice" => [2000 "cuCtxGetDevice", 13000 "cuCtxGetDevice_v2"],
    "cuCtxSynchronize" => [2000 "cuCtxSynchronize", 13000 "cuCtxSynchronize_v2"],
    "cuMemAlloc" => [2000 "cuMemAlloc", 3020 "cuMemAlloc_v2"],
    "cuMemFree" => [2000 "cuMemFree", 3020 "cuMemFree_v2"],
    "cuMemGetInfo" => [2000 "cuMemGetInfo", 3020 "cuMemGetInfo_v2"],
    "cuMemcpyHtoD" => [2000 "cuMemcpyHtoD", 3020 "cuMemcpyHtoD_v2"],
    "cuMemcpyDtoH" => [2000 "cuMemcpyDtoH", 3020 "cuMemcpyDtoH_v2"],
    "cuMemHostRegister" => [4000 "cuMemHostRegister", 6050 "cuMemHostRegister_v2"],
    "cuMemAdvise" => [8000 "cuMemAdvise", 12020 "cuMemAdvise_v2"],
    "cuMemPrefetchAsync" => [8000 "cuMemPrefetchAsync", 12020 "cuMemPrefetchAsync_v2"],
    "cuModuleLoadDataEx" => [2010 "cuModuleLoadDataEx"],
    "cuLinkCreate" => [5050 "cuLinkCreate", 6050 "cuLinkCreate_v2"],
    "cuLaunchKernel" => [4000 "cuLaunchKernel"],
    "cuEventElapsedTime" => [2000 "cuEventElapsedTime", 12080 "cuEventElapsedTime_v2"],
    "cuStreamBeginCapture" => [10000 "cuStreamBeginCapture", 10010 "cuStreamBeginCapture_v2"],
    "cuStreamGetCaptureInfo" => [10010 "cuStreamGetCaptureInfo", 11030 "cuStreamGetCaptureInfo_v2", 12030 "cuStreamGetCaptureInfo_v3"],
    "cuGraphInstantiate" => [10000 "cuGraphInstantiate", 11000 "cuGraphInstantiate_v2"],
    "cuGraphExecUpdate" => [10020 "cuGraphExecUpdate", 12000 "cuGraphExecUpdate_v2"],
    "cuGraphAddKernelNode" => [10000 "cuGraphAddKernelNode", 12000 "cuGraphAddKernelNode_v2"],
    "cuGetProcAddress" => [11030 "cuGetProcAddress", 12000 "cuGetProcAddress_v2"],
}

impl VersionedSymbol {
    /// The export that answers at `version`, or `None` if the symbol is younger.
    pub(crate) fn expected_export(&self, version: i32) -> Option<&'static str> {
        self.variants
            .iter()
            .rev()
            .find(|(introduced, _)| *introduced <= version)
            .map(|(_, export)| *export)
    }
}

/// One driver function that two CUDA versions see as different ABIs. The names borrow the
/// symbol table's; read back from a report, they are owned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct AbiDifference {
    /// The base name, e.g. `cuCtxCreate`.
    pub(crate) symbol: Cow<'static, str>,
    /// The export at the lower version (`None`: the function does not exist there).
    pub(crate) lower: Option<Cow<'static, str>>,
    /// The export at the higher version.
    pub(crate) higher: Option<Cow<'static, str>>,
}

/// The checked functions whose export differs between `a` and `b` (in either order): what a
/// caller built for one version gets when entry points are resolved at the other.
pub(crate) fn abi_differences(a: CudaVersion, b: CudaVersion) -> Vec<AbiDifference> {
    let (lower, higher) = if a <= b { (a, b) } else { (b, a) };
    CHECKED_SYMBOLS
        .iter()
        .filter_map(|entry| {
            let at_lower = entry.expected_export(lower.0);
            let at_higher = entry.expected_export(higher.0);
            (at_lower != at_higher && at_higher.is_some()).then_some(AbiDifference {
                symbol: entry.symbol.into(),
                lower: at_lower.map(Cow::from),
                higher: at_higher.map(Cow::from),
            })
        })
        .collect()
}

/// The API versions at which some checked function changed ABI, up to and including `max`:
/// probing at each of them (and at `max`) covers every variant the driver can hand out.
pub(crate) fn abi_boundaries(max: CudaVersion) -> Vec<CudaVersion> {
    let mut versions: Vec<i32> = CHECKED_SYMBOLS
        .iter()
        .filter(|s| s.variants.len() > 1) // more than one ABI
        .flat_map(|s| s.variants.iter().map(|(v, _)| *v))
        .filter(|v| *v <= max.0)
        .collect();
    versions.push(max.0);
    versions.sort_unstable();
    versions.dedup();
    versions.into_iter().map(CudaVersion).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(symbol: &str) -> &'static VersionedSymbol {
        CHECKED_SYMBOLS.iter().find(|s| s.symbol == symbol).unwrap()
    }

    #[test]
    fn v2_exports_answer_from_3_2_on() {
        let mem_alloc = entry("cuMemAlloc");
        assert_eq!(mem_alloc.expected_export(12020), Some("cuMemAlloc_v2"));
        assert_eq!(mem_alloc.expected_export(3010), Some("cuMemAlloc"));
        assert_eq!(mem_alloc.expected_export(1000), None);
    }

    #[test]
    fn variants_are_oldest_first_and_unique() {
        for s in CHECKED_SYMBOLS {
            assert!(
                s.variants.windows(2).all(|w| w[0].0 < w[1].0),
                "{}",
                s.symbol
            );
        }
    }

    #[test]
    fn differences_between_12_2_and_13_0_name_both_sides() {
        let diffs = abi_differences(CudaVersion(13000), CudaVersion(12020));
        let ctx = diffs.iter().find(|d| d.symbol == "cuCtxCreate").unwrap();
        assert_eq!(ctx.lower.as_deref(), Some("cuCtxCreate_v3"));
        assert_eq!(ctx.higher.as_deref(), Some("cuCtxCreate_v4"));
        assert!(!diffs.iter().any(|d| d.symbol == "cuMemAlloc"));
    }

    #[test]
    fn boundaries_stop_at_the_driver() {
        let b = abi_boundaries(CudaVersion(11040));
        assert_eq!(b.last(), Some(&CudaVersion(11040)));
        assert!(b.contains(&CudaVersion(3020)));
        assert!(!b.iter().any(|v| v.0 > 11040));
    }
}
