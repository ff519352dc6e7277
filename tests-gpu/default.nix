# The GPU checks as Nix derivations: each is tagged `requiredSystemFeatures = [ "cuda" ]`, has
# the runner (`cuda-sandbox-check`) itself as its builder (no stdenv, no shell), and writes the
# runner's JSON report to $out. One derivation per check group, plus `all`; and `no-gpu`, the
# negative check, which is NOT tagged and passes only when it sees no GPU device and no driver
# (so it is not part of `all`: build it on its own, on any machine with the hook installed).
#
# The same file serves the flake (runner = the nixpkgs-built package) and CI / scripts/main
# (runner = the absolute path of a cargo-built binary, with the fake driver):
#
#   nix-build tests-gpu --arg runner ./target/release/cuda-sandbox-check --argstr nonce "$RANDOM"
{
  # The runner: a package with bin/cuda-sandbox-check, or the path of the binary itself.
  runner,
  system ? builtins.currentSystem,
  # Any string; change it to force a rebuild (Nix never rebuilds an output it has).
  nonce ? "",
  features ? [ "cuda" ],
  # `host`, `compat`, or a path prefix the loaded libcuda.so.1 must lie under (null: trust the
  # hook's manifest).
  expectDriver ? null,
  # LD_LIBRARY_PATH of the checks: the driver link, for runners without it in DT_RUNPATH.
  libraryPath ? "/run/opengl-driver/lib",
  # A cuda_compat package (its `compat/` directory is searched before the driver, as nixpkgs
  # binaries' DT_RUNPATH does); the checks then expect the compat driver unless `expectDriver`
  # says otherwise.
  cudaCompat ? null,
  saxpyElements ? null,
  extraArgs ? [ ],
}:
let
  builder =
    if builtins.isString runner || builtins.isPath runner then
      builtins.path {
        path = /. + (toString runner);
        name = "cuda-sandbox-check";
      }
    else
      "${runner}/bin/cuda-sandbox-check";

  expectedDriver = if expectDriver == null && cudaCompat != null then "compat" else expectDriver;

  searchPath = builtins.filter (p: p != null) [
    (if cudaCompat == null then null else "${cudaCompat}/compat")
    libraryPath
  ];
  libraryEnv =
    if searchPath == [ ] then { } else { LD_LIBRARY_PATH = builtins.concatStringsSep ":" searchPath; };

  optionalArgs =
    (
      if expectedDriver == null then
        [ ]
      else
        [
          "--expect-driver"
          expectedDriver
        ]
    )
    ++ (
      if saxpyElements == null then
        [ ]
      else
        [
          "--saxpy-elements"
          (toString saxpyElements)
        ]
    )
    ++ extraArgs;

  check =
    name: filter:
    derivation (
      {
        name = "cuda-sandbox-check-${name}";
        inherit system builder nonce;
        args = optionalArgs ++ filter;
        requiredSystemFeatures = features;
      }
      // libraryEnv
    );

  # Untagged, with the same library path: were the driver or a device leaking into every build,
  # the runner would find it here. `isolation::no_gpu` fails on any /dev/nvidia* node, a
  # loadable libcuda.so.1 or a hook manifest.
  noGpu = derivation (
    {
      name = "cuda-sandbox-check-no-gpu";
      inherit system builder nonce;
      args = [ "--expect-no-gpu" ];
    }
    // libraryEnv
  );

  groups = {
    devices = "devices::";
    driver = "driver::";
    runtime = "runtime::";
    kernel = "kernel::";
    nvml = "nvml::";
    mig = "mig::";
  };
in
builtins.mapAttrs (name: prefix: check name [ prefix ]) groups
// {
  all = check "all" [ ];
  no-gpu = noGpu;
}
