# The GPU checks as Nix derivations: each is tagged `requiredSystemFeatures = [ "cuda" ]`, has
# the runner (`cuda-sandbox-check`) itself as its builder (no stdenv, no shell), and writes the
# runner's JSON report to $out. One derivation per check group, plus `all`.
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

  optionalArgs =
    (if expectDriver == null then [ ] else [ "--expect-driver" expectDriver ])
    ++ (if saxpyElements == null then [ ] else [ "--saxpy-elements" (toString saxpyElements) ])
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
      // (if libraryPath == null then { } else { LD_LIBRARY_PATH = libraryPath; })
    );

  groups = {
    devices = "devices::";
    driver = "driver::";
    runtime = "runtime::";
    kernel = "kernel::";
    nvml = "nvml::";
  };
in
builtins.mapAttrs (name: prefix: check name [ prefix ]) groups
// {
  all = check "all" [ ];
}
