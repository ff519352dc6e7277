# Evaluation test of flake.nix's outputs, without Nixpkgs: `outputs` is called with a STUB
# `nixpkgs` input whose `lib` is the real Nixpkgs lib and whose package set is the stub below
# (each "package" an attribute set that records how it was made; nothing is built). So this
# checks the flake's shape and wiring — outputs present, the package's build arguments,
# `tests.cuda` made of tests-gpu's checks, mkGpuCheck's derivation, the module's wiring —
# not that the package builds or the VM test passes (those need Nixpkgs: `nix flake check`).
#
#   nix-instantiate --eval --strict nix-tests/flake-eval.nix --arg lib 'import /path/to/nixpkgs.lib/lib'
{ lib }:
let
  system = "x86_64-linux";
  storePath = name: "${builtins.storeDir}/00000000000000000000000000000000-${name}";
  stubDrv =
    name: attrs:
    attrs
    // {
      type = "derivation";
      inherit name system;
      outPath = storePath name;
    };

  pkgs = {
    inherit lib;
    stdenv.hostPlatform.system = system;
    callPackage =
      fn: args:
      let
        f = if builtins.isFunction fn then fn else import fn;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);
    rustPlatform.buildRustPackage =
      args:
      stubDrv "${args.pname}-${args.version}" {
        inherit args;
        fixtures = stubDrv "${args.pname}-${args.version}-fixtures" { };
      };
    autoAddDriverRunpath = stubDrv "auto-add-driver-runpath-hook" { };
    runCommand =
      name: env: script:
      stubDrv name { inherit env script; };
    linkFarm = name: entries: stubDrv name { inherit entries; };
    writeText = name: text: stubDrv name { inherit text; };
    mkShell = args: stubDrv "shell" { inherit args; };
    clippy = stubDrv "clippy" { };
    rustfmt = stubDrv "rustfmt" { };
    rust-analyzer = stubDrv "rust-analyzer" { };
    nixfmt = stubDrv "nixfmt" { };
  };

  nixpkgs = {
    inherit lib;
    legacyPackages.${system} = pkgs;
    outPath = storePath "nixpkgs-stub";
  };

  flake = import ../flake.nix;
  outputs = flake.outputs {
    self = outputs // {
      outPath = toString ../.;
    };
    inherit nixpkgs;
  };

  package = outputs.packages.${system}.default;
  cudaTests = outputs.legacyPackages.${system}.tests.cuda;
  tests-gpu = import ../tests-gpu {
    runner = package;
    inherit system;
    libraryPath = null;
  };

  # A package that adds a GPU check of itself, as the README shows.
  myPackage = stubDrv "my-cuda-app-1.0" { stdenv.hostPlatform.system = system; };
  gpuCheck = outputs.lib.mkGpuCheck {
    package = myPackage;
    expectDriver = "host";
    command = "${myPackage}/bin/my-cuda-app --self-test";
  };
  gpuCheckNoLint = outputs.lib.mkGpuCheck {
    package = myPackage;
    name = "plain";
    features = [ "gpu" ];
    lint = false;
  };

  # The flake's module with the stub NixOS of ./stubs.nix: the package comes from the flake.
  stubs = import ./stubs.nix { inherit lib; };
  nixos =
    (lib.evalModules {
      modules = [
        stubs.module
        outputs.nixosModules.default
        { programs.cuda-sandbox.enable = true; }
      ];
      specialArgs.pkgs = pkgs // stubs.pkgs // { inherit (pkgs) callPackage; };
    }).config;

  members = (lib.importTOML ../Cargo.toml).workspace.members;

  check = what: condition: lib.assertMsg condition "flake-eval: ${what}";

  checks = [
    (check "the flake has the outputs of the issue" (
      lib.all (n: outputs ? ${n}) [
        "packages"
        "overlays"
        "nixosModules"
        "devShells"
        "legacyPackages"
        "lib"
        "checks"
      ]
    ))
    (check "packages: default is cuda-sandbox" (
      outputs.packages.${system}.cuda-sandbox.outPath == package.outPath
    ))
    (check "the package: cargoLock.lockFile is ./Cargo.lock" (
      package.args.cargoLock.lockFile == ../Cargo.lock
    ))
    (check "the package: autoAddDriverRunpath puts the driver link in DT_RUNPATH" (
      lib.elem pkgs.autoAddDriverRunpath package.args.nativeBuildInputs
    ))
    (check "the package's source holds every workspace member" (
      lib.all (m: builtins.pathExists "${package.args.src}/${m}/Cargo.toml") members
    ))
    (check "the package: the fake driver goes to the `fixtures` output" (
      package.args.outputs == [
        "out"
        "fixtures"
      ]
      && lib.hasInfix "mv $out/lib/libfake_*.so $fixtures/lib/" package.args.postInstall
    ))
    (check "overlays.default adds cuda-sandbox" (
      (outputs.overlays.default pkgs pkgs).cuda-sandbox.name == package.name
    ))
    (check "tests.cuda builds all and no-gpu" (
      cudaTests.entries.all.drvPath == tests-gpu.all.drvPath
      && cudaTests.entries.no-gpu.drvPath == tests-gpu.no-gpu.drvPath
    ))
    (check "tests.cuda.<name> is each check of tests-gpu" (
      lib.all (n: cudaTests.${n}.drvPath == tests-gpu.${n}.drvPath) [
        "devices"
        "driver"
        "runtime"
        "kernel"
        "nvml"
        "no-gpu"
      ]
    ))
    (check "tests.cuda: the nixpkgs runner is the builder, without LD_LIBRARY_PATH (DT_RUNPATH)" (
      cudaTests.kernel.builder == "${package}/bin/cuda-sandbox-check"
      && !(cudaTests.kernel ? LD_LIBRARY_PATH)
      && cudaTests.kernel.requiredSystemFeatures == [ "cuda" ]
    ))
    (check "mkGpuCheck: tagged, runs the checks, the lint, then the command" (
      gpuCheck.name == "my-cuda-app-gpu-check"
      && gpuCheck.env.requiredSystemFeatures == [ "cuda" ]
      && gpuCheck.env.nativeBuildInputs == [ package ]
      && lib.hasInfix "cuda-sandbox-check --expect-driver host --report $out/report.json" gpuCheck.script
      && lib.hasInfix "cuda-sandbox-check lint ${myPackage}" gpuCheck.script
      && lib.hasInfix "${myPackage}/bin/my-cuda-app --self-test" gpuCheck.script
    ))
    (check "mkGpuCheck: name, features and lint = false" (
      gpuCheckNoLint.name == "plain"
      && gpuCheckNoLint.env.requiredSystemFeatures == [ "gpu" ]
      && !(lib.hasInfix "lint" gpuCheckNoLint.script)
    ))
    (check "nixosModules.default: the hook is the flake's package" (
      nixos.nix.settings.pre-build-hook == "${package}/bin/cuda-sandbox-hook"
    ))
    (check "checks: CPU checks and the VM test" (
      builtins.attrNames outputs.checks.${system} == [
        "module-eval"
        "nixos-config"
        "package"
        "vm"
      ]
    ))
    (check "devShells.default" (outputs.devShells.${system}.default.name == "shell"))
  ];
in
assert lib.all lib.id checks;
{
  passed = lib.length checks;
}
