# The snippets for NixOS users in the README and docs/ (extracted by ./readme-snippets), evaluated as written
# with the stand-ins of ./stub-nixpkgs.nix and ./stubs.nix and this repository's flake as the
# input `cuda-sandbox`. Each must evaluate with no failed assertion and give what it promises:
# a system with cuda-sandbox-hook as Nix's pre-build-hook, or a package whose GPU check the
# NixOS-CUDA Hydra selects (./hydra-cuda-tests.nix).
{
  lib,
  # [ { kind; dir; file; line; } ]
  snippets,
}:
let
  system = "x86_64-linux";
  # cuda_compat available, as on the Jetson the compat snippet is for.
  nixpkgs = import ./stub-nixpkgs.nix {
    inherit lib system;
    extraPackages.cudaPackages.cuda_compat =
      (import ./stubs.nix { inherit lib; }).fakePackage "cuda_compat-12.9"
      // {
        meta.available = true;
      };
  };
  pkgs = nixpkgs.legacyPackages.${system};
  flake = import ../flake.nix;
  cuda-sandbox = flake.outputs {
    self = cuda-sandbox // {
      outPath = toString ../.;
    };
    inherit nixpkgs;
  };
  jobsetSelects = import ./hydra-cuda-tests.nix { inherit lib; };
  fleet = import ../nixos-module/cuda-features.nix { inherit lib; };

  platform = {
    nixpkgs.hostPlatform = system;
  };
  nixosWith =
    modules:
    (nixpkgs.lib.nixosSystem {
      specialArgs = { inherit cuda-sandbox; };
      modules = modules ++ [ platform ];
    }).config;

  # A system as the snippets promise it: the hook is Nix's, nothing failed.
  systemOk =
    where: config:
    let
      failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
    in
    lib.assertMsg (failed == [ ]) "readme-eval: ${where}: failed assertions: ${toString failed}"
    && lib.assertMsg (lib.hasSuffix "/bin/cuda-sandbox-hook" (
      config.nix.settings.pre-build-hook or ""
    )) "readme-eval: ${where}: nix.settings.pre-build-hook is not cuda-sandbox-hook"
    && lib.assertMsg (lib.all (f: lib.elem f config.nix.settings.system-features) (
      lib.concatMap (r: r.features) config.programs.cuda-sandbox.settings.rule
    )) "readme-eval: ${where}: a rule's features are not system features"
    && lib.assertMsg (lib.all (f: lib.elem f config.nix.settings.system-features) (
      config.programs.cuda-sandbox.cudaSystemFeatures
    )) "readme-eval: ${where}: the GPUs' cuda-sm-* features are not system features";

  evaluate =
    snippet:
    let
      where = "${snippet.file}:${toString snippet.line} (${snippet.kind})";
      file = /. + "${snippet.dir}/snippet.nix";
    in
    if snippet.kind == "system-flake" then
      let
        outputs = (import (/. + "${snippet.dir}/flake.nix")).outputs {
          inherit nixpkgs cuda-sandbox;
          self = { };
        };
        # The stand-in nixosSystem takes no platform from the snippet; give it one.
        config =
          (nixpkgs.lib.nixosSystem (
            outputs.nixosConfigurations.gpu-builder.args
            // {
              modules = outputs.nixosConfigurations.gpu-builder.args.modules ++ [ platform ];
            }
          )).config;
      in
      systemOk where config
      && lib.assertMsg config.hardware.nvidia.enabled "readme-eval: ${where}: hardware.nvidia is not enabled"
      && lib.assertMsg config.hardware.graphics.enable "readme-eval: ${where}: hardware.graphics is off"
    else if snippet.kind == "module" then
      # With the flake's module, as a system would import it (once: NixOS imports a file once).
      systemOk where (nixosWith [
        cuda-sandbox.nixosModules.default
        file
      ])
    else if snippet.kind == "module-without-flakes" then
      # Imported by path, not through the flake: the package from package.nix.
      systemOk where (
        (nixpkgs.lib.nixosSystem {
          modules = [
            file
            platform
            { hardware.graphics.enable = true; }
          ];
        }).config
      )
    else if snippet.kind == "module-fragment" then
      let
        body = builtins.readFile file;
        module = builtins.toFile "fragment.nix" ''
          { config, lib, pkgs, ... }:
          {
          ${body}
          }
        '';
      in
      systemOk where (nixosWith [
        cuda-sandbox.nixosModules.default
        (import module)
        {
          programs.cuda-sandbox.enable = true;
          hardware.graphics.enable = true;
        }
      ])
    else if snippet.kind == "client" then
      # A client of GPU builders: each entry that takes `cuda` builds has it mandatory, and
      # its cuda-sm-* features are exactly what `cuda-sandbox-check features` prints for the
      # highest capability among them (a hand-typed list that drops or adds one fails).
      let
        config = nixosWith [ file ];
        gpuMachines = lib.filter (m: lib.elem "cuda" m.supportedFeatures) config.nix.buildMachines;
        isSm = lib.hasPrefix "cuda-sm-";
        baselines =
          m:
          lib.filter (
            row: lib.elem (fleet.mkCudaSystemFeature row.capability) m.supportedFeatures
          ) fleet.rows;
        highest = m: (lib.last (baselines m)).capability;
        smOk = m: lib.filter isSm m.supportedFeatures == fleet.getCudaSystemFeatures [ (highest m) ];
      in
      lib.assertMsg config.nix.distributedBuilds "readme-eval: ${where}: nix.distributedBuilds is off"
      && lib.assertMsg (gpuMachines != [ ]) "readme-eval: ${where}: no builder takes cuda builds"
      && lib.all (
        m:
        lib.assertMsg (
          m.mandatoryFeatures == [ "cuda" ]
        ) "readme-eval: ${where}: ${m.hostName}: mandatoryFeatures is not [ \"cuda\" ]"
        && lib.assertMsg (smOk m) "readme-eval: ${where}: ${m.hostName}: its cuda-sm-* features are not those of ${highest m}"
      ) gpuMachines
    else if snippet.kind == "package" then
      let
        package = pkgs.callPackage file { inherit cuda-sandbox; };
        check = package.tests.selfTest.gpuCheck;
      in
      lib.assertMsg (
        jobsetSelects package == {
          tests.selfTest.gpuCheck = true;
        }
      ) "readme-eval: ${where}: the CUDA Hydra's rule does not select tests.selfTest.gpuCheck"
      && lib.assertMsg (
        check.requiredSystemFeatures == [ "cuda" ] && package.gpuChecks.selfTest.drvPath == check.drvPath
      ) "readme-eval: ${where}: gpuChecks.selfTest is not the tagged tests.selfTest.gpuCheck"
      && lib.assertMsg (
        package.tests.selfTest.meta.mainProgram == "my-app-gpu-check"
      ) "readme-eval: ${where}: the tester has no mainProgram for nix run"
    else
      throw "readme-eval: ${where}: unknown kind";

  kinds = lib.unique (map (s: s.kind) snippets);
in
assert lib.assertMsg (lib.all (k: lib.elem k kinds) [
  "system-flake"
  "module"
  "module-without-flakes"
  "module-fragment"
  "package"
  "client"
]) "readme-eval: the README and docs/ lost a kind of snippet: ${toString kinds}";
assert lib.all evaluate snippets;
{
  evaluated = lib.length snippets;
}
