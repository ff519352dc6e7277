//! Which export `cuGetProcAddress(symbol, version)` must return: the newest ABI variant
//! of `symbol` introduced at or below `version` (from `cuda.h`'s `__CUDA_API_VERSION`
//! history; per-thread-stream variants are not involved since flags are 0).

/// A base symbol and its exports, oldest first: (CUDA version introduced, export name).
pub struct VersionedSymbol {
    /// The base name passed to `cuGetProcAddress`.
    pub symbol: &'static str,
    /// The exports, oldest first.
    pub variants: &'static [(i32, &'static str)],
}

/// The symbols `driver::entry_points` and `runtime::entry_points` check: the ones the
/// runner itself uses, including every call whose ABI changed with a `_v2`.
pub const CHECKED_SYMBOLS: &[VersionedSymbol] = &[
    VersionedSymbol {
        symbol: "cuInit",
        variants: &[(2000, "cuInit")],
    },
    VersionedSymbol {
        symbol: "cuDriverGetVersion",
        variants: &[(2020, "cuDriverGetVersion")],
    },
    VersionedSymbol {
        symbol: "cuDeviceGet",
        variants: &[(2000, "cuDeviceGet")],
    },
    VersionedSymbol {
        symbol: "cuDeviceGetCount",
        variants: &[(2000, "cuDeviceGetCount")],
    },
    VersionedSymbol {
        symbol: "cuDeviceTotalMem",
        variants: &[(2000, "cuDeviceTotalMem"), (3020, "cuDeviceTotalMem_v2")],
    },
    VersionedSymbol {
        symbol: "cuDevicePrimaryCtxRelease",
        variants: &[
            (7000, "cuDevicePrimaryCtxRelease"),
            (11000, "cuDevicePrimaryCtxRelease_v2"),
        ],
    },
    VersionedSymbol {
        symbol: "cuCtxSetCurrent",
        variants: &[(4000, "cuCtxSetCurrent")],
    },
    VersionedSymbol {
        symbol: "cuMemAlloc",
        variants: &[(2000, "cuMemAlloc"), (3020, "cuMemAlloc_v2")],
    },
    VersionedSymbol {
        symbol: "cuMemFree",
        variants: &[(2000, "cuMemFree"), (3020, "cuMemFree_v2")],
    },
    VersionedSymbol {
        symbol: "cuMemcpyHtoD",
        variants: &[(2000, "cuMemcpyHtoD"), (3020, "cuMemcpyHtoD_v2")],
    },
    VersionedSymbol {
        symbol: "cuMemcpyDtoH",
        variants: &[(2000, "cuMemcpyDtoH"), (3020, "cuMemcpyDtoH_v2")],
    },
    VersionedSymbol {
        symbol: "cuModuleLoadDataEx",
        variants: &[(2010, "cuModuleLoadDataEx")],
    },
    VersionedSymbol {
        symbol: "cuLaunchKernel",
        variants: &[(4000, "cuLaunchKernel")],
    },
];

/// The symbol whose answer `driver::entry_points` asks for above the driver's version.
pub const REFUSAL_PROBE: &str = "cuMemAlloc";

impl VersionedSymbol {
    /// The export that must answer at `version`, or `None` if the symbol is younger.
    pub fn expected_export(&self, version: i32) -> Option<&'static str> {
        self.variants
            .iter()
            .rev()
            .find(|(introduced, _)| *introduced <= version)
            .map(|(_, export)| *export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_exports_answer_from_3_2_on() {
        let mem_alloc = CHECKED_SYMBOLS
            .iter()
            .find(|s| s.symbol == "cuMemAlloc")
            .unwrap();
        assert_eq!(mem_alloc.expected_export(12020), Some("cuMemAlloc_v2"));
        assert_eq!(mem_alloc.expected_export(3010), Some("cuMemAlloc"));
        assert_eq!(mem_alloc.expected_export(1000), None);
    }
}
