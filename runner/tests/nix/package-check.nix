# The package checks in a real sandboxed build: `package` (a directory of files made by the
# test, e.g. a library built by NVIDIA's ptxas and fatbinary) is copied into the store; the
# tagged check derivation's builder is cuda-sandbox-check itself, with
# `--package` and the closure Nix writes for it (exportReferencesGraph), since there is no
# store database inside the sandbox. Built by runner/tests/nix_sandbox/; `nonce` forces a
# fresh build.
# `ldLibraryPath` ("" for none: a runner whose DT_RUNPATH has the driver link, as Nixpkgs builds
# it) is where the runner finds the driver.
{
  runner,
  nonce,
  package,
  ldLibraryPath ? "/run/opengl-driver/lib",
}:
let
  # The files as a store path of their own: its closure is itself.
  gpuPackage = builtins.path {
    path = /. + package;
    name = "gpu-package";
  };
in
derivation (
  {
    name = "package-check";
    system = builtins.currentSystem;
    builder = builtins.path {
      path = /. + runner;
      name = "cuda-sandbox-check";
    };
    args = [
      "--saxpy-elements"
      "4096"
      "--test-threads"
      "1"
      "--package"
      "${gpuPackage}"
      "--package-closure"
      "package-closure"
    ];
    exportReferencesGraph = [
      "package-closure"
      gpuPackage
    ];
    requiredSystemFeatures = [ "cuda" ];
    inherit nonce;
  }
  // (if ldLibraryPath == "" then { } else { LD_LIBRARY_PATH = ldLibraryPath; })
)
