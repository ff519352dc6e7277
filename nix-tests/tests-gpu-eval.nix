# Evaluation test of tests-gpu/ (needs no Nixpkgs): the interface scripts/main and CI use, the
# derivations' tags, builder, arguments and library path, the untagged `no-gpu`, cudaCompat.
#
#   nix-instantiate --eval --strict nix-tests/tests-gpu-eval.nix [--arg runner /path/to/cuda-sandbox-check]
#
# `runner`: a runner binary as CI passes it (a path, copied into the store); default a stub
# package (an attribute set with an outPath; nothing is built).
{
  runner ? {
    outPath = "${builtins.storeDir}/00000000000000000000000000000000-cuda-sandbox-0.1.0";
  },
}:
let
  inherit (builtins) all attrNames elem;
  cudaCompat = {
    outPath = "${builtins.storeDir}/11111111111111111111111111111111-cuda_compat-12.9";
  };

  ci = import ../tests-gpu {
    inherit runner;
    nonce = "42";
    saxpyElements = 1048576;
  };
  flake = import ../tests-gpu {
    inherit runner;
    libraryPath = null;
  };
  compat = import ../tests-gpu { inherit runner cudaCompat; };
  compatHost = import ../tests-gpu {
    inherit runner cudaCompat;
    expectDriver = "host";
  };

  groups = [
    "devices"
    "driver"
    "runtime"
    "kernel"
    "nvml"
    "mig"
  ];
  tagged = groups ++ [ "all" ];

  check = what: condition: if condition then true else throw "tests-gpu-eval: ${what}";

  checks = [
    (check "the attributes: one per group, all, no-gpu" (
      attrNames ci == builtins.sort builtins.lessThan (tagged ++ [ "no-gpu" ])
    ))
    (check "every check but no-gpu is tagged cuda" (
      all (n: ci.${n}.requiredSystemFeatures == [ "cuda" ]) tagged
    ))
    (check "no-gpu is untagged and runs --expect-no-gpu only" (
      !(ci.no-gpu ? requiredSystemFeatures) && ci.no-gpu.args == [ "--expect-no-gpu" ]
    ))
    (check "the runner is the builder of every check" (
      all (n: ci.${n}.builder == ci.all.builder) (tagged ++ [ "no-gpu" ])
      && builtins.match ".*cuda-sandbox-check" (toString ci.all.builder) != null
    ))
    (check "each group filters on its prefix; all runs everything" (
      ci.kernel.args == [
        "--saxpy-elements"
        "1048576"
        "kernel::"
      ]
      &&
        ci.all.args == [
          "--saxpy-elements"
          "1048576"
        ]
    ))
    (check "the nonce reaches every derivation" (
      all (n: ci.${n}.nonce == "42") (tagged ++ [ "no-gpu" ])
    ))
    (check "CI's runner gets the driver link as LD_LIBRARY_PATH, no-gpu too" (
      ci.all.LD_LIBRARY_PATH == "/run/opengl-driver/lib"
      && ci.no-gpu.LD_LIBRARY_PATH == "/run/opengl-driver/lib"
    ))
    (check "libraryPath = null: no LD_LIBRARY_PATH (the runner's DT_RUNPATH)" (
      !(flake.all ? LD_LIBRARY_PATH)
    ))
    (check "cudaCompat: its compat/ first in the search path, compat expected" (
      compat.all.LD_LIBRARY_PATH == "${cudaCompat.outPath}/compat:/run/opengl-driver/lib"
      &&
        compat.all.args == [
          "--expect-driver"
          "compat"
        ]
    ))
    (check "cudaCompat with expectDriver = host: host is expected" (
      compatHost.all.args == [
        "--expect-driver"
        "host"
      ]
    ))
    (check "the derivations instantiate" (all (n: elem ci.${n}.type [ "derivation" ]) (attrNames ci)))
  ];
in
assert all (c: c) checks;
{
  passed = builtins.length checks;
}
