# A stand-in for the selection rule of the NixOS-CUDA Hydra's jobset (nixos-cuda/hydra-jobsets,
# jobsets/cuda-tests.nix), as that file states it; written for these tests, not its code. Of a
# package, the jobset builds `passthru.gpuCheck` and every `passthru.tests.<name>.gpuCheck`
# whose `requiredSystemFeatures` contains "cuda"; a package whose passthru fails to evaluate
# gives nothing. The value is the tree of attribute paths it would build, each leaf `true`.
{ lib }:
package:
let
  passthru = builtins.tryEval (package.passthru or { });
  tests =
    let
      t = builtins.tryEval (passthru.value.tests or { });
    in
    if t.success then t.value else { };
  hasCudaGpuCheck =
    v: v ? gpuCheck && builtins.elem "cuda" (v.gpuCheck.requiredSystemFeatures or [ ]);
  selected = lib.filterAttrs (_: v: v != { }) (
    lib.mapAttrs (_: test: lib.optionalAttrs (hasCudaGpuCheck test) { gpuCheck = true; }) tests
  );
in
if passthru.success then
  lib.optionalAttrs (selected != { }) { tests = selected; }
  // lib.optionalAttrs (hasCudaGpuCheck passthru.value) { gpuCheck = true; }
else
  { }
